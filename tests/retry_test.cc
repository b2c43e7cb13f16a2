// Retries and hedging (include/rdmarpc/retry_options.h), counted on the
// servers: a call runs twice only where its policy allows it (an idempotent
// method), a call refused before it ran is sent again whatever its method, the
// budget bounds what retries add, and a hedge answers for a slow server.
#include <catch2/catch_test_macros.hpp>
#include <future>
#include <thread>

#include "rdmarpc/channel.h"
#include "rdmarpc/server.h"
#include "tests/support/test_support.h"

namespace rdmarpc::testing {
namespace {

constexpr rpc::MethodRef kFlaky("test.Retry", "Flaky");
constexpr rpc::MethodRef kFlakyIdempotent("test.Retry", "Flaky",
                                          rpc::MethodRef::kIdempotent);
constexpr rpc::MethodRef kSlowIdempotent("test.Retry", "Slow",
                                         rpc::MethodRef::kIdempotent);

// "Flaky" fails UNAVAILABLE for its first `failures` runs, then succeeds;
// "Slow" sleeps `slow_ms` on a handler thread, then succeeds. Both count
// their runs.
class RetryService : public rpc::Service {
 public:
  explicit RetryService(int failures = 0, int slow_ms = 0)
      : Service("test.Retry"), failures_(failures), slow_ms_(slow_ms) {
    AddMethod("Flaky", [this](std::shared_ptr<rpc::ServerCall> call) {
      if (runs++ < failures_) {
        return call->Finish(Status(StatusCode::kUnavailable, "flaky"));
      }
      call->Finish(Status(), Buffer::CopyOf("ok"));
    });
    AddMethod("Slow", [this](std::shared_ptr<rpc::ServerCall> call) {
      ++runs;
      std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms_));
      call->Finish(Status(), Buffer::CopyOf("slow"));
    });
  }
  std::atomic<int> runs{0};

 private:
  const int failures_;
  const int slow_ms_;
};

struct RetryServer {
  explicit RetryServer(int failures = 0, int slow_ms = 0,
                       rpc::ServerOptions options = Threaded())
      : service(failures, slow_ms), server(options) {
    server.RegisterService(&service);
    auto bound = server.Listen(ListenUri());
    if (!bound.ok()) throw std::runtime_error(bound.status().ToString());
    uri = *bound;
  }
  static rpc::ServerOptions Threaded() {
    rpc::ServerOptions options;
    options.handler_threads = 4;
    return options;
  }
  RetryService service;
  rpc::Server server;
  std::string uri;
};

CallResult Call(rpc::Channel& channel, const rpc::MethodRef& method,
                rpc::CallOptions options = rpc::CallOptions::WithTimeout(10s)) {
  return CallSync(channel, method, "x", std::move(options));
}

rpc::ChannelOptions WithRetries(int attempts) {
  rpc::ChannelOptions options;
  options.retry.max_attempts = attempts;
  options.retry.initial_backoff = 5ms;
  return options;
}

TEST_CASE("retry: an idempotent call is sent again, as often as allowed") {
  RetryServer server(/*failures=*/2);
  rpc::Channel channel(server.uri, WithRetries(3));
  const CallResult result = Call(channel, kFlakyIdempotent);
  CHECK(result.status.ok());
  CHECK(result.response == "ok");
  CHECK(server.service.runs == 3);
  CHECK(channel.stats().retries == 2);

  // Two attempts are not enough for two failures: the last answer stands.
  RetryServer again(/*failures=*/2);
  rpc::Channel two(again.uri, WithRetries(2));
  CHECK(Call(two, kFlakyIdempotent).status.code() == StatusCode::kUnavailable);
  CHECK(again.service.runs == 2);
}

TEST_CASE("retry: a call that ran is not sent again unless idempotent") {
  RetryServer server(/*failures=*/1);
  rpc::Channel channel(server.uri, WithRetries(5));
  CHECK(Call(channel, kFlaky).status.code() == StatusCode::kUnavailable);
  CHECK(server.service.runs == 1);
  CHECK(channel.stats().retries == 0);
  // By name, a method is not known to be idempotent either.
  CHECK(CallSync(channel, "Flaky", "x", {}, "test.Retry").status.ok());
  CHECK(server.service.runs == 2);
}

TEST_CASE("retry: a call refused before it ran is sent again, any method") {
  rpc::ServerOptions options = RetryServer::Threaded();
  options.max_concurrency = 1;
  RetryServer server(/*failures=*/0, /*slow_ms=*/200, options);
  rpc::ChannelOptions channel_options = WithRetries(4);
  channel_options.retry.initial_backoff = 150ms;
  rpc::Channel channel(server.uri, channel_options);
  rpc::Channel plain(server.uri);
  std::promise<Status> slow;
  plain.Call(
      kSlowIdempotent, Buffer::CopyOf("x"), rpc::CallOptions::WithTimeout(5s),
      [&slow](const Status& status, rpc::Payload) { slow.set_value(status); });
  REQUIRE(WaitFor([&] { return server.server.stats().live_calls == 1; }));
  // Shed (RESOURCE_EXHAUSTED, not run), then sent again once the slow call
  // has ended: it runs once.
  const CallResult result = Call(channel, kFlaky);
  CHECK(result.status.ok());
  CHECK(server.server.stats().calls_shed >= 1);
  CHECK(channel.stats().retries >= 1);
  CHECK(slow.get_future().get().ok());
  CHECK(server.service.runs == 2);  // The slow call and this one, once.
}

TEST_CASE("retry: a call that was never sent is sent again, any method") {
  // One endpoint refuses connections; the cluster's other one serves.
  std::string dead;
  {
    RetryServer gone;
    dead = gone.uri;
  }
  RetryServer server;
  rpc::ChannelOptions options = WithRetries(3);
  rpc::Channel channel(dead, options);
  // A single server that is down: each attempt fails before it is sent,
  // and so each is retried, until the attempts run out.
  const CallResult result = Call(channel, kFlaky);
  CHECK(result.status.code() == StatusCode::kUnavailable);
  CHECK(channel.stats().retries == 2);
}

TEST_CASE("retry: the budget bounds what retries add") {
  RetryServer server(/*failures=*/1000000);
  rpc::ChannelOptions options = WithRetries(5);
  options.retry.initial_backoff = 1ms;
  options.retry_budget.ratio = 0.1;
  options.retry_budget.reserve_per_second = 0;
  options.retry_budget.max_tokens = 3;
  rpc::Channel channel(server.uri, options);
  for (int i = 0; i < 40; ++i) {
    CHECK(Call(channel, kFlakyIdempotent).status.code() ==
          StatusCode::kUnavailable);
  }
  // Without a budget: 200 runs. With it: 40 calls, the 3 tokens it starts
  // with, and 0.1 per call.
  CHECK(server.service.runs <= 40 + 3 + 4);
  CHECK(server.service.runs >= 40 + 3);
  CHECK(channel.stats().retries_throttled > 0);
}

TEST_CASE("retry: a hedge answers for a slow server") {
  RetryServer slow(/*failures=*/0, /*slow_ms=*/2000);
  RetryServer fast(/*failures=*/0, /*slow_ms=*/0);
  rpc::ChannelOptions options = WithRetries(2);
  options.retry.hedging_delay = 50ms;
  rpc::Channel channel("list://" + slow.uri + "," + fast.uri, options);
  // Connect both; then round robin starts with one, the hedge goes to the
  // other.
  REQUIRE(Call(channel, kFlaky).status.ok());
  REQUIRE(WaitFor([&] {
    size_t connected = 0;
    for (const auto& endpoint : channel.endpoints()) {
      connected += endpoint.connected;
    }
    return connected == 2;
  }));
  const int fast_before = fast.service.runs;
  for (int i = 0; i < 4; ++i) {
    const auto started = rpc::Clock::now();
    const CallResult result = Call(channel, kSlowIdempotent);
    CHECK(result.status.ok());
    CHECK(rpc::Clock::now() - started < 1500ms);
  }
  CHECK(fast.service.runs - fast_before == 4);  // Each call once there.
  CHECK(channel.stats().hedges >= 2);  // The calls that went slow first.
}

}  // namespace
}  // namespace rdmarpc::testing
