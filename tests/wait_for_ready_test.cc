// Wait-for-ready (CallOptions::wait_for_ready, as gRPC's): while a channel
// backs off after a failed connect, an ordinary call fails at once with
// UNAVAILABLE, and a wait-for-ready call waits for a later connect, or for
// its deadline.
#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>

#include "tests/support/test_support.h"

namespace rdmarpc::testing {
namespace {

constexpr rpc::MethodRef kEcho("test.Test", "Echo");

// A loopback URI with nothing listening on it (for now).
std::string UnusedUri() {
  LoopbackListener probe;  // Picks a free port, then frees it.
  return probe.uri();
}

rpc::ChannelOptions QuickBackoff() {
  rpc::ChannelOptions options;
  options.initial_backoff = 200ms;
  options.max_backoff = 400ms;
  return options;
}

// Puts `channel` into backoff: a first call finds nothing listening.
void FailFirstConnect(rpc::Channel& channel) {
  const CallResult refused = CallSync(channel, kEcho, "x");
  REQUIRE(refused.status.code() == StatusCode::kUnavailable);
  REQUIRE(channel.state() == rpc::ChannelState::kTransientFailure);
}

TEST_CASE("wait-for-ready: an ordinary call fails fast while backing off") {
  rpc::Channel channel(UnusedUri(), QuickBackoff());
  FailFirstConnect(channel);
  const auto start = std::chrono::steady_clock::now();
  const CallResult result =
      CallSync(channel, kEcho, "x", rpc::CallOptions::WithTimeout(10s));
  CHECK(result.status.code() == StatusCode::kUnavailable);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
}

TEST_CASE(
    "wait-for-ready: a call waits through failed connects, then is "
    "sent once the server is up") {
  const std::string uri = UnusedUri();
  rpc::Channel channel(uri, QuickBackoff());
  FailFirstConnect(channel);

  rpc::CallOptions options = rpc::CallOptions::WithTimeout(30s);
  options.wait_for_ready = true;
  std::promise<CallResult> done;
  channel.Call(kEcho, Buffer::CopyOf("waited"), options,
               [&](const Status& status, Buffer response) {
                 done.set_value({status, std::string(response.view())});
               });
  auto future = done.get_future();
  // Several connects fail (backoff 200-400 ms); the call keeps waiting.
  CHECK(future.wait_for(1500ms) == std::future_status::timeout);
  CHECK(channel.stats().connect_failures >= 2);

  // The server comes up on that address: the call goes through.
  TestService service;
  rpc::Server server;
  server.RegisterService(&service);
  REQUIRE(server.Listen(uri).ok());
  REQUIRE(future.wait_for(20s) == std::future_status::ready);
  const CallResult result = future.get();
  INFO(result.status.ToString());
  CHECK(result.status.ok());
  CHECK(result.response == "waited");
}

TEST_CASE("wait-for-ready: with no server, the call ends at its deadline") {
  rpc::Channel channel(UnusedUri(), QuickBackoff());
  FailFirstConnect(channel);
  rpc::CallOptions options = rpc::CallOptions::WithTimeout(1s);
  options.wait_for_ready = true;
  const CallResult result = CallSync(channel, kEcho, "x", options);
  CHECK(result.status.code() == StatusCode::kDeadlineExceeded);
}

TEST_CASE("Connect: a channel comes up before its first call") {
  TestServer server;
  rpc::Channel channel(server.uri);
  CHECK(channel.state() == rpc::ChannelState::kIdle);
  channel.Connect();
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (channel.state() != rpc::ChannelState::kReady &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(1ms);
  }
  REQUIRE(channel.state() == rpc::ChannelState::kReady);
  CHECK(channel.stats().connects == 1);
  channel.Connect();  // Ready already: nothing.
  const CallResult result = CallSync(channel, kEcho, "warm");
  CHECK(result.status.ok());
  CHECK(channel.stats().connects == 1);  // The call found it up.
}

}  // namespace
}  // namespace rdmarpc::testing
