// The echo server: //examples/echo:server --uri URI [--admin http://HOST:PORT]
//                   [--tls-cert FILE --tls-key FILE [--tls-ca FILE]]
// (--admin: the admin endpoint, docs/admin.md: /metrics for Prometheus and a
// status page; --tls-*: TLS, with --tls-ca requiring client certificates)
#include "examples/common/flags.h"
#include "examples/common/serve.h"
#include "examples/echo/echo_service.h"
#include "rdmarpc/admin.h"

int main(int argc, char** argv) {
  using namespace rdmarpc;
  const examples::Flags flags(argc, argv);
  examples::EchoImpl echo;
  rpc::ServerOptions options;
  options.transport.tls = flags.Tls(/*server=*/true);
  rpc::Server server(options);
  server.RegisterService(&echo);
  if (const std::string admin = flags.Get("admin", ""); !admin.empty()) {
    rpc::EnableAdmin(server, admin);
  }
  return examples::ServeUntilSignal(
      server, flags.Get("uri", "auto://127.0.0.1:5000"), "echo server");
}
