// Admission (include/rdmarpc/interceptor.h, docs/security.md): with a token
// interceptor, a peer none of whose calls has passed it holds no memory for
// a large payload, learns nothing of the server's methods, is cut off after
// kMaxAdmissionFailures refusals, and is logged once per host and interval;
// an admitted client's first call may be as large as any. Raw TCP peers
// (tagged [tcp]); the rest runs over rdma:// too, in the VM (where a peer's
// header comes before any grant: transport/rdma/protocol.h, Admission).
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
    "and its payload discarded, never stored",
    "[tcp]") {
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
    "admission: a stranger's large calls are refused on their headers, "
    "with nothing received or granted for their payloads") {
  TestServer server(WithToken());
  rpc::Channel stranger(server.uri);
  const std::string big(4 << 20, 'x');
  for (int i = 0; i < 3; ++i) {
    const CallResult result = CallSync(stranger, "Echo", big);
    INFO(result.status.ToString());
    CHECK(result.status.code() == StatusCode::kUnauthenticated);
  }
  CHECK(PayloadsRefused(server) == 3);
  uint64_t received = 0;
  uint64_t grants = 0;
  server.server.ForEachConnection([&](const transport::Connection& c) {
    received += c.stats().bytes_received;
    grants += c.stats().pooled_grants + c.stats().registered_grants;
  });
  INFO("bytes received " << received);
  CHECK(grants == 0);
  // On TCP the payloads are read and discarded as they arrive; on RDMA none
  // of their bytes is sent.
  if (OverRdma()) CHECK(received < (64 << 10));
  // Admitted, the same connection takes the call whole.
  rpc::Channel member(server.uri, ClientWithToken());
  CHECK(CallSync(member, "Echo", big).response == big);
}

TEST_CASE(
    "admission: an unknown method is UNAUTHENTICATED for a call without the "
    "token, UNIMPLEMENTED with it",
    "[tcp]") {
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
    "and refusals are logged once per host and interval",
    "[tcp]") {
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

// What the process holds for its peers once every call is done: nothing.
// A response's charge is given back when its write completes, which may be
// after the client has read it, so this waits for it to be given back.
uint64_t SettledPeerMemory() {
  const bool settled = WaitFor([] { return PeerMemoryUsed() == 0; });
  INFO("peer memory still used: " << PeerMemoryUsed());
  REQUIRE(settled);
  return 0;
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
    "discarded, and what a request held is given back",
    "[tcp]") {
  TestServer server;
  const uint64_t idle = SettledPeerMemory();
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
  CHECK(WaitFor([&] { return PeerMemoryUsed() == idle; }));
}

TEST_CASE(
    "peer memory: responses queued for a client that never reads stop at "
    "the limit, and its requests are not read until it reads",
    "[tcp]") {
  TestServer server;
  const uint64_t idle = SettledPeerMemory();
  constexpr uint64_t kLimit = 16 << 20;
  PeerMemoryLimitFor limit(idle + kLimit);
  RawClient peer(server.uri);  // Reads nothing until the end.
  // 64 responses of 1 MiB: 64 MiB, far below max_queued_bytes (256 MiB).
  std::string one_mib = std::to_string(1 << 20);
  for (uint64_t id = 1; id <= 64; ++id) {
    REQUIRE(peer.WriteRequest(id, "Bytes", one_mib));
  }
  const auto paused = [&] {
    uint64_t n = 0;
    server.server.ForEachConnection(
        [&](const transport::Connection& c) { n += c.stats().reads_paused; });
    return n;
  };
  // The server stops reading it once the limit is nearly reached: 16 more
  // requests are not read.
  REQUIRE(WaitFor([&] { return paused() > 0; }));
  for (uint64_t id = 65; id <= 80; ++id) {
    REQUIRE(peer.WriteRequest(id, "Bytes", one_mib));
  }
  std::this_thread::sleep_for(200ms);
  const uint64_t started = server.server.stats().calls_started;
  INFO("calls started " << started << ", peer memory used "
                        << PeerMemoryUsed() - idle);
  CHECK(started < 80);
  CHECK(PeerMemoryUsed() <= idle + kLimit + (2 << 20));
  // Meanwhile another client is served.
  rpc::Channel other(server.uri);
  CHECK(CallSync(other, "Echo", "hi").status.ok());
  // Once it reads, its requests are read again: every call is answered.
  int answered = 0;
  for (int i = 0; i < 80; ++i) {
    const Status status = peer.ReadResponse();
    if (status.code() == StatusCode::kInternal) break;  // Closed.
    ++answered;
  }
  CHECK(answered == 80);
  CHECK(WaitFor([&] { return PeerMemoryUsed() == idle; }));
}

TEST_CASE(
    "peer memory: past the limit a response is refused on either transport, "
    "and what was queued is given back") {
  rpc::ServerOptions options;
  options.handler_threads = 1;  // Responses go through the send queue.
  TestServer server(options);
  rpc::Channel channel(server.uri);
  REQUIRE(CallSync(channel, "Echo", "warm").status.ok());
  const uint64_t idle = SettledPeerMemory();
  {
    PeerMemoryLimitFor limit(idle + (1 << 20));
    const CallResult refused =
        CallSync(channel, "Bytes", std::to_string(4 << 20));
    INFO(refused.status.ToString());
    CHECK(refused.status.code() == StatusCode::kResourceExhausted);
    CHECK(refused.status.message().find("SetPeerMemoryLimit") !=
          std::string::npos);
    CHECK(CallSync(channel, "Bytes", std::to_string(64 << 10)).status.ok());
  }
  CHECK(CallSync(channel, "Bytes", std::to_string(4 << 20)).status.ok());
  CHECK(WaitFor([&] { return PeerMemoryUsed() == idle; }));
}

TEST_CASE(
    "admission: a stranger's large call with a 6 KiB header is refused with "
    "a clear error on either transport") {
  TestServer server(WithToken());
  rpc::Channel stranger(server.uri);
  rpc::CallOptions options;
  options.metadata.Add("note", std::string(6 << 10, 'n'));
  const CallResult result =
      CallSync(stranger, "Echo", std::string(64 << 10, 'x'), options);
  INFO(result.status.ToString());
  if (OverRdma()) {
    // Over what a HEADER carries before admission: the server says so and
    // closes the connection.
    CHECK(result.status.message().find("before this connection's first call "
                                       "was admitted (at most 4048)") !=
          std::string::npos);
  } else {
    // TCP reads a header of up to 64 KiB before admitting.
    CHECK(result.status.code() == StatusCode::kUnauthenticated);
  }
  // A client with the token is served.
  rpc::Channel member(server.uri, ClientWithToken());
  CHECK(CallSync(member, "Echo", "hi").response == "hi");
}

}  // namespace
}  // namespace rdmarpc::testing
