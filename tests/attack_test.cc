// The attacks of docs/security.md ("What a hostile peer can do"), each with
// bounded loops over tcp:// on loopback, against one server with a token
// and an admin endpoint, while a client with the token calls it with a 2 s
// deadline throughout. For each: every one of that client's calls
// succeeds, this process's resident memory (the server's, and the
// attackers' few static buffers) stays within its idle size + 64 MiB (not
// checked under ASan, whose quarantine keeps freed blocks), and the peer
// memory the server counts within its limit. The caps the suite sets are
// shorter timeouts than the defaults (so that it takes seconds) and a
// 32 MiB peer memory limit. About 7 s.
#include <atomic>
#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/log_throttle.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/interceptor.h"
#include "rdmarpc/peer_memory.h"
#include "tests/support/raw_client.h"
#include "tests/support/test_support.h"

namespace rdmarpc::testing {
namespace {

constexpr char kToken[] = "s3cret";
constexpr uint64_t kHeadroom = 64 << 20;

// The server under attack, and what it is measured by.
struct Target {
  Target() : server(Options()) {}
  static rpc::ServerOptions Options() {
    rpc::ServerOptions options;
    options.interceptors.push_back(
        std::make_shared<TokenServerInterceptor>(kToken));
    options.admin_listen = "http://127.0.0.1:0";
    options.transport.keepalive_interval = 250ms;
    options.transport.keepalive_timeout = 1000ms;
    options.transport.frame_timeout = 1000ms;
    options.transport.connect_timeout = 1000ms;
    return options;
  }
  TestServer server;
};

// Calls Echo with the token and a 2 s deadline every 20 ms until stopped.
class LegitClient {
 public:
  explicit LegitClient(const std::string& uri)
      : thread_([this, uri] {
          rpc::ChannelOptions options;
          options.interceptors.push_back(
              std::make_shared<TokenClientInterceptor>(kToken));
          rpc::Channel channel(uri, options);
          while (!stop_) {
            const CallResult result = CallSync(
                channel, "Echo", "ping", rpc::CallOptions::WithTimeout(2s));
            (result.status.ok() && result.response == "ping" ? ok_ : failed_)++;
            if (!result.status.ok()) last_error_ = result.status.ToString();
            std::this_thread::sleep_for(20ms);
          }
        }) {}
  ~LegitClient() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int ok() const { return ok_; }
  int failed() const { return failed_; }
  std::string last_error_;

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> ok_{0}, failed_{0};
  std::thread thread_;
};

// The largest resident size, and peer memory counted, seen while it runs.
class PeakWatch {
 public:
  PeakWatch()
      : thread_([this] {
          while (!stop_) {
            peak_ = std::max<uint64_t>(peak_, ResidentBytes());
            peer_peak_ = std::max<uint64_t>(peer_peak_, PeerMemoryUsed());
            std::this_thread::sleep_for(5ms);
          }
        }) {}
  ~PeakWatch() {
    stop_ = true;
    thread_.join();
  }
  uint64_t peak() const { return peak_; }
  uint64_t peer_peak() const { return peer_peak_; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> peak_{0};
  std::atomic<uint64_t> peer_peak_{0};
  std::thread thread_;
};

// Runs `attack` against `target` with a legit client and the peak watch;
// checks the client's calls and the memory, then that the attack's
// connections are gone.
template <typename Attack>
void Survive(Target& target, const char* name, Attack attack) {
  INFO(name);
  const uint64_t idle = ResidentBytes();
  LegitClient client(target.server.uri);
  REQUIRE(WaitFor([&] { return client.ok() > 0; }));
  {
    PeakWatch watch;
    attack();
    // What the attack left open closes within the suite's timeouts, and the
    // client goes on being served.
    CHECK(WaitFor([&] { return target.server.stats().connections <= 1; }));
    const int served = client.ok();
    CHECK(WaitFor([&] { return client.ok() >= served + 5; }));
    client.Stop();
    INFO("resident grew by " << (watch.peak() - idle) / 1024 << " KiB");
    if (kResidentIsLive) CHECK(watch.peak() <= idle + kHeadroom);
    // Under ASan too: what the server counted stayed within the limit.
    CHECK(watch.peer_peak() <= PeerMemoryLimit() + (2 << 20));
    std::printf(
        "attack \"%s\": resident at most +%llu KiB, %d calls served, %d "
        "failed\n",
        name,
        static_cast<unsigned long long>((std::max(watch.peak(), idle) - idle) >>
                                        10),
        client.ok(), client.failed());
  }
  INFO("last error: " << client.last_error_);
  CHECK(client.failed() == 0);
}

std::vector<std::byte> Pings(size_t count) {
  const auto ping = transport::TcpControlFrame(transport::KeepaliveKind::kPing);
  std::vector<std::byte> bytes;
  for (size_t i = 0; i < count; ++i) {
    bytes.insert(bytes.end(), ping.begin(), ping.end());
  }
  return bytes;
}

TEST_CASE("attacks: the server keeps serving within its memory") {
  Target target;
  const uint64_t limit_before = PeerMemoryLimit();
  SetPeerMemoryLimit(PeerMemoryUsed() + (32 << 20));
  ForgetThrottledLogs();  // Counted from here.
  LogCapture log;
  const std::vector<std::byte> pings = Pings(200'000);  // 3.4 MB.

  Survive(target, "PING flood, no token, never reading", [&] {
    for (int i = 0; i < 8; ++i) {
      RawClient peer(target.server.uri);
      peer.Write(pings.data(), pings.size());  // Cut off after three.
    }
  });
  // Each attack class from one host: one line per interval, whatever the
  // connections (base/log_throttle.h): the transport's, and the server's
  // "connection closed" that names the same reason.
  CHECK(log.Count("too many pings") <= 2);

  Survive(target, "large frames before authentication", [&] {
    std::vector<std::unique_ptr<RawClient>> peers;
    for (int i = 0; i < 16; ++i) {
      peers.push_back(std::make_unique<RawClient>(target.server.uri));
      REQUIRE(peers.back()->WriteRequestHead(1, "Echo", 64 << 20));
      CHECK(peers.back()->ReadResponse().code() ==
            StatusCode::kUnauthenticated);
      REQUIRE(peers.back()->WritePayload((64 << 20) - 1));  // All but 1 B.
    }
  });

  Survive(target, "slowloris: a byte at a time", [&] {
    std::vector<std::unique_ptr<RawClient>> peers;
    for (int i = 0; i < 64; ++i) {
      peers.push_back(std::make_unique<RawClient>(target.server.uri));
      const transport::EncodedPrefix prefix =
          transport::EncodeFramePrefix({.type = transport::FrameType::kRpc,
                                        .header_size = 60 << 10,
                                        .payload_size = 64 << 20});
      peers.back()->Write(prefix.data(), prefix.size());
    }
    const std::byte one{0};
    for (int tick = 0; tick < 30; ++tick) {  // 3 s of a byte per 100 ms.
      for (auto& peer : peers) peer->Write(&one, 1);
      std::this_thread::sleep_for(100ms);
    }
  });
  CHECK(log.Count("did not arrive whole within") <= 2);

  Survive(target, "never reading replies, with the token", [&] {
    std::vector<std::unique_ptr<RawClient>> peers;
    const std::string one_mib = std::to_string(1 << 20);
    for (int i = 0; i < 3; ++i) {
      peers.push_back(std::make_unique<RawClient>(target.server.uri));
      for (uint64_t id = 1; id <= 64; ++id) {
        REQUIRE(peers.back()->WriteRequest(id, "Bytes", one_mib, kToken));
      }
    }
    // 192 MiB of responses against 32 MiB of peer memory: some are refused
    // (under ASan on a loaded host, over a second after the requests).
    CHECK(WaitFor([&] { return target.server.stats().responses_refused > 0; }));
  });

  Survive(target, "token guessing", [&] {
    for (int i = 0; i < 4; ++i) {
      RawClient guesser(target.server.uri);
      for (uint64_t id = 1; id <= 100; ++id) {
        if (!guesser.WriteRequestHead(id, "Echo", 0, std::to_string(id))) {
          break;
        }
      }
      int refused = 0;
      while (guesser.ReadResponse().code() == StatusCode::kUnauthenticated) {
        ++refused;
      }
      CHECK(refused == static_cast<int>(tunables::kMaxAdmissionFailures));
    }
  });
  // Every refusal above came from one host within 10 s: one line.
  CHECK(log.Count("call refused") == 1);

  Survive(target, "connections that never say HELLO", [&] {
    std::vector<std::unique_ptr<RawClient>> peers;
    for (int i = 0; i < 200; ++i) {
      peers.push_back(
          std::make_unique<RawClient>(target.server.uri, /*greet=*/false));
    }
    CHECK(WaitFor([&] { return target.server.stats().connections <= 1; }));
  });
  CHECK(log.Count("no HELLO from") <= 2);
  CHECK(log.Count(": accepted") <= 2);
  SetPeerMemoryLimit(limit_before);
}

}  // namespace
}  // namespace rdmarpc::testing
