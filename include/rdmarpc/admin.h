// The admin endpoint: /metrics (Prometheus), /healthz and a status page, for
// a server (EnableAdmin) or a process that is only a client (ClientAdmin).
//
// EnableAdmin: a server's admin endpoint (rpc/builtin/admin.h, docs/admin.md).
//
//   rdmarpc::Server server(options);
//   rdmarpc::EnableAdmin(server, "http://127.0.0.1:9464");  // Before Listen.
//   server.Listen("rdma://10.0.0.1:7000");  // Also opens the endpoint.
//   server.admin_uri();                     // "http://127.0.0.1:9464"
//
// From the first Listen until Shutdown it serves, on the server's first
// event loop: /metrics (Prometheus' text format: the server's methods,
// connections and transports, the process's channels, RDMA resources and
// device counters), /healthz (200 while serving, 503 from the start of
// Shutdown) and a status page. Port 0 picks one. It shows every metric to
// whoever connects, so it listens on loopback only, unless the URI ends in
// ?remote=1 (a management network; never where clients reach). With
// token_file=PATH every page but /healthz asks for "Authorization: Bearer
// <token>" (the file's first line); https://HOST:PORT?cert_file=PATH&
// key_file=PATH serves over TLS. A URI it cannot listen on fails that
// Listen (INVALID_ARGUMENT for another scheme, a bad address, or one beyond
// loopback without remote=1).
// ServerOptions::admin_listen does the same from the server's options.
//
// An admin endpoint for a process that is only a client (brpc's "dummy
// server"): the same /metrics, /healthz and status page as a server's
// (rpc/builtin/admin.h, ServerOptions::admin_listen), showing every Channel of
// this process (rpc/builtin/client_metrics.h) and the process's gauges, served
// by a thread of its own.
//
//   auto admin = rdmarpc::ClientAdmin::Start("http://127.0.0.1:9465");
//   if (!admin.ok()) ...;  // INVALID_ARGUMENT, or the port is taken.
//
// A server's own endpoint shows the process's channels too: a process with
// a server needs no ClientAdmin.
#ifndef RDMARPC_ADMIN_H_
#define RDMARPC_ADMIN_H_

#include <memory>
#include <string>
#include <string_view>

#include "rdmarpc/server.h"  // IWYU pragma: export
#include "rdmarpc/status.h"  // IWYU pragma: export

namespace rdmarpc {

// The implementation's.
namespace rpc {
class AdminEndpoint;  // rpc/builtin/admin.h
class EventLoop;      // rpc/common/event_loop.h
}  // namespace rpc

void EnableAdmin(Server& server, std::string uri);

class ClientAdmin {
 public:
  // Listens on `uri` (http://HOST:PORT; port 0 picks one).
  static StatusOr<std::unique_ptr<ClientAdmin>> Start(std::string_view uri);
  ~ClientAdmin();  // Closes the endpoint and stops its thread.
  ClientAdmin(const ClientAdmin&) = delete;
  ClientAdmin& operator=(const ClientAdmin&) = delete;

  // http://HOST:PORT, with the port bound.
  const std::string& uri() const;

 private:
  ClientAdmin() = default;
  // Declared first: the loop outlives the endpoint.
  std::unique_ptr<rpc::EventLoop> loop_;
  std::unique_ptr<rpc::AdminEndpoint> endpoint_;
};

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace rpc {
using rdmarpc::ClientAdmin;
using rdmarpc::EnableAdmin;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_ADMIN_H_
