// TLS on the TCP transport (tls://, TransportOptions::tls): frames of every
// size through the session, each refusal with its reason on the connecting
// side, plaintext and TLS peers told apart, and an RPC server and channel
// over tls:// with certificates the test makes.
#include <atomic>
#include <boost/asio/post.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <cstdio>
#include <filesystem>
#include <future>
#include <string>
#include <thread>

#include "rdmarpc/authorization.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/server.h"
#include "rpc/common/event_loop.h"
#include "tests/support/tcp_pair.h"
#include "tests/support/test_pki.h"
#include "tests/support/test_support.h"
#include "transport/factory/factory.h"

namespace rdmarpc::transport::testing {
namespace {

using Catch::Matchers::ContainsSubstring;
using rdmarpc::testing::IssuedCert;
using rdmarpc::testing::TempDir;
using rdmarpc::testing::TestPki;
using rdmarpc::testing::WaitFor;

using Certs = rdmarpc::testing::TestCerts;

// A listener on its own loop; Connect() dials it.
struct TlsEnds {
  explicit TlsEnds(const TransportOptions& server_options,
                   const std::string& uri = "tls://127.0.0.1:0") {
    auto bound = Listen(
        loop.context(), uri, server_options,
        [this]() -> boost::asio::io_context& { return loop.context(); },
        [this](std::shared_ptr<Connection> c) {
          c->Start(recorder);
          std::lock_guard lock(mu);
          accepted.push_back(std::move(c));
        });
    REQUIRE(bound.ok());
    listener = std::move(*bound);
  }
  ~TlsEnds() { loop.Stop(); }

  StatusOr<std::shared_ptr<Connection>> Connect(const TransportOptions& options,
                                                std::string uri = "") {
    std::promise<StatusOr<std::shared_ptr<Connection>>> connected;
    transport::Connect(loop.context(), uri.empty() ? listener->uri() : uri,
                       options, [&](StatusOr<std::shared_ptr<Connection>> c) {
                         connected.set_value(std::move(c));
                       });
    return connected.get_future().get();
  }
  size_t accepted_count() {
    std::lock_guard lock(mu);
    return accepted.size();
  }

  rpc::EventLoop loop;
  std::unique_ptr<Listener> listener;
  std::shared_ptr<Recorder> recorder = std::make_shared<Recorder>();
  std::mutex mu;
  std::vector<std::shared_ptr<Connection>> accepted;
};

std::string Refusal(const StatusOr<std::shared_ptr<Connection>>& connected) {
  REQUIRE_FALSE(connected.ok());
  return connected.status().ToString();
}

TEST_CASE("tls: frames of every size cross a tls:// connection intact") {
  Certs certs;
  TlsEnds ends(certs.Server());
  CHECK(ends.listener->uri().starts_with("tls://127.0.0.1:"));
  auto client = ends.Connect(certs.Client());
  INFO(client.status().ToString());
  REQUIRE(client.ok());
  CHECK((*client)->peer().starts_with("tls://"));
  (*client)->Start(std::make_shared<Recorder>());
  // Empty, small, copied out, in place, larger than the staging area (read
  // straight into its block), and more than fits one record.
  const std::vector<size_t> sizes = {0,        10,    70000, 3,
                                     5u << 20, 16384, 1,     200000};
  for (size_t i = 0; i < sizes.size(); ++i) {
    REQUIRE((*client)->Send(MakeFrame("h" + std::to_string(i), sizes[i])).ok());
  }
  // And many small frames from another thread at once.
  std::thread other([&] {
    for (int i = 0; i < 300; ++i) {
      REQUIRE((*client)->Send(MakeFrame("o", 16)).ok());
    }
  });
  other.join();
  AwaitFrames(*ends.recorder, sizes.size() + 300);
  std::lock_guard lock(ends.recorder->mu);
  for (size_t i = 0; i < sizes.size(); ++i) {
    CHECK(ends.recorder->headers[i] == "h" + std::to_string(i));
    CHECK(ends.recorder->payload_sizes[i] == sizes[i]);
  }
  CHECK(ends.recorder->payloads_intact);
  (*client)->Close(Status(StatusCode::kCancelled, "done"));
}

// Answers every frame with one of its own.
struct Echoer : ConnectionObserver {
  void OnFrame(ReceivedFrame&& frame) override {
    if (auto c = connection.lock()) {
      c
          ->Send(MakeFrame(
              std::string(reinterpret_cast<const char*>(frame.header().data()),
                          frame.header().size()),
              frame.payload_size()))
          .IgnoreError();
    }
  }
  void OnClose(const Status&) override {}
  std::weak_ptr<Connection> connection;
};

TEST_CASE("tls: replies sent while frames are delivered arrive in order") {
  Certs certs;
  TlsEnds ends(certs.Server());
  auto client = ends.Connect(certs.Client());
  REQUIRE(client.ok());
  auto echoer = std::make_shared<Echoer>();
  echoer->connection = *client;
  (*client)->Start(echoer);
  // The server side sends; the client answers from its loop thread.
  while (ends.accepted_count() == 0) std::this_thread::yield();
  std::shared_ptr<Connection> server;
  {
    std::lock_guard lock(ends.mu);
    server = ends.accepted[0];
  }
  std::vector<std::string> expected;
  boost::asio::post(server->executor(), [&] {
    for (int i = 0; i < 500; ++i) {
      server->Send(MakeFrame("f" + std::to_string(i), i % 7 == 0 ? 40000 : 16))
          .IgnoreError();
    }
  });
  for (int i = 0; i < 500; ++i) expected.push_back("f" + std::to_string(i));
  AwaitFrames(*ends.recorder, expected.size());
  std::lock_guard lock(ends.recorder->mu);
  CHECK(ends.recorder->headers == expected);
  CHECK(ends.recorder->payloads_intact);
}

TEST_CASE(
    "tls: a server certificate the client cannot trust is refused, "
    "naming why") {
  Certs certs;
  TlsEnds ends(certs.Server());
  SECTION("unknown CA") {
    TestPki other(certs.dir.path(), "other");
    TransportOptions options;
    options.tls.emplace();
    options.tls->ca_file = other.ca_file();
    const std::string refusal = Refusal(ends.Connect(options));
    CHECK_THAT(refusal, ContainsSubstring("UNAUTHENTICATED"));
    CHECK_THAT(refusal, ContainsSubstring("unable to get local issuer"));
  }
  SECTION("wrong host name") {
    TransportOptions options = certs.Client();
    options.tls->server_name = "kv.example";
    const std::string refusal = Refusal(ends.Connect(options));
    CHECK_THAT(refusal, ContainsSubstring("hostname mismatch"));
  }
  SECTION("expired") {
    const IssuedCert old =
        certs.pki.Issue("old", {"IP:127.0.0.1"}, "old", std::chrono::hours(-2),
                        std::chrono::hours(-1));
    TransportOptions server_options;
    server_options.tls.emplace();
    server_options.tls->cert_file = old.cert_file;
    server_options.tls->key_file = old.key_file;
    TlsEnds expired(server_options);
    const std::string refusal = Refusal(expired.Connect(certs.Client()));
    CHECK_THAT(refusal, ContainsSubstring("certificate has expired"));
    CHECK(expired.accepted_count() == 0);
  }
  CHECK(ends.accepted_count() == 0);
}

TEST_CASE("tls: mutual TLS refuses a client without a certificate") {
  Certs certs;
  TlsEnds ends(certs.Server(/*require_client_cert=*/true));
  const std::string refusal = Refusal(ends.Connect(certs.Client()));
  CHECK_THAT(refusal, ContainsSubstring("UNAUTHENTICATED"));
  CHECK_THAT(refusal, ContainsSubstring("certificate required"));
  CHECK(ends.accepted_count() == 0);
  auto client = ends.Connect(certs.Client(/*with_cert=*/true));
  INFO(client.status().ToString());
  REQUIRE(client.ok());
  (*client)->Start(std::make_shared<Recorder>());
  REQUIRE((*client)->Send(MakeFrame("mutual", 100)).ok());
  AwaitFrames(*ends.recorder, 1);
}

TEST_CASE("tls: plaintext and TLS peers are told apart") {
  Certs certs;
  SECTION("a plaintext client of a TLS listener") {
    TlsEnds ends(certs.Server());
    std::string plain = ends.listener->uri();
    plain.replace(0, 3, "tcp");  // The same port, without TLS.
    const std::string refusal = Refusal(ends.Connect({}, plain));
    CHECK_THAT(refusal, ContainsSubstring("speaks TLS"));
    CHECK(ends.accepted_count() == 0);
  }
  SECTION("a TLS client of a plaintext listener") {
    TlsEnds ends({}, "tcp://127.0.0.1:0");
    const std::string refusal = Refusal(ends.Connect(certs.Client()));
    CHECK_THAT(refusal, ContainsSubstring("does not speak TLS"));
  }
  SECTION("TLS configured: tcp:// is TLS") {
    TlsEnds ends(certs.Server());
    std::string uri = ends.listener->uri();
    uri.replace(0, 3, "tcp");
    auto client = ends.Connect(certs.Client(), uri);
    INFO(client.status().ToString());
    REQUIRE(client.ok());
    CHECK((*client)->peer().starts_with("tls://"));
  }
}

// The common name of the certificate a server at `uri` presents to a new
// connection; empty if the connect fails.
std::string ServerName(const std::string& uri,
                       const TransportOptions& options) {
  rpc::EventLoop loop;
  std::promise<std::string> named;
  transport::Connect(loop.context(), uri, options,
                     [&](StatusOr<std::shared_ptr<Connection>> c) {
                       std::string name;
                       if (c.ok() && (*c)->peer_identity() != nullptr) {
                         name = (*c)->peer_identity()->common_name;
                       }
                       if (c.ok()) (*c)->Close(Status());
                       named.set_value(name);
                     });
  std::string name = named.get_future().get();
  loop.Stop();
  return name;
}

TEST_CASE(
    "tls: certificates replaced under load are used by new connections; no "
    "call fails") {
  Certs certs;
  // The files the server is configured with, replaced by renames below.
  const std::string cert = certs.dir.path() + "/live.pem";
  const std::string key = certs.dir.path() + "/live-key.pem";
  std::filesystem::copy_file(certs.server.cert_file, cert);
  std::filesystem::copy_file(certs.server.key_file, key);
  rdmarpc::testing::TestService service;
  rpc::ServerOptions server_options;
  server_options.transport = certs.Server();
  server_options.transport.tls->cert_file = cert;
  server_options.transport.tls->key_file = key;
  server_options.transport.tls->reload_check_interval =
      std::chrono::milliseconds(20);
  rpc::Server server(server_options);
  server.RegisterService(&service);
  auto bound = server.Listen("tls://127.0.0.1:0");
  REQUIRE(bound.ok());
  REQUIRE(ServerName(*bound, certs.Client()) == "server");
  // Load: calls on one connection, and calls each on a connection of its own.
  std::atomic<bool> stop{false};
  std::atomic<int> calls{0}, failures{0};
  std::string first_failure;
  std::mutex mu;
  auto count = [&](const rdmarpc::testing::CallResult& result) {
    ++calls;
    if (result.status.ok() && result.response == "x") return;
    std::lock_guard lock(mu);
    if (failures++ == 0) first_failure = result.status.ToString();
  };
  ChannelOptions channel_options;
  channel_options.transport = certs.Client();
  std::thread steady([&] {
    rpc::Channel channel(*bound, channel_options);
    while (!stop) count(rdmarpc::testing::CallSync(channel, "Echo", "x"));
  });
  std::thread fresh([&] {
    while (!stop) {
      rpc::Channel channel(*bound, channel_options);
      count(rdmarpc::testing::CallSync(channel, "Echo", "x"));
    }
  });
  REQUIRE(WaitFor([&] { return calls > 50; }, std::chrono::seconds(20)));
  // Key and certificate replaced, each by a rename (a reload that meets the
  // new key with the old certificate fails, and keeps what it had).
  const IssuedCert next = certs.pki.Issue(
      "server-2", {"DNS:localhost", "IP:127.0.0.1"}, "server-2");
  std::filesystem::rename(next.key_file, key);
  std::filesystem::rename(next.cert_file, cert);
  CHECK(
      WaitFor([&] { return ServerName(*bound, certs.Client()) == "server-2"; },
              std::chrono::seconds(10)));
  const int before = calls;
  CHECK(WaitFor([&] { return calls > before + 50; }, std::chrono::seconds(20)));
  stop = true;
  steady.join();
  fresh.join();
  INFO(first_failure);
  CHECK(failures == 0);
}

// Runs `command` with a shell; its exit status, and its output in `out`.
int Run(const std::string& command, std::string* out) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    out->append(buffer, n);
  }
  return ::pclose(pipe);
}

TEST_CASE("tls: openssl s_client gets TLS 1.3 and is refused TLS 1.2") {
  Certs certs;
  TlsEnds ends(certs.Server());
  const std::string port =
      ends.listener->uri().substr(ends.listener->uri().rfind(':') + 1);
  const std::string s_client = "openssl s_client -connect 127.0.0.1:" + port +
                               " -CAfile " + certs.pki.ca_file() +
                               " -verify_return_error -brief";
  std::string tls13;
  CHECK(Run(s_client + " -tls1_3 </dev/null", &tls13) == 0);
  INFO(tls13);
  CHECK_THAT(tls13, ContainsSubstring("Protocol version: TLSv1.3"));
  CHECK_THAT(tls13, ContainsSubstring("Verification: OK"));
  std::string tls12;
  CHECK(Run(s_client + " -tls1_2 </dev/null", &tls12) != 0);
  INFO(tls12);
  CHECK_THAT(tls12, ContainsSubstring("alert protocol version"));
}

TEST_CASE("tls: an RPC server and channel over tls://") {
  Certs certs;
  rdmarpc::testing::TestService service;
  rpc::ServerOptions server_options;
  server_options.transport = certs.Server();
  rpc::Server server(server_options);
  server.RegisterService(&service);
  auto bound = server.Listen("tls://127.0.0.1:0");
  INFO(bound.status().ToString());
  REQUIRE(bound.ok());
  ChannelOptions channel_options;
  channel_options.transport = certs.Client();
  rpc::Channel channel(*bound, channel_options);
  const std::string large(300000, 'x');
  for (const std::string& request : {std::string("hello"), large}) {
    auto result = rdmarpc::testing::CallSync(channel, "Echo", request);
    INFO(result.status.ToString());
    REQUIRE(result.status.ok());
    CHECK(result.response == request);
  }
  // A channel without the CA is refused, and says why.
  rpc::Channel stranger(*bound);
  auto refused = rdmarpc::testing::CallSync(
      stranger, "Echo", "x",
      rpc::CallOptions::WithTimeout(std::chrono::seconds(5)));
  CHECK_FALSE(refused.status.ok());
  CHECK_THAT(std::string(refused.status.message()),
             ContainsSubstring("certificate"));
}

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

TEST_CASE(
    "tls: handlers see the peer's identity, and a policy decides "
    "who calls what") {
  Certs certs;
  const IssuedCert admin =
      certs.pki.Issue("admin", {"URI:spiffe://test/admin"}, "admin");
  WhoService who;
  auto policy = std::make_shared<AllowListPolicy>();
  policy->Allow("auth.Who/Me", "URI:spiffe://test/c")
      .Allow("auth.Who", "CN=admin");
  rpc::ServerOptions server_options;
  server_options.transport = certs.Server();
  server_options.transport.tls->ca_file = certs.pki.ca_file();  // Optional.
  server_options.interceptors.push_back(policy);
  rpc::Server server(server_options);
  server.RegisterService(&who);
  auto bound = server.Listen("tls://127.0.0.1:0");
  REQUIRE(bound.ok());
  auto call = [&](const TransportOptions& transport, std::string_view method) {
    ChannelOptions options;
    options.transport = transport;
    rpc::Channel channel(*bound, options);
    return rdmarpc::testing::CallSync(channel, method, "", {}, "auth.Who");
  };
  // The client's certificate: its own method only.
  auto me = call(certs.Client(/*with_cert=*/true), "Me");
  INFO(me.status.ToString());
  REQUIRE(me.status.ok());
  CHECK(me.response == "client URI:spiffe://test/c");
  auto secret = call(certs.Client(/*with_cert=*/true), "Secret");
  CHECK(secret.status.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(std::string(secret.status.message()),
             ContainsSubstring("auth.Who/Secret"));
  // The admin's: the whole service.
  TransportOptions as_admin = certs.Client();
  as_admin.tls->cert_file = admin.cert_file;
  as_admin.tls->key_file = admin.key_file;
  auto admin_secret = call(as_admin, "Secret");
  INFO(admin_secret.status.ToString());
  CHECK(admin_secret.status.ok());
  CHECK(admin_secret.response == "admin URI:spiffe://test/admin");
  // No certificate: connected (the server does not require one), but not
  // authenticated, so refused before the handler.
  auto anonymous = call(certs.Client(), "Me");
  CHECK(anonymous.status.code() == StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace rdmarpc::transport::testing
