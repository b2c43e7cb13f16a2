// Keepalive (transport/keepalive.h): a dead peer is noticed on an idle or a
// busy connection, by a client and by a server, and a live one never is.
// Intervals are shortened here; the defaults are in include/rdmarpc/tunables.h.
// The [tcp] cases use raw sockets; the others run over rdma:// in the VM too,
// and tools/softroce/link-suite takes a real link down under an open
// connection.
#include "transport/keepalive.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "tests/support/test_support.h"
#include "transport/uri.h"

namespace rdmarpc::testing {
namespace {

using transport::KeepaliveClock;

constexpr auto kInterval = 100ms;
constexpr auto kTimeout = 400ms;
constexpr rpc::MethodRef kEcho("test.Test", "Echo");
constexpr rpc::MethodRef kSleepMs("test.Test", "SleepMs");

transport::TransportOptions Keepalive() {
  transport::TransportOptions options;
  options.keepalive_interval = kInterval;
  options.keepalive_timeout = kTimeout;
  return options;
}

rpc::ChannelOptions ChannelWithKeepalive() {
  rpc::ChannelOptions options;
  options.transport = Keepalive();
  return options;
}

rpc::ServerOptions ServerWithKeepalive() {
  rpc::ServerOptions options;
  options.transport = Keepalive();
  return options;
}

TEST_CASE(
    "keepalive: the clock pings after an interval of silence, then "
    "gives up at the timeout") {
  KeepaliveClock clock(100ms, 400ms);
  CHECK(clock.enabled());
  CHECK(clock.Tick(10) == KeepaliveClock::Action::kNone);  // Bytes arrived.
  CHECK(clock.Tick(10) == KeepaliveClock::Action::kPing);
  CHECK(clock.Tick(20) == KeepaliveClock::Action::kNone);  // The PONG.
  CHECK(clock.Tick(20) == KeepaliveClock::Action::kPing);
  CHECK(clock.Tick(20) == KeepaliveClock::Action::kPing);
  CHECK(clock.Tick(20) == KeepaliveClock::Action::kPing);
  CHECK(clock.Tick(20) == KeepaliveClock::Action::kDead);
  CHECK(clock.DeadPeer("tcp://x:1").code() == StatusCode::kDeadlineExceeded);
  // The peer's PINGs alone (a link that fails one way) are no sign of life.
  KeepaliveClock one_way(100ms, 200ms);
  CHECK(one_way.Tick(0) == KeepaliveClock::Action::kPing);
  one_way.PingReceived(17);
  CHECK(one_way.Tick(17) == KeepaliveClock::Action::kDead);
  CHECK(!KeepaliveClock(0ms, 0ms).enabled());
}

TEST_CASE("keepalive: an idle connection to a live server stays up") {
  TestServer server(ServerWithKeepalive());
  rpc::Channel channel(server.uri, ChannelWithKeepalive());
  REQUIRE(CallSync(channel, kEcho, "a").status.ok());
  std::this_thread::sleep_for(10 * kTimeout);  // Idle well past the timeout.
  REQUIRE(CallSync(channel, kEcho, "b").status.ok());
  CHECK(channel.stats().connects == 1);
  CHECK(server.stats().peers_timed_out == 0);
  // Both sides pinged while idle, and each answered the other.
  CHECK(server.keepalive_pings() > 0);
}

TEST_CASE("keepalive: a busy connection waiting on a slow call stays up") {
  // Nothing comes back for 5 timeouts but PONGs: the call still succeeds.
  TestServer server(ServerWithKeepalive());
  rpc::Channel channel(server.uri, ChannelWithKeepalive());
  const auto wait =
      std::chrono::duration_cast<std::chrono::milliseconds>(5 * kTimeout);
  const CallResult result =
      CallSync(channel, kSleepMs, std::to_string(wait.count()));
  INFO(result.status.ToString());
  CHECK(result.status.ok());
  CHECK(channel.stats().connects == 1);
}

TEST_CASE(
    "keepalive: a call to a hung server fails UNAVAILABLE without a "
    "deadline",
    "[tcp]") {
  // It accepts and never sends a byte: a hung process, or a host that
  // vanished behind a kernel that still ACKs.
  LoopbackListener hung;
  rpc::Channel channel(hung.uri(), ChannelWithKeepalive());
  std::promise<Status> done;
  const auto start = std::chrono::steady_clock::now();
  channel.Call(kEcho, Buffer::CopyOf("anyone?"), rpc::CallOptions{},
               [&](const Status& status, Buffer) { done.set_value(status); });
  auto future = done.get_future();
  REQUIRE(future.wait_for(30s) == std::future_status::ready);
  const Status status = future.get();
  const auto took = std::chrono::steady_clock::now() - start;
  INFO(status.ToString());
  CHECK(status.code() == StatusCode::kUnavailable);
  CHECK(status.message().find("keepalive") != std::string::npos);
  // Within the timeout and an interval, with room for a slow machine.
  CHECK(took >= kTimeout);
  CHECK(took < 10 * (kTimeout + kInterval));
  // Counted for the admin endpoint's rdmarpc_client_keepalive_timeouts.
  CHECK(channel.stats().keepalive_timeouts == 1);
  CHECK(channel.stats().disconnects == 1);
}

TEST_CASE(
    "keepalive: a server frees the connection of a client that went "
    "silent",
    "[tcp]") {
  TestServer server(ServerWithKeepalive());
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(transport::ParseUri(server.uri)->port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) ==
          0);
  REQUIRE(WaitFor([&] { return server.stats().connections == 1; }));
  // The client answers nothing, not even the server's PINGs.
  CHECK(WaitFor([&] { return server.stats().connections == 0; }));
  CHECK(server.stats().peers_timed_out == 1);
  close(fd);
}

}  // namespace
}  // namespace rdmarpc::testing
