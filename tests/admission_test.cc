// Admission (include/rdmarpc/interceptor.h, docs/security.md): with a token
// interceptor, a peer none of whose calls has passed it holds no memory for
// a large payload, learns nothing of the server's methods, is cut off after
// kMaxAdmissionFailures refusals, and is logged once per host and interval;
// an admitted client's first call may be as large as any. Raw TCP peers.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <catch2/catch_test_macros.hpp>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/log_throttle.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/interceptor.h"
#include "rdmarpc/peer_memory.h"
#include "rpc/wire/call_header.h"
#include "rpc/wire/wire_codec.h"
#include "tests/support/raw_client.h"
#include "tests/support/test_support.h"
#include "transport/frame.h"
#include "transport/keepalive.h"
#include "transport/uri.h"

namespace rdmarpc::testing {
namespace {

constexpr char kToken[] = "s3cret";

rpc::ServerOptions WithToken() {
  rpc::ServerOptions options;
  options.interceptors.push_back(
      std::make_shared<TokenServerInterceptor>(kToken));
  return options;
}

rpc::ChannelOptions ClientWithToken() {
  rpc::ChannelOptions options;
  options.interceptors.push_back(
      std::make_shared<TokenClientInterceptor>(kToken));
  return options;
}

uint64_t PayloadsRefused(TestServer& server) {
  uint64_t refused = 0;
  server.server.ForEachConnection([&](const transport::Connection& c) {
    refused += c.stats().payloads_refused;
  });
  return refused;
}

TEST_CASE(
    "admission: a large request without the token is refused on its header "
    "and its payload discarded, never stored") {
  TestServer server(WithToken());
  const uint64_t before = ResidentBytes();
  constexpr uint64_t kDeclared = 32 << 20;  // Under max_payload_size.
  constexpr uint64_t kSent = kDeclared - (1 << 20);
  std::vector<std::unique_ptr<RawClient>> peers;
  for (int i = 0; i < 4; ++i) {
    peers.push_back(std::make_unique<RawClient>(server.uri));
    RawClient& peer = *peers.back();
    REQUIRE(peer.WriteRequestHead(1, "Echo", kDeclared));
    // Answered before a byte of the payload was sent.
    const Status answer = peer.ReadResponse();
    INFO(answer.ToString());
    CHECK(answer.code() == StatusCode::kUnauthenticated);
    REQUIRE(peer.WritePayload(kSent));  // All but 1 MiB of it.
  }
  REQUIRE(WaitFor([&] { return PayloadsRefused(server) == 4; }));
  // 4 x 31 MiB sent; without admission each would sit in a 32 MiB block.
  const uint64_t grown = ResidentBytes() - before;
  INFO("resident bytes grew by " << grown);
  if (kResidentIsLive) CHECK(grown < (16 << 20));
  CHECK(PayloadsRefused(server) == 4);  // None of them was stored.
  // The same connection, still not admitted, is refused again; a client
  // with the token is served.
  REQUIRE(peers[0]->WritePayload(kDeclared - kSent));
  REQUIRE(peers[0]->WriteRequestHead(2, "Echo", 0));
  CHECK(peers[0]->ReadResponse().code() == StatusCode::kUnauthenticated);
  rpc::Channel admitted(server.uri, ClientWithToken());
  CHECK(CallSync(admitted, "Echo", "hi").response == "hi");
}

TEST_CASE("admission: an admitted client's first call may be large") {
  TestServer server(WithToken());
  rpc::Channel channel(server.uri, ClientWithToken());
  const std::string big(8 << 20, 'x');
  const CallResult result = CallSync(channel, "Echo", big);
  INFO(result.status.ToString());
  CHECK(result.status.ok());
  CHECK(result.response == big);
  CHECK(PayloadsRefused(server) == 0);
  // Without the token, the same call is refused.
  rpc::Channel stranger(server.uri);
  CHECK(CallSync(stranger, "Echo", big).status.code() ==
        StatusCode::kUnauthenticated);
}

TEST_CASE(
    "admission: an unknown method is UNAUTHENTICATED for a call without the "
    "token, UNIMPLEMENTED with it") {
  TestServer server(WithToken());
  rpc::Channel stranger(server.uri);
  const CallResult unknown = CallSync(stranger, "NoSuchMethod", "");
  CHECK(unknown.status.code() == StatusCode::kUnauthenticated);
  CHECK(unknown.status.message().find("NoSuchMethod") == std::string::npos);
  rpc::Channel member(server.uri, ClientWithToken());
  CHECK(CallSync(member, "NoSuchMethod", "").status.code() ==
        StatusCode::kUnimplemented);
  // On a connection admitted already, a call without the token learns
  // nothing either.
  RawClient peer(server.uri);
  REQUIRE(peer.WriteRequestHead(1, "Echo", 0, kToken));
  CHECK(peer.ReadResponse().ok());
  REQUIRE(peer.WriteRequestHead(3, "NoSuchMethod", 0));
  CHECK(peer.ReadResponse().code() == StatusCode::kUnauthenticated);
}

TEST_CASE(
    "admission: a connection refused kMaxAdmissionFailures times is closed, "
    "and refusals are logged once per host and interval") {
  ForgetThrottledLogs();  // Counted from here.
  LogCapture log;
  TestServer server(WithToken());
  RawClient guesser(server.uri);
  int refused = 0;
  for (uint64_t id = 1; id <= 2 * tunables::kMaxAdmissionFailures; ++id) {
    if (!guesser.WriteRequestHead(id, "Echo", 0,
                                  "guess" + std::to_string(id))) {
      break;
    }
  }
  for (Status answer = guesser.ReadResponse();
       answer.code() == StatusCode::kUnauthenticated;
       answer = guesser.ReadResponse()) {
    ++refused;
  }
  CHECK(refused == static_cast<int>(tunables::kMaxAdmissionFailures));
  CHECK(WaitFor([&] { return server.stats().connections == 0; }));
  // A second connection from the same host, refused too: still one line.
  RawClient again(server.uri);
  REQUIRE(again.WriteRequestHead(1, "Echo", 0));
  CHECK(again.ReadResponse().code() == StatusCode::kUnauthenticated);
  CHECK(log.Count("call refused") == 1);
}

// Sets the peer memory limit for one test, and puts it back.
class PeerMemoryLimitFor {
 public:
  explicit PeerMemoryLimitFor(uint64_t bytes) : before_(PeerMemoryLimit()) {
    SetPeerMemoryLimit(bytes);
  }
  ~PeerMemoryLimitFor() { SetPeerMemoryLimit(before_); }

 private:
  const uint64_t before_;
};

TEST_CASE(
    "peer memory: past the limit a large request is refused and its payload "
    "discarded, and what a request held is given back") {
  TestServer server;
  const uint64_t idle = PeerMemoryUsed();
  // This process is the server and the client: a 2 MiB echo counts its
  // request and its response on both sides, at most 8 MiB at once.
  PeerMemoryLimitFor limit(idle + (12 << 20));
  rpc::Channel channel(server.uri);
  // 2 MiB fits: counted while it is held, given back after.
  CHECK(CallSync(channel, "Echo", std::string(2 << 20, 'a')).status.ok());
  CHECK(WaitFor([&] { return PeerMemoryUsed() == idle; }));
  // 16 MiB does not.
  RawClient peer(server.uri);
  REQUIRE(peer.WriteRequestHead(1, "Echo", 16 << 20));
  REQUIRE(peer.WritePayload(16 << 20));
  const Status refused = peer.ReadResponse();
  INFO(refused.ToString());
  CHECK(refused.code() == StatusCode::kResourceExhausted);
  CHECK(refused.message().find("SetPeerMemoryLimit") != std::string::npos);
  // The connection goes on.
  REQUIRE(peer.WriteRequestHead(2, "Echo", 0));
  CHECK(peer.ReadResponse().ok());
  CHECK(PeerMemoryUsed() == idle);
}

TEST_CASE(
    "peer memory: responses queued for a client that never reads stop at "
    "the limit") {
  TestServer server;
  const uint64_t idle = PeerMemoryUsed();
  constexpr uint64_t kLimit = 16 << 20;
  PeerMemoryLimitFor limit(idle + kLimit);
  RawClient peer(server.uri);  // Never reads a response.
  // 64 responses of 1 MiB: 64 MiB, far below max_queued_bytes (256 MiB).
  std::string one_mib = std::to_string(1 << 20);
  for (uint64_t id = 1; id <= 64; ++id) {
    REQUIRE(peer.WriteRequest(id, "Bytes", one_mib));
  }
  // Each either queued, within the limit, or refused.
  REQUIRE(WaitFor([&] { return server.server.stats().calls_started == 64; }));
  std::this_thread::sleep_for(200ms);  // The last responses queue.
  INFO("peer memory used: " << PeerMemoryUsed() - idle);
  CHECK(PeerMemoryUsed() <= idle + kLimit + (2 << 20));
  CHECK(server.server.stats().responses_refused > 0);
}

}  // namespace
}  // namespace rdmarpc::testing
