// The KV server: //examples/kv:server --uri URI [--capacity BYTES]
//   [--token-file FILE] [--log-calls 1] [--admin http://HOST:PORT]
//   [--register-at etcd://HOST:PORT/PREFIX [--registration-ttl-s N]
//    [--etcd-ca FILE [--etcd-cert FILE --etcd-key FILE]]
//    [--etcd-user NAME (password: --etcd-password-file FILE)]]
// With --admin it serves /metrics (Prometheus) and a status page there
// (docs/admin.md).
// With --register-at it registers in etcd while it serves, for clients
// whose --uri is that etcd:// target (docs/cluster.md).
// With a token (the first line of --token-file FILE, or $KV_TOKEN; never on
// the command line, where ps shows it), every call must carry
// "authorization: Bearer TOKEN" (the client's token); --log-calls 1 logs
// each call's end. Both are interceptors (rdmarpc/server.h,
// include/rdmarpc/interceptor.h). A token crosses tcp:// in the clear: use
// it on a trusted network only, or over TLS: --tls-cert FILE --tls-key FILE
// (and --tls-ca FILE to require client certificates from that CA).
#include <chrono>
#include <memory>

#include "examples/common/flags.h"
#include "examples/common/serve.h"
#include "examples/kv/kv_service.h"
#include "rdmarpc/admin.h"

int main(int argc, char** argv) {
  using namespace rdmarpc;
  using namespace rdmarpc::examples::kv;
  const examples::Flags flags(argc, argv);
  KeyValueImpl kv(static_cast<uint64_t>(flags.GetInt("capacity", 1ll << 30)));
  rpc::ServerOptions options;
  options.transport.max_payload_size = kMaxMessageSize;
  options.transport.tls = flags.Tls(/*server=*/true);
  options.max_response_size = kMaxMessageSize;
  // The token check first: the log then shows only calls it let through.
  if (const std::string token = flags.Secret("token", "KV_TOKEN");
      !token.empty()) {
    options.interceptors.push_back(
        std::make_shared<rpc::TokenServerInterceptor>(token));
  }
  if (flags.GetInt("log-calls", 0) != 0) {
    options.interceptors.push_back(
        std::make_shared<rpc::LoggingServerInterceptor>());
  }
  options.register_at = flags.Get("register-at", "");
  options.registration.etcd = flags.Etcd();
  options.registration.ttl = std::chrono::seconds(
      flags.GetInt("registration-ttl-s", options.registration.ttl.count()));
  rpc::Server server(options);
  server.RegisterService(&kv);
  if (const std::string admin = flags.Get("admin", ""); !admin.empty()) {
    rpc::EnableAdmin(server, admin);
  }
  return examples::ServeUntilSignal(
      server, flags.Get("uri", "auto://127.0.0.1:5001"), "kv server");
}
