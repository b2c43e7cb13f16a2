// EnableAdmin: a server's admin endpoint (rpc/builtin/admin.h, docs/admin.md).
//
//   rpc::Server server(options);
//   rpc::EnableAdmin(server, "http://127.0.0.1:9464");  // Before Listen.
//   server.Listen("rdma://10.0.0.1:7000");  // Also opens the endpoint.
//   server.admin_uri();                     // "http://127.0.0.1:9464"
//
// From the first Listen until Shutdown it serves, on the server's first
// event loop: /metrics (Prometheus' text format: the server's methods,
// connections and transports, the process's channels, RDMA resources and
// device counters), /healthz (200 while serving, 503 from the start of
// Shutdown) and a status page. Port 0 picks one. It shows every metric to
// whoever connects: bind it to loopback or a management network, never
// where clients reach. A URI it cannot listen on fails that Listen
// (INVALID_ARGUMENT for another scheme or a bad address).
// ServerOptions::admin_listen does the same from the server's options.
#ifndef RDMARPC_RPC_BUILTIN_ADMIN_SERVICE_H_
#define RDMARPC_RPC_BUILTIN_ADMIN_SERVICE_H_

#include <string>

#include "rdmarpc/server.h"

namespace rdmarpc::rpc {

void EnableAdmin(Server& server, std::string uri);

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_BUILTIN_ADMIN_SERVICE_H_
