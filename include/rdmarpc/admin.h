// The admin endpoint: Prometheus /metrics, /healthz and a status page
// (docs/admin.md). A server opens it with EnableAdmin (or
// ServerOptions::admin_listen); a process that is only a client opens its
// own, showing its channels (brpc's "dummy server"):
//
//   rdmarpc::EnableAdmin(server, "http://127.0.0.1:9464");  // Server.
//   auto admin = rdmarpc::ClientAdmin::Start("http://127.0.0.1:9465");
//   if (!admin.ok()) ...;  // INVALID_ARGUMENT, or the port is taken.
#ifndef RDMARPC_ADMIN_H_
#define RDMARPC_ADMIN_H_

#include "rdmarpc/status.h"             // IWYU pragma: export
#include "rpc/builtin/admin_service.h"  // IWYU pragma: export
#include "rpc/builtin/client_admin.h"   // IWYU pragma: export

// One namespace for what an application names: rdmarpc::X is the same
// entity as the rdmarpc::rpc::X or rdmarpc::transport::X the implementation
// declares (either spelling compiles; write rdmarpc::X).
namespace rdmarpc {
using rpc::EnableAdmin;
using rpc::ClientAdmin;
}  // namespace rdmarpc

#endif  // RDMARPC_ADMIN_H_
