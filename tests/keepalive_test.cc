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

#include <array>
#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/log_throttle.h"
#include "tests/support/raw_client.h"
#include "tests/support/test_support.h"
#include "transport/uri.h"

namespace rdmarpc::testing {
namespace {

using transport::KeepaliveClock;

constexpr auto kInterval = 100ms;
constexpr auto kTimeout = 400ms;
constexpr rpc::MethodRef kEcho("test.Test", "Echo");
constexpr rpc::MethodRef kSleepMs("test.Test", "SleepMs");
constexpr rpc::MethodRef kIdempotentEcho("test.Test", "Echo",
                                         /*idempotent=*/true);

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

bool SendAll(int fd, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes = bytes.subspan(static_cast<size_t>(n));
  }
  return true;
}

// A raw TCP client of `uri` (on loopback), its receive buffer at most
// `receive_buffer` bytes if non-zero, that has sent its HELLO (unless
// `greet` is false); -1 on failure.
int ConnectRaw(const std::string& uri, int receive_buffer = 0,
               bool greet = true) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (receive_buffer > 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer,
               sizeof(receive_buffer));
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(transport::ParseUri(uri)->port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
      0) {
    close(fd);
    return -1;
  }
  if (greet && !SendAll(fd, transport::TcpControlFrame(
                                transport::KeepaliveKind::kHello))) {
    close(fd);
    return -1;
  }
  return fd;
}

// `count` keepalive PINGs as a TCP peer writes them.
std::vector<std::byte> Pings(size_t count) {
  const transport::EncodedPrefix prefix = transport::EncodeFramePrefix(
      {.type = transport::FrameType::kControl, .header_size = 1});
  std::vector<std::byte> bytes;
  bytes.reserve(count * (prefix.size() + 1));
  for (size_t i = 0; i < count; ++i) {
    bytes.insert(bytes.end(), prefix.begin(), prefix.end());
    bytes.push_back(
        std::byte{static_cast<uint8_t>(transport::KeepaliveKind::kPing)});
  }
  return bytes;
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
  one_way.PingReceived(17, std::chrono::steady_clock::now());
  CHECK(one_way.Tick(17) == KeepaliveClock::Action::kDead);
  CHECK(!KeepaliveClock(0ms, 0ms).enabled());
}

TEST_CASE(
    "keepalive: the clock gives up on a frame still in progress after "
    "frame_timeout") {
  KeepaliveClock clock(100ms, 10000ms, 50ms, 300ms);
  uint64_t bytes = 0;
  // Bytes trickle in (no keepalive death), all of frame 7.
  CHECK(clock.Tick(bytes += 1, 7) == KeepaliveClock::Action::kNone);
  CHECK(clock.Tick(bytes += 1, 7) == KeepaliveClock::Action::kNone);
  CHECK(clock.Tick(bytes += 1, 7) == KeepaliveClock::Action::kNone);
  CHECK(clock.Tick(bytes += 1, 7) == KeepaliveClock::Action::kSlowFrame);
  CHECK(clock.SlowFrame("tcp://x:1").code() == StatusCode::kDeadlineExceeded);
  // Frames that each complete between ticks are never too slow.
  KeepaliveClock busy(100ms, 10000ms, 50ms, 300ms);
  for (uint64_t frame = 0; frame < 10; ++frame) {
    CHECK(busy.Tick(bytes += 1, frame) == KeepaliveClock::Action::kNone);
  }
  // Nor is a frame when there is none in progress between.
  KeepaliveClock gaps(100ms, 10000ms, 50ms, 300ms);
  for (int i = 0; i < 10; ++i) {
    CHECK(gaps.Tick(bytes += 1, 7) == KeepaliveClock::Action::kNone);
    CHECK(gaps.Tick(bytes += 1) == KeepaliveClock::Action::kNone);
  }
  // 0 turns it off.
  KeepaliveClock off(100ms, 10000ms, 50ms, 0ms);
  for (int i = 0; i < 10; ++i) {
    CHECK(off.Tick(bytes += 1, 7) == KeepaliveClock::Action::kNone);
  }
}

TEST_CASE(
    "keepalive: a peer may ping kMaxPingStrikes times in a row too soon, "
    "not more") {
  KeepaliveClock clock(2000ms, 8000ms, 50ms);
  auto t = std::chrono::steady_clock::now();
  CHECK(clock.PingReceived(17, t));         // The first is never a strike.
  CHECK(clock.PingReceived(17, t + 10ms));  // Strike 1.
  CHECK(clock.PingReceived(17, t + 20ms));  // Strike 2.
  CHECK(clock.PingReceived(17, t + 80ms));  // 60 ms apart: strikes reset.
  CHECK(clock.PingReceived(17, t + 90ms));
  CHECK(clock.PingReceived(17, t + 100ms));
  CHECK_FALSE(clock.PingReceived(17, t + 110ms));  // Strike 3.
  CHECK(clock.TooManyPings("tcp://x:1").code() ==
        StatusCode::kResourceExhausted);
  // A minimum of 0 lets a peer ping as often as it likes.
  KeepaliveClock unlimited(2000ms, 8000ms, 0ms);
  for (int i = 0; i < 100; ++i) CHECK(unlimited.PingReceived(17, t));
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

// Calls kEcho on `channel` without a deadline: its status and how long it
// took.
std::pair<Status, std::chrono::steady_clock::duration> TimedCall(
    rpc::Channel& channel, rpc::MethodRef method = kEcho) {
  std::promise<Status> done;
  const auto start = std::chrono::steady_clock::now();
  channel.Call(method, Buffer::CopyOf("anyone?"), rpc::CallOptions{},
               [&](const Status& status, Buffer) { done.set_value(status); });
  auto future = done.get_future();
  if (future.wait_for(60s) != std::future_status::ready) {
    return {Status(StatusCode::kInternal, "no answer in 60 s"), 60s};
  }
  const Status status = future.get();
  return {status, std::chrono::steady_clock::now() - start};
}

TEST_CASE(
    "keepalive: a call to a server that accepts and never greets fails "
    "UNAVAILABLE within keepalive_timeout",
    "[tcp]") {
  // It accepts and never sends a byte: a hung process (the kernel accepts
  // for it), or a host that vanished behind a kernel that still ACKs. The
  // connect waits keepalive_timeout for its HELLO, not connect_timeout (10
  // s), as for any peer gone silent.
  LoopbackListener hung;
  rpc::Channel channel(hung.uri(), ChannelWithKeepalive());
  const auto [status, took] = TimedCall(channel);
  INFO(status.ToString());
  CHECK(status.code() == StatusCode::kUnavailable);
  CHECK(status.message().find("sent no HELLO within 400 ms "
                              "(keepalive_timeout)") != std::string::npos);
  CHECK(took >= kTimeout);
  CHECK(took < 10 * kTimeout);  // Room for a slow machine.
  CHECK(channel.stats().connects == 0);
  CHECK(channel.stats().connect_failures == 1);
}

// A server that greets its first client, then hangs (SIGSTOP): the kernel
// still accepts for it, and it never sends another byte.
class HungServer {
 public:
  HungServer()
      : thread_([this] {
          client_ = listener_.Accept();
          SendAll(client_,
                  transport::TcpControlFrame(transport::KeepaliveKind::kHello));
        }) {}
  ~HungServer() {
    thread_.join();
    close(client_);
  }
  std::string uri() const { return listener_.uri(); }

 private:
  LoopbackListener listener_;
  int client_ = -1;
  std::thread thread_;
};

TEST_CASE(
    "keepalive: a call to a server that hangs fails UNAVAILABLE without a "
    "deadline, its retries without connecting again",
    "[tcp]") {
  HungServer hung;
  rpc::ChannelOptions options = ChannelWithKeepalive();
  // Retried well past the keepalive timeout if each retry connected again
  // and waited out connect_timeout for a HELLO.
  options.retry.max_attempts = 5;
  options.retry.initial_backoff = 20ms;
  rpc::Channel channel(hung.uri(), options);
  const auto [status, took] = TimedCall(channel, kIdempotentEcho);
  INFO(status.ToString());
  CHECK(status.code() == StatusCode::kUnavailable);
  CHECK(status.message().find("keepalive") != std::string::npos);
  // Within the timeout and an interval, with room for a slow machine, but
  // less than another connect_timeout (10 s).
  CHECK(took >= kTimeout);
  CHECK(took < 5 * (kTimeout + kInterval));
  // Counted for the admin endpoint's rdmarpc_client_keepalive_timeouts.
  CHECK(channel.stats().keepalive_timeouts == 1);
  CHECK(channel.stats().disconnects == 1);
  CHECK(channel.stats().connects == 1);
  CHECK(channel.stats().connect_failures == 0);
}

TEST_CASE(
    "keepalive: a server closes a connection whose HELLO does not arrive "
    "within connect_timeout",
    "[tcp]") {
  LogCapture log;
  rpc::ServerOptions options;
  options.transport.connect_timeout = 300ms;
  TestServer server(options);
  const int fd = ConnectRaw(server.uri, 0, /*greet=*/false);
  REQUIRE(fd >= 0);
  REQUIRE(WaitFor([&] { return server.stats().connections == 1; }));
  CHECK(WaitFor([&] { return server.stats().connections == 0; }));
  CHECK(log.Contains("no HELLO from"));
  close(fd);
}

uint64_t QueuedBytes(TestServer& server) {
  uint64_t queued = 0;
  server.server.ForEachConnection(
      [&](const transport::Connection& c) { queued += c.queued_bytes(); });
  return queued;
}

TEST_CASE(
    "keepalive: a peer that pings and never reads has one PONG queued, not "
    "one per PING",
    "[tcp]") {
  rpc::ServerOptions options;
  options.transport.min_ping_interval = 0ms;  // Only the PONGs are tested.
  TestServer server(options);
  const int fd = ConnectRaw(server.uri, 4096);
  REQUIRE(fd >= 0);
  // 1 M PINGs, 17 MB: the first PONGs fill the socket buffers (a few MB on
  // loopback), and every one after that would queue.
  const std::vector<std::byte> pings = Pings(1 << 16);
  for (int i = 0; i < 16; ++i) REQUIRE(SendAll(fd, pings));
  const uint64_t bytes = 16 * pings.size();
  uint64_t received = 0;
  REQUIRE(WaitFor([&] {
    received = 0;
    server.server.ForEachConnection([&](const transport::Connection& c) {
      received += c.stats().bytes_received;
    });
    return received >= bytes;
  }));
  INFO("queued: " << QueuedBytes(server));
  // One PONG, or two, at what a queue entry costs (a few hundred bytes);
  // one per PING was 1 M of them.
  CHECK(QueuedBytes(server) <= 2048);
  CHECK(server.stats().connections == 1);
  close(fd);
}

TEST_CASE(
    "keepalive: a peer that pings too often is told TOO_MANY_PINGS and "
    "cut off",
    "[tcp]") {
  ForgetThrottledLogs();  // The server's line is looked for.
  LogCapture log;
  TestServer server;  // min_ping_interval 50 ms, 2 strikes.
  const int fd = ConnectRaw(server.uri);
  REQUIRE(fd >= 0);
  REQUIRE(SendAll(fd, Pings(100)));
  // It reads what the server sent until the server closes.
  std::vector<std::byte> answer;
  std::array<std::byte, 4096> chunk;
  timeval timeout{.tv_sec = 10, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  for (ssize_t n; (n = recv(fd, chunk.data(), chunk.size(), 0)) > 0;) {
    answer.insert(answer.end(), chunk.begin(), chunk.begin() + n);
  }
  close(fd);
  // The server's HELLO, then at most the PONGs of the three PINGs it
  // answered, and last TOO_MANY_PINGS.
  const size_t frame = tunables::kFramePrefixSize + 1;
  REQUIRE(answer.size() >= 2 * frame);
  CHECK(answer.size() <= 5 * frame);
  CHECK(answer[frame - 1] ==
        std::byte{static_cast<uint8_t>(transport::KeepaliveKind::kHello)});
  CHECK(answer.back() == std::byte{static_cast<uint8_t>(
                             transport::KeepaliveKind::kTooManyPings)});
  CHECK(WaitFor([&] { return server.stats().connections == 0; }));
  CHECK(log.Contains(spdlog::level::warn, "too many pings"));
}

TEST_CASE(
    "keepalive: a client whose keepalive_interval is below the server's "
    "min_ping_interval is told too many pings") {
  LogCapture log;
  rpc::ServerOptions server_options;
  server_options.transport.min_ping_interval = 200ms;
  TestServer server(server_options);
  rpc::ChannelOptions options;
  options.transport.keepalive_interval = 20ms;
  options.transport.keepalive_timeout = 2000ms;
  rpc::Channel channel(server.uri, options);
  REQUIRE(CallSync(channel, kEcho, "a").status.ok());
  // Idle: it pings every 20 ms, and the server cuts it off at the third.
  CHECK(WaitFor([&] { return channel.stats().disconnects >= 1; }));
  CHECK(log.Contains(spdlog::level::warn,
                     "closed the connection: too many pings"));
  // The next call connects again.
  CHECK(CallSync(channel, kEcho, "b").status.ok());
}

TEST_CASE(
    "keepalive: a client that trickles a frame a byte at a time is cut off "
    "after frame_timeout, and others are served meanwhile",
    "[tcp]") {
  ForgetThrottledLogs();  // The server's line is looked for.
  LogCapture log;
  rpc::ServerOptions options = ServerWithKeepalive();
  options.transport.frame_timeout = 500ms;
  TestServer server(options);
  const int fd = ConnectRaw(server.uri);
  REQUIRE(fd >= 0);
  // A prefix announcing a 1 MiB frame, then a byte of it every 50 ms: each
  // resets keepalive, none completes the frame.
  const transport::EncodedPrefix prefix =
      transport::EncodeFramePrefix({.type = transport::FrameType::kRpc,
                                    .header_size = 16,
                                    .payload_size = 1 << 20});
  REQUIRE(SendAll(fd, prefix));
  rpc::Channel healthy(server.uri);
  const auto start = std::chrono::steady_clock::now();
  int calls = 0;
  while (server.stats().connections > 1 ||
         std::chrono::steady_clock::now() - start < 100ms) {
    REQUIRE(std::chrono::steady_clock::now() - start < 10s);
    const std::byte one{0};
    send(fd, &one, 1, MSG_NOSIGNAL);
    CHECK(CallSync(healthy, kEcho, "still here").status.ok());
    ++calls;
    std::this_thread::sleep_for(50ms);
  }
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= 500ms);
  CHECK(took < 5s);
  CHECK(calls > 5);
  CHECK(
      log.Contains(spdlog::level::warn, "did not arrive whole within 500 ms"));
  close(fd);
}

TEST_CASE(
    "keepalive: a server frees the connection of a client that went "
    "silent",
    "[tcp]") {
  TestServer server(ServerWithKeepalive());
  const int fd = ConnectRaw(server.uri);
  REQUIRE(fd >= 0);
  REQUIRE(WaitFor([&] { return server.stats().connections == 1; }));
  // The client answers nothing, not even the server's PINGs.
  CHECK(WaitFor([&] { return server.stats().connections == 0; }));
  CHECK(server.stats().peers_timed_out == 1);
  close(fd);
}

// Connection lifetime (ServerOptions::max_connection_idle, _age,
// _age_grace): GOAWAY, then a close once the client has answered and its
// calls have finished, or at the end of the grace period.
rpc::ServerOptions WithLifetime(
    std::chrono::milliseconds idle, std::chrono::milliseconds age,
    std::chrono::milliseconds grace = std::chrono::milliseconds::max()) {
  rpc::ServerOptions options;
  options.max_connection_idle = idle;
  options.max_connection_age = age;
  options.max_connection_age_grace = grace;
  return options;
}

TEST_CASE(
    "lifetime: an idle connection is closed after max_connection_idle, and "
    "the next call opens another") {
  TestServer server(WithLifetime(200ms, 0ms));
  rpc::Channel channel(server.uri);
  REQUIRE(CallSync(channel, kEcho, "a").status.ok());
  REQUIRE(WaitFor([&] { return server.stats().connections_recycled == 1; }));
  CHECK(WaitFor([&] { return server.stats().connections == 0; }));
  CHECK(CallSync(channel, kEcho, "b").status.ok());
  CHECK(channel.stats().connects == 2);
}

TEST_CASE(
    "lifetime: a connection in use is not idle, whether calling or waiting "
    "on a slow call") {
  TestServer server(WithLifetime(200ms, 0ms));
  rpc::Channel channel(server.uri);
  const auto until = std::chrono::steady_clock::now() + 1s;
  while (std::chrono::steady_clock::now() < until) {
    REQUIRE(CallSync(channel, kEcho, "a").status.ok());
    std::this_thread::sleep_for(50ms);
  }
  // One call running for 5 times the limit.
  CHECK(CallSync(channel, kSleepMs, "1000").status.ok());
  CHECK(channel.stats().connects == 1);
  CHECK(server.stats().connections_recycled == 0);
}

TEST_CASE(
    "lifetime: at max_connection_age the calls running finish, new ones go "
    "on a new connection, and none fails") {
  TestServer server(WithLifetime(0ms, 300ms));
  rpc::Channel channel(server.uri);
  REQUIRE(CallSync(channel, kEcho, "a").status.ok());
  // Running across the GOAWAY (at 270 to 330 ms).
  std::promise<Status> slow;
  channel.Call(kSleepMs, Buffer::CopyOf("600"), rpc::CallOptions{},
               [&](const Status& status, Buffer) { slow.set_value(status); });
  std::this_thread::sleep_for(400ms);
  // Made after the GOAWAY: it waits for the old connection to close.
  const CallResult after = CallSync(channel, kEcho, "b");
  INFO(after.status.ToString());
  CHECK(after.status.ok());
  auto finished = slow.get_future();
  REQUIRE(finished.wait_for(10s) == std::future_status::ready);
  const Status slow_status = finished.get();
  INFO(slow_status.ToString());
  CHECK(slow_status.ok());
  CHECK(server.stats().connections_recycled >= 1);
  CHECK(channel.stats().connects >= 2);
}

TEST_CASE(
    "lifetime: calls still running at the end of max_connection_age_grace "
    "fail UNAVAILABLE, naming it") {
  TestServer server(WithLifetime(0ms, 200ms, 300ms));
  rpc::Channel channel(server.uri);
  const auto start = std::chrono::steady_clock::now();
  const CallResult result = CallSync(channel, kSleepMs, "5000");
  const auto took = std::chrono::steady_clock::now() - start;
  INFO(result.status.ToString());
  CHECK(result.status.code() == StatusCode::kUnavailable);
  CHECK(result.status.message().find("max_connection_age_grace") !=
        std::string::npos);
  CHECK(took < 4s);
  // (The client's next connection may have reached its age meanwhile.)
  CHECK(server.stats().connections_recycled >= 1);
  CHECK(CallSync(channel, kEcho, "again").status.ok());
}

TEST_CASE(
    "lifetime: a client that ignores GOAWAY has its later calls refused, not "
    "run, and the connection closes once its calls are done",
    "[tcp]") {
  rpc::ServerOptions options = WithLifetime(0ms, 200ms);
  options.goaway_answer_timeout = 200ms;
  TestServer server(options);
  RawClient peer(server.uri);  // Never answers a GOAWAY.
  REQUIRE(peer.WriteRequest(1, "SleepMs", "1500"));
  // Past the age (180 to 220 ms) and the answer's timeout.
  std::this_thread::sleep_for(700ms);
  REQUIRE(peer.WriteRequest(2, "Echo", "late"));
  const Status late = peer.ReadResponse();
  INFO(late.ToString());
  CHECK(late.code() == StatusCode::kUnavailable);
  CHECK(late.message().find("recycled") != std::string::npos);
  CHECK(peer.goaways() == 1);
  // The call in flight finishes; then the connection closes.
  CHECK(peer.ReadResponse().ok());
  CHECK(peer.ReadResponse().code() == StatusCode::kInternal);  // Closed.
  CHECK(server.stats().connections_recycled == 1);
}

}  // namespace
}  // namespace rdmarpc::testing
