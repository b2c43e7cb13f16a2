// The echo client: //examples/echo:client --uri URI --count N --size BYTES
//                   [--wire 1]
// Sends N echo calls of BYTES each (one at a time), checks every reply and
// prints latency percentiles; with --wire 1, then the server's counters of
// what crossed the wire (examples/common/wire.h).
#include <algorithm>
#include <boost/asio/use_future.hpp>
#include <cstdio>
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
  auto channel = std::make_shared<rpc::Channel>(uri);
  examples::Echo::Stub stub(channel);

  examples::EchoRequest request;
  request.set_payload(std::string(static_cast<size_t>(size), 'e'));
  std::vector<double> micros;
  micros.reserve(static_cast<size_t>(count));
  for (long long i = 0; i < count; ++i) {
    const auto start = rpc::Clock::now();
    auto [status, reply] =
        stub.async_Say(request,
                       rpc::CallOptions::WithTimeout(std::chrono::seconds(30)),
                       boost::asio::use_future)
            .get();
    const std::chrono::duration<double, std::micro> took =
        rpc::Clock::now() - start;
    if (!status.ok()) {
      std::fprintf(stderr, "echo client: call %lld: %s\n", i,
                   status.ToString().c_str());
      return 1;
    }
    if (reply.payload() != request.payload()) {
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
      "%lld calls of %lld bytes to %s: p50 %.1f us, p99 %.1f us, max %.1f us\n",
      count, size, uri.c_str(), pct(0.5), pct(0.99), micros.back());
  if (flags.GetInt("wire", 0) != 0) return examples::PrintWire(channel);
  return 0;
}
