// An admin endpoint for a process that is only a client (brpc's "dummy
// server"): the same /metrics, /healthz and status page as a server's
// (rpc/builtin/admin.h, ServerOptions::admin_listen), showing every Channel of
// this process (rpc/builtin/client_metrics.h) and the process's gauges, served
// by a thread of its own.
//
//   auto admin = rdmarpc::rpc::ClientAdmin::Start("http://127.0.0.1:9465");
//   if (!admin.ok()) ...;  // INVALID_ARGUMENT, or the port is taken.
//
// A server's own endpoint shows the process's channels too: a process with
// a server needs no ClientAdmin.
#ifndef RDMARPC_RPC_BUILTIN_CLIENT_ADMIN_H_
#define RDMARPC_RPC_BUILTIN_CLIENT_ADMIN_H_

#include <memory>
#include <string>
#include <string_view>

#include "rdmarpc/status.h"
#include "rpc/builtin/admin.h"
#include "rpc/common/event_loop.h"

namespace rdmarpc::rpc {

class ClientAdmin {
 public:
  // Listens on `uri` (http://HOST:PORT; port 0 picks one).
  static StatusOr<std::unique_ptr<ClientAdmin>> Start(std::string_view uri);
  ~ClientAdmin();  // Closes the endpoint and stops its thread.
  ClientAdmin(const ClientAdmin&) = delete;
  ClientAdmin& operator=(const ClientAdmin&) = delete;

  // http://HOST:PORT, with the port bound.
  const std::string& uri() const { return endpoint_->uri(); }

 private:
  ClientAdmin() = default;
  EventLoop loop_;  // Declared first: it outlives the endpoint.
  std::unique_ptr<AdminEndpoint> endpoint_;
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_BUILTIN_CLIENT_ADMIN_H_
