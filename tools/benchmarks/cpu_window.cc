// The client side of tools/bench-cpu: warm up, then N echo calls with K
// outstanding inside a measurement window (callgrind instrumentation on in
// both processes, the server told by a Window call; marker syscalls for
// strace). Two call paths:
//   generic  Channel::Call with a MethodRef to the bench service's Echo, the
//            request's bytes borrowed from a registered arena;
//   typed    the generated stub of examples/echo (Echo::Stub::async_Say with
//            a callback), protobuf messages in and out, as an application
//            written against a .proto calls.
// --extra-per-call N spins N iterations of an empty loop in each call's
// completion: the instruction ratchet's self-test (tools/bench-cpu --check)
// adds it to prove that a few percent more work per call is caught.
#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <span>
#include <string>

#include "examples/echo/echo.rdmarpc.h"
#include "tools/benchmarks/bench.h"
#include "tools/benchmarks/poll_flag.h"

namespace rdmarpc::bench {
namespace {

// `iterations` turns of a loop the compiler must keep.
void Spin(long long iterations) {
  for (long long i = 0; i < iterations; ++i) asm volatile("" ::: "memory");
}

// ClosedLoop over the generated stub: Say calls on `stub`.
uint64_t RunTypedCalls(examples::Echo::Stub& stub, rpc::Channel& channel,
                       long long n, int k, const examples::EchoRequest& request,
                       const std::function<void(long long)>& on_done = {}) {
  return ClosedLoop(
      channel, n, k,
      [&](const auto& end) {
        stub.async_Say(
            request, [&end](const Status& status, const examples::EchoReply&) {
              end(status);
            });
      },
      on_done);
}

}  // namespace

int CpuWindow(const rdmarpc::Flags& flags) {
  const long long calls = flags.GetInt("cpu-window", 10000);
  const int outstanding = static_cast<int>(flags.GetInt("outstanding", 1));
  const size_t size = static_cast<size_t>(flags.GetInt("size", 16));
  const bool typed = flags.Get("path", "generic") == "typed";
  const long long extra = flags.GetInt("extra-per-call", 0);
  Options options;
  options.uri = flags.Get("uri", "");
  options.poll = PollModeOrExit(flags.Get("poll", "event"), "bench");
  options.tls = TlsFromFlags(flags);
  auto channel =
      std::make_shared<rpc::Channel>(options.uri, ChannelOptionsFor(options));
  const auto control = [](const char* word) {
    return [word] {
      return Buffer::Borrow(std::as_bytes(std::span(word, std::strlen(word))));
    };
  };
  const long long warmup = std::max<long long>(calls / 5, 1000);
  uint64_t failed = 0;
  // The completion sees no extra callback unless asked: none is on the path
  // the baseline counts.
  std::function<void(long long)> on_done;
  if (extra > 0) on_done = [extra](long long) { Spin(extra); };
  if (typed) {
    examples::Echo::Stub stub(channel);
    examples::EchoRequest request;
    request.set_payload(std::string(size, 'x'));
    failed += RunTypedCalls(stub, *channel, warmup, outstanding, request);
    failed += RunCalls(*channel, 1, 1, kWindow, control("start"));
    Window(true);
    failed +=
        RunTypedCalls(stub, *channel, calls, outstanding, request, on_done);
    Window(false);
  } else {
    auto arena = Arena(size);
    const auto echo = [&] { return Payload(*arena, size); };
    failed += RunCalls(*channel, warmup, outstanding, kEcho, echo);
    failed += RunCalls(*channel, 1, 1, kWindow, control("start"));
    Window(true);
    failed += RunCalls(*channel, calls, outstanding, kEcho, echo, {}, on_done);
    Window(false);
  }
  failed += RunCalls(*channel, 1, 1, kWindow, control("stop"));
  std::printf(
      "cpu window: %lld %s calls of %zu B, %d outstanding, %llu failed\n",
      calls, typed ? "typed" : "generic", size, outstanding,
      static_cast<unsigned long long>(failed));
  return failed == 0 ? 0 : 1;
}

}  // namespace rdmarpc::bench
