// Fuzzes a TLS server session (transport/tls) with whatever a peer sends
// before and after its handshake: the input, cut into pieces, is received,
// and after each piece the handshake (then a read) runs. With a first byte
// of 0 the input follows a genuine ClientHello, so the fuzzer reaches the
// states after it. Whatever arrives, a failure is UNAVAILABLE or
// UNAUTHENTICATED with a message, a session that failed stays failed
// rather than completing, and no certificate is accepted from a peer that
// has none from the test CA (the handshake never completes with a peer
// identity).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "tests/fuzz/fuzz_check.h"
#include "tests/support/test_pki.h"
#include "transport/tls/tls.h"

using rdmarpc::Status;
using rdmarpc::StatusCode;
using rdmarpc::TlsOptions;
using rdmarpc::transport::tls::TlsContext;
using rdmarpc::transport::tls::TlsSession;

namespace {

// The server's credentials, loaded from files removed once read.
struct World {
  std::shared_ptr<TlsContext> server;
  std::vector<std::byte> client_hello;

  World() {
    rdmarpc::testing::TempDir dir;
    rdmarpc::testing::TestPki pki(dir.path());
    const auto cert = pki.Issue("server", {"DNS:localhost"}, "server");
    TlsOptions options;
    options.cert_file = cert.cert_file;
    options.key_file = cert.key_file;
    options.ca_file = pki.ca_file();
    options.require_client_cert = true;
    options.reload_check_interval = std::chrono::milliseconds(0);
    server = *TlsContext::Create(options, TlsContext::Role::kServer);
    TlsOptions client_options;
    client_options.ca_file = pki.ca_file();
    auto client =
        *TlsContext::Create(client_options, TlsContext::Role::kClient);
    auto made = client->NewSession("localhost");
    FUZZ_CHECK(made.ok());
    std::unique_ptr<TlsSession> session = std::move(*made);
    FUZZ_CHECK(session->Handshake().ok());
    client_hello.assign(session->Outgoing().begin(), session->Outgoing().end());
  }
};

bool Acceptable(const Status& status) {
  return (status.code() == StatusCode::kUnavailable ||
          status.code() == StatusCode::kUnauthenticated) &&
         !status.message().empty();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* const world = new World();
  auto made = world->server->NewSession();
  FUZZ_CHECK(made.ok());
  std::unique_ptr<TlsSession> session = std::move(*made);
  std::span<const std::byte> input = std::as_bytes(std::span(data, size));
  if (!input.empty() && input[0] == std::byte{0}) {
    session->Receive(world->client_hello);
    input = input.subspan(1);
  }
  bool failed = false;
  std::byte plain[512];
  while (!input.empty()) {
    // Each piece: a length byte, then up to that many bytes.
    const size_t n =
        std::min(input.size() - 1, static_cast<size_t>(input[0]) + 1);
    session->Receive(input.subspan(1, n));
    input = input.subspan(1 + n);
    auto step = session->Handshake();
    if (!step.ok()) {
      FUZZ_CHECK(Acceptable(step.status()));
      failed = true;
      break;
    }
    if (session->handshake_done()) {
      // Only a client with a certificate from the test CA gets here, which
      // random bytes cannot forge.
      FUZZ_CHECK(session->peer().authenticated());
      auto read = session->Read(plain);
      if (!read.ok()) {
        FUZZ_CHECK(Acceptable(read.status()));
        break;
      }
    }
    session->Consume(session->Outgoing().size());
  }
  if (failed) FUZZ_CHECK(!session->handshake_done());
  return 0;
}
