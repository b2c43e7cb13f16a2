// TlsContext and TlsSession in memory: two sessions joined by moving each
// one's ciphertext to the other, with certificates the test makes.
#include "transport/tls/tls.h"

#include <sys/stat.h>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/test_pki.h"

namespace rdmarpc::transport::tls {
namespace {

using Catch::Matchers::ContainsSubstring;
using testing::IssuedCert;
using testing::TempDir;
using testing::TestPki;

std::span<const std::byte> Bytes(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

// Moves what `from` queued to `to`.
void Move(TlsSession& from, TlsSession& to) {
  const auto bytes = from.Outgoing();
  to.Receive(bytes);
  from.Consume(bytes.size());
}

struct Outcome {
  Status client;
  Status server;
};

// Runs both handshakes, each side's messages delivered whole, until both
// are done or have failed (a side that failed sends its alert first).
Outcome Handshake(TlsSession& client, TlsSession& server) {
  Outcome out;
  for (int round = 0; round < 10; ++round) {
    if (out.client.ok() && !client.handshake_done()) {
      if (auto step = client.Handshake(); !step.ok())
        out.client = step.status();
    }
    Move(client, server);
    if (out.server.ok() && !server.handshake_done()) {
      if (auto step = server.Handshake(); !step.ok())
        out.server = step.status();
    }
    Move(server, client);
    if (client.handshake_done() && server.handshake_done()) break;
  }
  return out;
}

std::shared_ptr<TlsContext> MustCreate(const TlsOptions& options,
                                       TlsContext::Role role) {
  auto context = TlsContext::Create(options, role);
  INFO(context.status().ToString());
  REQUIRE(context.ok());
  return *context;
}

std::unique_ptr<TlsSession> MustSession(TlsContext& context,
                                        std::string_view host = {}) {
  auto session = context.NewSession(host);
  INFO(session.status().ToString());
  REQUIRE(session.ok());
  return std::move(*session);
}

// Sends `text` from one session to the other and reads it back whole.
std::string Relay(TlsSession& from, TlsSession& to, const std::string& text) {
  REQUIRE(from.Write(Bytes(text)).ok());
  Move(from, to);
  std::string got;
  std::vector<std::byte> buffer(4096);
  for (;;) {
    auto n = to.Read(buffer);
    REQUIRE(n.ok());
    if (*n == 0) break;
    got.append(reinterpret_cast<const char*>(buffer.data()), *n);
  }
  return got;
}

TlsOptions Serving(const IssuedCert& cert) {
  TlsOptions options;
  options.cert_file = cert.cert_file;
  options.key_file = cert.key_file;
  return options;
}

TlsOptions Trusting(const std::string& ca_file) {
  TlsOptions options;
  options.ca_file = ca_file;
  return options;
}

struct Fixture {
  TempDir dir;
  TestPki pki{dir.path()};
  IssuedCert server_cert =
      pki.Issue("server", {"DNS:localhost", "IP:127.0.0.1"}, "server");
  IssuedCert client_cert =
      pki.Issue("client", {"URI:spiffe://rdmarpc.test/kv-client"}, "client");
  TlsOptions ServerOptions() const { return Serving(server_cert); }
  TlsOptions ClientOptions() const { return Trusting(pki.ca_file()); }
};

TEST_CASE("tls: a client that trusts the CA authenticates the server") {
  Fixture f;
  auto server_context =
      MustCreate(f.ServerOptions(), TlsContext::Role::kServer);
  auto client_context =
      MustCreate(f.ClientOptions(), TlsContext::Role::kClient);
  auto server = MustSession(*server_context);
  auto client = MustSession(*client_context, "localhost");
  const Outcome outcome = Handshake(*client, *server);
  INFO(outcome.client.ToString() << " / " << outcome.server.ToString());
  REQUIRE(outcome.client.ok());
  REQUIRE(outcome.server.ok());
  REQUIRE(client->handshake_done());
  REQUIRE(server->handshake_done());
  CHECK(client->version() == "TLSv1.3");
  // AES-128-GCM first by default (OpenSSL's own order has AES-256 first).
  CHECK(client->cipher() == "TLS_AES_128_GCM_SHA256");
  CHECK(client->peer().common_name == "server");
  CHECK_THAT(client->peer().subject, ContainsSubstring("CN=server"));
  CHECK(client->peer().alt_names ==
        std::vector<std::string>{"DNS:localhost", "IP:127.0.0.1"});
  CHECK_FALSE(server->peer().authenticated());  // No client certificate.

  // Both ways, small and spread over several records.
  CHECK(Relay(*client, *server, "ping") == "ping");
  CHECK(Relay(*server, *client, "pong") == "pong");
  std::string large(100000, '\0');
  for (size_t i = 0; i < large.size(); ++i) large[i] = char('a' + i % 26);
  CHECK(Relay(*client, *server, large) == large);

  // Ciphertext that arrives a byte at a time still decrypts.
  REQUIRE(server->Write(Bytes("trickle")).ok());
  const auto bytes = server->Outgoing();
  std::string got;
  std::byte out[64];
  for (const std::byte b : std::vector<std::byte>(bytes.begin(), bytes.end())) {
    client->Receive(std::span(&b, 1));
    auto n = client->Read(out);
    REQUIRE(n.ok());
    got.append(reinterpret_cast<const char*>(out), *n);
  }
  server->Consume(bytes.size());
  CHECK(got == "trickle");
}

TEST_CASE("tls: an IP address is checked against the certificate's") {
  Fixture f;
  auto server_context =
      MustCreate(f.ServerOptions(), TlsContext::Role::kServer);
  auto client_context =
      MustCreate(f.ClientOptions(), TlsContext::Role::kClient);
  auto server = MustSession(*server_context);
  auto client = MustSession(*client_context, "127.0.0.1");
  CHECK(Handshake(*client, *server).client.ok());
  CHECK(client->handshake_done());

  auto server2 = MustSession(*server_context);
  auto wrong_ip = MustSession(*client_context, "127.0.0.2");
  const Outcome outcome = Handshake(*wrong_ip, *server2);
  CHECK(outcome.client.code() == StatusCode::kUnauthenticated);
  CHECK_THAT(std::string(outcome.client.message()),
             ContainsSubstring("IP address mismatch"));
}

TEST_CASE("tls: mutual TLS shows the client's identity to the server") {
  Fixture f;
  TlsOptions server_options = f.ServerOptions();
  server_options.ca_file = f.pki.ca_file();
  server_options.require_client_cert = true;
  TlsOptions client_options = f.ClientOptions();
  client_options.cert_file = f.client_cert.cert_file;
  client_options.key_file = f.client_cert.key_file;
  auto server_context = MustCreate(server_options, TlsContext::Role::kServer);
  auto client_context = MustCreate(client_options, TlsContext::Role::kClient);
  auto server = MustSession(*server_context);
  auto client = MustSession(*client_context, "localhost");
  const Outcome outcome = Handshake(*client, *server);
  REQUIRE(outcome.client.ok());
  REQUIRE(outcome.server.ok());
  CHECK(server->peer().common_name == "client");
  CHECK(server->peer().alt_names ==
        std::vector<std::string>{"URI:spiffe://rdmarpc.test/kv-client"});

  // Both ends derive the same binding, and another session another one.
  auto a = client->ExportKeyingMaterial("EXPORTER-rdmarpc-test");
  auto b = server->ExportKeyingMaterial("EXPORTER-rdmarpc-test");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a == *b);
  auto server2 = MustSession(*server_context);
  auto client2 = MustSession(*client_context, "localhost");
  REQUIRE(Handshake(*client2, *server2).server.ok());
  CHECK(*client2->ExportKeyingMaterial("EXPORTER-rdmarpc-test") != *a);
}

TEST_CASE(
    "tls: a client without a certificate is refused when one is "
    "required, and both sides say why") {
  Fixture f;
  TlsOptions server_options = f.ServerOptions();
  server_options.ca_file = f.pki.ca_file();
  server_options.require_client_cert = true;
  auto server_context = MustCreate(server_options, TlsContext::Role::kServer);
  auto client_context =
      MustCreate(f.ClientOptions(), TlsContext::Role::kClient);
  auto server = MustSession(*server_context);
  auto client = MustSession(*client_context, "localhost");
  const Outcome outcome = Handshake(*client, *server);
  CHECK(outcome.server.code() == StatusCode::kUnauthenticated);
  CHECK_THAT(std::string(outcome.server.message()),
             ContainsSubstring("did not return a certificate"));
  // TLS 1.3: the client finished first; the refusal reaches its next read.
  std::byte buffer[16];
  auto read = client->Read(buffer);
  REQUIRE_FALSE(read.ok());
  CHECK(read.status().code() == StatusCode::kUnauthenticated);
  CHECK_THAT(std::string(read.status().message()),
             ContainsSubstring("certificate required"));
}

TEST_CASE("tls: a certificate from an unknown CA is refused on both sides") {
  Fixture f;
  TestPki other(f.dir.path(), "other");
  auto server_context =
      MustCreate(f.ServerOptions(), TlsContext::Role::kServer);
  auto client_context =
      MustCreate(Trusting(other.ca_file()), TlsContext::Role::kClient);
  auto server = MustSession(*server_context);
  auto client = MustSession(*client_context, "localhost");
  const Outcome outcome = Handshake(*client, *server);
  CHECK(outcome.client.code() == StatusCode::kUnauthenticated);
  CHECK_THAT(std::string(outcome.client.message()),
             ContainsSubstring("unable to get local issuer certificate"));
  CHECK(outcome.server.code() == StatusCode::kUnauthenticated);
  CHECK_THAT(std::string(outcome.server.message()),
             ContainsSubstring("unknown ca"));
  CHECK_FALSE(client->handshake_done());
  CHECK_FALSE(server->handshake_done());
}

TEST_CASE("tls: an expired certificate and a wrong host name are refused") {
  Fixture f;
  const IssuedCert expired =
      f.pki.Issue("old", {"DNS:localhost"}, "old", std::chrono::hours(-2),
                  std::chrono::hours(-1));
  auto client_context =
      MustCreate(f.ClientOptions(), TlsContext::Role::kClient);
  {
    auto server_context =
        MustCreate(Serving(expired), TlsContext::Role::kServer);
    auto server = MustSession(*server_context);
    auto client = MustSession(*client_context, "localhost");
    const Outcome outcome = Handshake(*client, *server);
    CHECK(outcome.client.code() == StatusCode::kUnauthenticated);
    CHECK_THAT(std::string(outcome.client.message()),
               ContainsSubstring("certificate has expired"));
    CHECK(outcome.server.code() == StatusCode::kUnauthenticated);
    CHECK_THAT(std::string(outcome.server.message()),
               ContainsSubstring("certificate expired"));
  }
  {
    auto server_context =
        MustCreate(f.ServerOptions(), TlsContext::Role::kServer);
    auto server = MustSession(*server_context);
    auto client = MustSession(*client_context, "kv.example");
    const Outcome outcome = Handshake(*client, *server);
    CHECK(outcome.client.code() == StatusCode::kUnauthenticated);
    CHECK_THAT(std::string(outcome.client.message()),
               ContainsSubstring("hostname mismatch"));
  }
  {
    // server_name overrides the host dialled.
    TlsOptions options = f.ClientOptions();
    options.server_name = "localhost";
    auto named = MustCreate(options, TlsContext::Role::kClient);
    auto server_context =
        MustCreate(f.ServerOptions(), TlsContext::Role::kServer);
    auto server = MustSession(*server_context);
    auto client = MustSession(*named, "10.9.8.7");
    CHECK(Handshake(*client, *server).client.ok());
    CHECK(client->handshake_done());
  }
}

TEST_CASE("tls: bytes that are not TLS fail the server's handshake") {
  Fixture f;
  auto server_context =
      MustCreate(f.ServerOptions(), TlsContext::Role::kServer);
  auto server = MustSession(*server_context);
  const std::string plaintext = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  server->Receive(Bytes(plaintext));
  auto step = server->Handshake();
  REQUIRE_FALSE(step.ok());
  CHECK(step.status().code() == StatusCode::kUnavailable);
  CHECK_THAT(std::string(step.status().message()),
             ContainsSubstring("TLS handshake failed"));
}

TEST_CASE("tls: a record altered in flight is refused") {
  Fixture f;
  auto server_context =
      MustCreate(f.ServerOptions(), TlsContext::Role::kServer);
  auto client_context =
      MustCreate(f.ClientOptions(), TlsContext::Role::kClient);
  auto server = MustSession(*server_context);
  auto client = MustSession(*client_context, "localhost");
  REQUIRE(Handshake(*client, *server).server.ok());
  REQUIRE(client->Write(Bytes("secret")).ok());
  std::vector<std::byte> bytes(client->Outgoing().begin(),
                               client->Outgoing().end());
  client->Consume(bytes.size());
  bytes[bytes.size() - 3] ^= std::byte{1};
  server->Receive(bytes);
  std::byte out[64];
  auto read = server->Read(out);
  REQUIRE_FALSE(read.ok());
  CHECK(read.status().code() == StatusCode::kUnavailable);
}

TEST_CASE("tls: credentials are checked when loaded") {
  Fixture f;
  SECTION("a key others may read") {
    REQUIRE(::chmod(f.server_cert.key_file.c_str(), 0644) == 0);
    auto context =
        TlsContext::Create(f.ServerOptions(), TlsContext::Role::kServer);
    REQUIRE_FALSE(context.ok());
    CHECK(context.status().code() == StatusCode::kFailedPrecondition);
    CHECK_THAT(std::string(context.status().message()),
               ContainsSubstring(f.server_cert.key_file));
    CHECK_THAT(std::string(context.status().message()),
               ContainsSubstring("0644"));
    // Group access is allowed.
    REQUIRE(::chmod(f.server_cert.key_file.c_str(), 0640) == 0);
    CHECK(
        TlsContext::Create(f.ServerOptions(), TlsContext::Role::kServer).ok());
  }
  SECTION("a key that is not the certificate's") {
    TlsOptions options = f.ServerOptions();
    options.key_file = f.client_cert.key_file;
    auto context = TlsContext::Create(options, TlsContext::Role::kServer);
    REQUIRE_FALSE(context.ok());
    CHECK(context.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(context.status().message()),
               ContainsSubstring("is not the key of"));
  }
  SECTION("a missing file") {
    TlsOptions options = f.ClientOptions();
    options.ca_file = f.dir.path() + "/nothing.pem";
    auto context = TlsContext::Create(options, TlsContext::Role::kClient);
    REQUIRE_FALSE(context.ok());
    CHECK_THAT(std::string(context.status().message()),
               ContainsSubstring("nothing.pem"));
  }
  SECTION("a server without a certificate, or requiring one without a CA") {
    CHECK_FALSE(TlsContext::Create({}, TlsContext::Role::kServer).ok());
    TlsOptions options = f.ServerOptions();
    options.require_client_cert = true;
    CHECK_FALSE(TlsContext::Create(options, TlsContext::Role::kServer).ok());
  }
  SECTION("the cipher suites asked for are the ones used") {
    TlsOptions options = f.ClientOptions();
    options.ciphersuites = "TLS_CHACHA20_POLY1305_SHA256";
    auto client_context = MustCreate(options, TlsContext::Role::kClient);
    auto server_context =
        MustCreate(f.ServerOptions(), TlsContext::Role::kServer);
    auto client = MustSession(*client_context, "localhost");
    auto server = MustSession(*server_context);
    REQUIRE(Handshake(*client, *server).client.ok());
    CHECK(client->cipher() == "TLS_CHACHA20_POLY1305_SHA256");
    CHECK(server->cipher() == "TLS_CHACHA20_POLY1305_SHA256");
  }
  SECTION("cipher suites OpenSSL does not have") {
    TlsOptions options = f.ClientOptions();
    options.ciphersuites = "TLS_NO_SUCH_SUITE";
    auto context = TlsContext::Create(options, TlsContext::Role::kClient);
    REQUIRE_FALSE(context.ok());
    CHECK_THAT(std::string(context.status().message()),
               ContainsSubstring("TLS_NO_SUCH_SUITE"));
  }
}

TEST_CASE("tls: certificates are read again on Reload and when they change") {
  Fixture f;
  TlsOptions options = f.ServerOptions();
  options.reload_check_interval = std::chrono::milliseconds(0);
  auto server_context = MustCreate(options, TlsContext::Role::kServer);
  auto client_context =
      MustCreate(f.ClientOptions(), TlsContext::Role::kClient);
  auto served_name = [&](TlsContext& server_side) {
    auto server = MustSession(server_side);
    auto client = MustSession(*client_context, "localhost");
    const Outcome outcome = Handshake(*client, *server);
    REQUIRE(outcome.client.ok());
    return client->peer().common_name;
  };
  CHECK(served_name(*server_context) == "server");
  // The files are replaced: sessions keep the old ones until a reload.
  f.pki.Issue("server-renewed", {"DNS:localhost"}, "server");
  CHECK(served_name(*server_context) == "server");
  REQUIRE(server_context->Reload().ok());
  CHECK(server_context->loads() == 2);
  CHECK(served_name(*server_context) == "server-renewed");

  // A reload that fails keeps what was loaded.
  std::ofstream(f.server_cert.cert_file) << "not a certificate\n";
  CHECK(server_context->Reload().code() == StatusCode::kInvalidArgument);
  CHECK(served_name(*server_context) == "server-renewed");

  // With a check interval, a change is picked up by the next session.
  TlsOptions watching = f.ServerOptions();
  watching.reload_check_interval = std::chrono::milliseconds(1);
  f.pki.Issue("first", {"DNS:localhost"}, "server");
  auto watched = MustCreate(watching, TlsContext::Role::kServer);
  CHECK(served_name(*watched) == "first");
  f.pki.Issue("second-one", {"DNS:localhost"}, "server");
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(served_name(*watched) == "second-one");
  CHECK(watched->loads() == 2);
}

}  // namespace
}  // namespace rdmarpc::transport::tls
