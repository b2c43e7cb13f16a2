// Authenticated RDMA connections (TransportOptions::tls on rdma://,
// transport/rdma/protocol.h "Authentication"), on a real RDMA device: run
// in the Soft-RoCE VM by tools/test; without RXE_IP every case fails.
//
// An rdmarpc client and server authenticate with the certificates the test
// makes, and calls, identities and the allow list work as over tls://;
// every refusal (unknown CA, wrong host, expired, no client certificate,
// TLS on one side only) names its fault and hands nothing over. A raw-verbs
// peer that runs the handshake itself is served; one that skips it (a call,
// an RTS, silence) is disconnected with nothing run and no key lent; one
// that replays another connection's handshake is refused.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <chrono>
#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include "base/log_throttle.h"
#include "rdmarpc/authorization.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/server.h"
#include "rpc/common/event_loop.h"
#include "rpc/wire/wire_codec.h"
#include "tests/support/hostile_peer.h"
#include "tests/support/test_pki.h"
#include "tests/support/test_support.h"
#include "transport/factory/factory.h"
#include "transport/rails/railed_connection.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/tls/tls.h"
#include "transport/uri.h"

namespace rdmarpc::hostile {
namespace {

using namespace std::chrono_literals;
using Catch::Matchers::ContainsSubstring;
using testing::IssuedCert;
using testing::TempDir;
using testing::TestPki;
using transport::rdma::kAuthVerified;
using transport::rdma::kConnTls;

std::string RxeIp() {
  const char* ip = std::getenv("RXE_IP");
  if (ip == nullptr || *ip == '\0') {
    FAIL("RXE_IP is not set: run under tools/softroce/run (tools/test does)");
  }
  return ip;
}

// Mutual TLS for a server at the VM's address.
struct Certs : testing::TestCerts {
  explicit Certs(std::string address = RxeIp())
      : TestCerts({"IP:" + address}, /*mutual=*/true), ip(std::move(address)) {}
  std::string ip;
};

// An RDMA listener on its own loop, counting the connections it is handed.
struct RdmaEnds {
  RdmaEnds(const std::string& ip, const TransportOptions& server_options) {
    auto bound = transport::Listen(
        loop.context(), "rdma://" + ip + ":0", server_options,
        [this]() -> boost::asio::io_context& { return loop.context(); },
        [this](std::shared_ptr<transport::Connection> c) {
          ++accepted;
          std::lock_guard lock(mu);
          connections.push_back(std::move(c));
        });
    INFO(bound.status().ToString());
    REQUIRE(bound.ok());
    listener = std::move(*bound);
  }
  ~RdmaEnds() {
    listener.reset();
    loop.Stop();
  }
  // The connecting side's status.
  Status Connect(const TransportOptions& options) {
    std::promise<Status> connected;
    transport::Connect(loop.context(), listener->uri(), options,
                       [&](StatusOr<std::shared_ptr<transport::Connection>> c) {
                         if (c.ok()) (*c)->Close(Status());
                         connected.set_value(c.status());
                       });
    return connected.get_future().get();
  }

  rpc::EventLoop loop;
  std::unique_ptr<transport::Listener> listener;
  std::atomic<int> accepted{0};
  std::mutex mu;
  std::vector<std::shared_ptr<transport::Connection>> connections;
};

// Answers with the common name and the alternative names its handler sees.
struct WhoService : rpc::Service {
  WhoService() : rpc::Service("auth.Who") {
    auto me = [](std::shared_ptr<ServerCall> call) {
      const PeerIdentity& peer = call->peer_identity();
      std::string answer = peer.common_name;
      for (const std::string& name : peer.alt_names) answer += " " + name;
      call->Finish(Status(), Buffer::CopyOf(std::string_view(answer)));
    };
    AddMethod("Me", me);
    AddMethod("Secret", me);
  }
};

TEST_CASE("rdma auth: mutual TLS carries calls and the peer's identity") {
  Certs certs;
  WhoService who;
  testing::TestService echo;
  auto policy = std::make_shared<AllowListPolicy>();
  policy->Allow("auth.Who/Me", "URI:spiffe://test/c")
      .Allow("test.Test", "URI:spiffe://test/c");
  rpc::ServerOptions server_options;
  server_options.transport = certs.Server();
  server_options.interceptors.push_back(policy);
  rpc::Server server(server_options);
  server.RegisterService(&who);
  server.RegisterService(&echo);
  auto bound = server.Listen("rdma://" + certs.ip + ":0");
  INFO(bound.status().ToString());
  REQUIRE(bound.ok());
  ChannelOptions channel_options;
  channel_options.transport = certs.Client();
  rpc::Channel channel(*bound, channel_options);
  // Small (a SEND) and large (RTS, GRANT, WRITE WITH IMMEDIATE).
  for (const std::string& request :
       {std::string("hi"), std::string(300000, 'x')}) {
    auto result = testing::CallSync(channel, "Echo", request,
                                    rpc::CallOptions::WithTimeout(kWait));
    INFO(result.status.ToString());
    REQUIRE(result.status.ok());
    CHECK(result.response == request);
  }
  auto me = testing::CallSync(channel, "Me", "",
                              rpc::CallOptions::WithTimeout(kWait), "auth.Who");
  INFO(me.status.ToString());
  REQUIRE(me.status.ok());
  CHECK(me.response == "client URI:spiffe://test/c");
  auto secret = testing::CallSync(
      channel, "Secret", "", rpc::CallOptions::WithTimeout(kWait), "auth.Who");
  CHECK(secret.status.code() == StatusCode::kPermissionDenied);
  CHECK(channel.stats().connects == 1);
}

TEST_CASE("rdma auth: each refusal names its fault and hands nothing over") {
  Certs certs;
  RdmaEnds ends(certs.ip, certs.Server());
  std::string expected;
  Status refused;
  SECTION("an unknown CA") {
    TestPki other(certs.dir.path(), "other");
    TransportOptions options = certs.Client();
    options.tls->ca_file = other.ca_file();
    refused = ends.Connect(options);
    // The server sends its CA with its chain (it has one to check clients).
    expected = "the peer's certificate is refused: self-signed certificate";
    CHECK(refused.code() == StatusCode::kUnauthenticated);
  }
  SECTION("a wrong host name") {
    TransportOptions options = certs.Client();
    options.tls->server_name = "kv.example";
    refused = ends.Connect(options);
    expected = "hostname mismatch";
  }
  SECTION("no client certificate") {
    refused = ends.Connect(certs.Client(/*with_cert=*/false));
    expected = "certificate required";
    CHECK(refused.code() == StatusCode::kUnauthenticated);
  }
  SECTION("a client certificate of another CA") {
    TestPki other(certs.dir.path(), "other");
    const IssuedCert stranger = other.Issue("stranger", {}, "stranger");
    TransportOptions options = certs.Client();
    options.tls->cert_file = stranger.cert_file;
    options.tls->key_file = stranger.key_file;
    refused = ends.Connect(options);
    expected = "unknown ca";
  }
  SECTION("a client without TLS") {
    refused = ends.Connect(TransportOptions());
    expected = "the server requires TLS";
  }
  SECTION("an expired server certificate") {
    const IssuedCert old =
        certs.pki.Issue("old", {"IP:" + certs.ip}, "old",
                        std::chrono::hours(-2), std::chrono::hours(-1));
    TransportOptions server_options = certs.Server();
    server_options.tls->cert_file = old.cert_file;
    server_options.tls->key_file = old.key_file;
    RdmaEnds expired(certs.ip, server_options);
    refused = expired.Connect(certs.Client());
    expected = "certificate has expired";
    CHECK(expired.accepted == 0);
  }
  SECTION("a server without TLS") {
    RdmaEnds plain(certs.ip, TransportOptions());
    refused = plain.Connect(certs.Client());
    expected = "the server does not use TLS";
    CHECK(plain.accepted == 0);
  }
  INFO(refused.ToString());
  CHECK_FALSE(refused.ok());
  CHECK_THAT(refused.ToString(), ContainsSubstring(expected));
  CHECK(ends.accepted == 0);
  // The listener still serves a client that belongs.
  const Status ok = ends.Connect(certs.Client());
  INFO(ok.ToString());
  CHECK(ok.ok());
  CHECK(WaitFor([&] { return ends.accepted == 1; }, kWait));
}

// One rdma_cm connection that says it is `hello`'s rail of a session.
StatusOr<std::shared_ptr<transport::Connection>> ConnectRail(
    rpc::EventLoop& loop, const std::string& ip, uint16_t port,
    const TransportOptions& options, const transport::rdma::RailHello& hello) {
  std::promise<StatusOr<std::shared_ptr<transport::Connection>>> done;
  transport::rdma::Connect(
      loop.context(), ip, port, options,
      [&](StatusOr<std::shared_ptr<transport::Connection>> c) {
        done.set_value(std::move(c));
      },
      hello);
  return done.get_future().get();
}

TEST_CASE("rdma auth: a session's rails carry its identity, and no other") {
  Certs certs;
  RdmaEnds ends(certs.ip, certs.Server());
  auto uri = transport::ParseUri(ends.listener->uri());
  REQUIRE(uri.ok());
  // The session the listener accepted (its primary reached on_accept).
  auto session = [&]() -> std::shared_ptr<transport::rails::RailedConnection> {
    std::lock_guard lock(ends.mu);
    if (ends.connections.empty()) return nullptr;
    return std::dynamic_pointer_cast<transport::rails::RailedConnection>(
        ends.connections.back());
  };

  SECTION("the factory's rails: the server sees the client's identity") {
    std::promise<StatusOr<std::shared_ptr<transport::Connection>>> done;
    transport::Connect(ends.loop.context(),
                       ends.listener->uri() + "?rails=" + certs.ip + ":" +
                           std::to_string(uri->port),
                       certs.Client(),
                       [&](StatusOr<std::shared_ptr<transport::Connection>> c) {
                         done.set_value(std::move(c));
                       });
    auto client = done.get_future().get();
    INFO(client.status().ToString());
    REQUIRE(client.ok());
    REQUIRE(WaitFor([&] { return session() && session()->rails_up() == 2; },
                    kWait));
    const PeerIdentity* who = session()->peer_identity();
    REQUIRE(who != nullptr);
    CHECK(who->common_name == "client");
    (*client)->Close(Status());
  }

  SECTION("a rail with another certificate of the CA does not join") {
    transport::rdma::RailHello hello;
    for (size_t i = 0; i < hello.session.size(); ++i) hello.session[i] = i + 1;
    hello.primary = true;
    auto primary =
        ConnectRail(ends.loop, certs.ip, uri->port, certs.Client(), hello);
    INFO(primary.status().ToString());
    REQUIRE(primary.ok());
    REQUIRE(WaitFor([&] { return session() != nullptr; }, kWait));
    // Whoever read the session id off the wire, with a certificate of its
    // own from the same CA.
    const IssuedCert mallory =
        certs.pki.Issue("mallory", {"URI:spiffe://test/m"}, "mallory");
    TransportOptions as_mallory = certs.Client();
    as_mallory.tls->cert_file = mallory.cert_file;
    as_mallory.tls->key_file = mallory.key_file;
    hello.rail = 1;
    hello.primary = false;
    auto impostor =
        ConnectRail(ends.loop, certs.ip, uri->port, as_mallory, hello);
    CHECK_FALSE(WaitFor([&] { return session()->rails_up() == 2; }, 1s));
    // The same rail with the session's certificate joins.
    auto rail =
        ConnectRail(ends.loop, certs.ip, uri->port, certs.Client(), hello);
    INFO(rail.status().ToString());
    REQUIRE(rail.ok());
    CHECK(WaitFor([&] { return session()->rails_up() == 2; }, kWait));
    for (auto* c : {&primary, &impostor, &rail}) {
      if (c->ok()) (**c)->Close(Status());
    }
  }
}

// A server that requires client certificates, and the counters a raw peer
// is checked against.
struct AuthFixture {
  Certs certs;
  testing::TestService service;
  rpc::Server server{[this] {
    rpc::ServerOptions options;
    options.transport = certs.Server();
    options.transport.rdma_pooled_grants = true;
    options.transport.connect_timeout = 3s;  // The silent peer's wait.
    return options;
  }()};
  uint16_t port = 0;
  uint64_t registered_before = 0;

  AuthFixture() {
    ForgetThrottledLogs();
    server.RegisterService(&service);
    auto bound = server.Listen("rdma://" + certs.ip + ":0");
    INFO(bound.status().ToString());
    REQUIRE(bound.ok());
    port =
        static_cast<uint16_t>(std::stoi(bound->substr(bound->rfind(':') + 1)));
    registered_before = Bytes();
  }
  static uint64_t Bytes() {
    return transport::rdma::LiveRegisteredBytes() -
           transport::rdma::PooledRegisteredBytes();
  }
  // A raw peer that announces TLS, connected.
  void Connect(HostilePeer& peer) {
    peer.set_conn_flags(kConnTls);
    peer.Connect(certs.ip, port);
  }
  // Closed by the server with nothing handed over, nothing run, nothing
  // left registered.
  void ExpectShutOut(HostilePeer& peer) {
    INFO("peer " << peer.name() << ": " << peer.Describe());
    CHECK(peer.WaitClosed());
    CHECK(server.stats().connections == 0);
    CHECK(service.calls_started == 0);
    CHECK(WaitFor([&] { return Bytes() == registered_before; }, kWait));
  }
};

// An Echo request of `text`, as a client's first frame.
transport::OutgoingFrame EchoRequest(uint64_t call_id,
                                     const std::string& text) {
  return rpc::MakeRequestFrame(call_id, "test.Test", "Echo", 0, 0,
                               Buffer::CopyOf(text), "");
}

std::string SendEcho(HostilePeer& peer, uint64_t call_id,
                     const std::string& text) {
  const transport::OutgoingFrame frame = EchoRequest(call_id, text);
  return peer.PostSendFrame(FrameType::kRpc, frame.header.span(),
                            std::as_bytes(std::span(text)));
}

TEST_CASE("rdma auth: a raw peer that skips the handshake gets nothing") {
  AuthFixture fixture;
  HostilePeer peer;
  fixture.Connect(peer);
  LogCapture log;
  SECTION("a call") {
    REQUIRE(SendEcho(peer, 1, "before authenticating") == kSuccess);
    fixture.ExpectShutOut(peer);
    CHECK(WaitFor(
        [&] {
          return log.Contains(spdlog::level::warn,
                              "peer sent a frame before authenticating");
        },
        5s));
  }
  SECTION("an RTS") {
    REQUIRE(peer.SendRts(1, 64, 1 << 20) == kSuccess);
    fixture.ExpectShutOut(peer);
    CHECK(peer.DropAll() == 0);  // No GRANT, no key.
    CHECK(log.Contains(spdlog::level::warn, "before authenticating"));
  }
  SECTION("silence") {
    fixture.ExpectShutOut(peer);
    CHECK(peer.DropAll() == 0);
  }
}

// A TLS client run by hand over a raw peer, as RdmaConnection runs it: its
// records in AUTH messages, the server's read from its AUTH messages, until
// VERIFIED. The AUTH messages it sent (header and bytes), in order.
struct SentAuth {
  ControlMessage message;
  Bytes bytes;
};
std::vector<SentAuth> RunHandshake(HostilePeer& peer, const Certs& certs,
                                   bool* verified) {
  auto context = transport::tls::TlsContext::Create(
      *certs.Client().tls, transport::tls::TlsContext::Role::kClient);
  REQUIRE(context.ok());
  auto session = (*context)->NewSession(certs.ip);
  REQUIRE(session.ok());
  std::vector<SentAuth> sent;
  const size_t room = peer.server_params().receive_buffer_size -
                      tunables::kFramePrefixSize - sizeof(ControlMessage);
  *verified = false;
  for (;;) {
    auto step = (*session)->Handshake();
    INFO(step.status().ToString());
    REQUIRE(step.ok());
    while (!(*session)->Outgoing().empty()) {
      const auto out = (*session)->Outgoing();
      SentAuth auth;
      auth.bytes.assign(out.begin(), out.begin() + std::min(room, out.size()));
      auth.message.kind = ControlKind::kAuth;
      auth.message.length = static_cast<uint32_t>(auth.bytes.size());
      REQUIRE(peer.PostSendFrame(FrameType::kControl, AsBytes(auth.message),
                                 auth.bytes) == kSuccess);
      (*session)->Consume(auth.bytes.size());
      sent.push_back(std::move(auth));
    }
    const Received frame = peer.WaitForFrame();
    REQUIRE(frame.prefix.type == FrameType::kControl);
    const auto control = transport::rdma::DecodeControl(frame.header);
    REQUIRE(control.has_value());
    REQUIRE(control->kind == ControlKind::kAuth);
    if (control->flags == kAuthVerified) {
      CHECK(*step == transport::tls::TlsSession::Step::kDone);
      *verified = true;
      return sent;
    }
    (*session)->Receive(frame.payload);
  }
}

TEST_CASE(
    "rdma auth: a raw peer's own handshake is served; the same handshake "
    "replayed on another connection is refused") {
  AuthFixture fixture;
  HostilePeer first;
  fixture.Connect(first);
  bool verified = false;
  const std::vector<SentAuth> recorded =
      RunHandshake(first, fixture.certs, &verified);
  REQUIRE(verified);
  REQUIRE(recorded.size() >= 2);  // ClientHello, then the client's flight.
  CHECK(
      WaitFor([&] { return fixture.server.stats().connections == 1; }, kWait));
  // Authenticated: a call is served.
  REQUIRE(SendEcho(first, 1, "authenticated") == kSuccess);
  const Received response = first.WaitForFrame();
  REQUIRE(response.prefix.type == FrameType::kRpc);
  CHECK(std::string(reinterpret_cast<const char*>(response.payload.data()),
                    response.payload.size()) == "authenticated");

  LogCapture log;
  HostilePeer replay;
  fixture.Connect(replay);
  for (const SentAuth& auth : recorded) {
    if (replay.disconnected()) break;
    replay.PostSendFrame(FrameType::kControl, AsBytes(auth.message),
                         auth.bytes);
  }
  INFO("replaying peer " << replay.name() << ": " << replay.Describe());
  CHECK(replay.WaitClosed());
  // Whatever it received (the server's flight), VERIFIED was not among it.
  for (const Received& message : replay.TakeAll()) {
    REQUIRE(message.prefix.type == FrameType::kControl);
    const auto control = transport::rdma::DecodeControl(message.header);
    REQUIRE(control.has_value());
    CHECK(control->kind == ControlKind::kAuth);
    CHECK(control->flags != kAuthVerified);
  }
  CHECK(fixture.server.stats().connections == 1);  // The first alone.
  CHECK(fixture.service.calls_started == 1);
}

}  // namespace
}  // namespace rdmarpc::hostile
