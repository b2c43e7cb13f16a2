// The echo client: //examples/echo:client --uri URI --count N --size BYTES
//                   [--attachment 1] [--wire 1]
//                   [--tls-ca FILE [--tls-cert FILE --tls-key FILE]]
// Sends N echo calls of BYTES each (one at a time), checks every reply and
// prints latency percentiles. The bytes go in the request's `payload` field,
// or with --attachment 1 beside it as an attachment
// (include/rdmarpc/payload.h), which protobuf never copies. With --wire 1, then
// prints the server's counters of what crossed the wire
// (examples/common/wire.h).
#include <algorithm>
#include <boost/asio/use_future.hpp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "examples/common/flags.h"
#include "examples/common/wire.h"
#include "examples/echo/echo.rdmarpc.h"

int main(int argc, char** argv) {
  using namespace rdmarpc;
  const examples::Flags flags(argc, argv);
  const std::string uri = flags.Get("uri", "auto://127.0.0.1:5000");
  const long long count = flags.GetInt("count", 10);
  const long long size = flags.GetInt("size", 16);
  if (count < 1 || size < 0) {
    std::fprintf(stderr, "echo client: --count must be >= 1, --size >= 0\n");
    return 2;
  }
  rpc::ChannelOptions options;
  options.transport.tls = flags.Tls(/*server=*/false);
  auto channel = std::make_shared<rpc::Channel>(uri, options);
  examples::Echo::Stub stub(channel);

  const bool attach = flags.GetInt("attachment", 0) != 0;
  const std::string bytes(static_cast<size_t>(size), 'e');
  examples::EchoRequest request;
  if (!attach) request.set_payload(bytes);
  std::vector<double> micros;
  micros.reserve(static_cast<size_t>(count));
  for (long long i = 0; i < count; ++i) {
    const auto start = rpc::Clock::now();
    rpc::ClientContext context(
        rpc::CallOptions::WithTimeout(std::chrono::seconds(30)));
    if (attach) {
      context.set_request_attachment(
          Buffer::Borrow(std::as_bytes(std::span(bytes))));
    }
    auto [status, reply] =
        stub.async_Say(context, request, boost::asio::use_future).get();
    const std::chrono::duration<double, std::micro> took =
        rpc::Clock::now() - start;
    if (!status.ok()) {
      std::fprintf(stderr, "echo client: call %lld: %s\n", i,
                   status.ToString().c_str());
      return 1;
    }
    if (reply.payload() != request.payload() ||
        context.response_attachment().view() != (attach ? bytes : "")) {
      std::fprintf(stderr, "echo client: call %lld: reply differs\n", i);
      return 1;
    }
    micros.push_back(took.count());
  }
  std::sort(micros.begin(), micros.end());
  auto pct = [&](double p) {
    return micros[std::min(micros.size() - 1,
                           static_cast<size_t>(p * micros.size()))];
  };
  std::printf(
      "%lld calls of %lld bytes%s to %s: p50 %.1f us, p99 %.1f us, max %.1f "
      "us\n",
      count, size, attach ? " (attachment)" : "", uri.c_str(), pct(0.5),
      pct(0.99), micros.back());
  if (flags.GetInt("wire", 0) != 0) return examples::PrintWire(channel);
  return 0;
}
