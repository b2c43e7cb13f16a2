// The admin endpoint: Prometheus /metrics, /healthz and a status page
// (docs/admin.md). A server opens it with EnableAdmin (or
// ServerOptions::admin_listen); a process that is only a client opens its
// own, showing its channels (brpc's "dummy server"):
//
//   rdmarpc::rpc::EnableAdmin(server, "http://127.0.0.1:9464");  // Server.
//   auto admin = rdmarpc::rpc::ClientAdmin::Start("http://127.0.0.1:9465");
//   if (!admin.ok()) ...;  // INVALID_ARGUMENT, or the port is taken.
#ifndef RDMARPC_ADMIN_H_
#define RDMARPC_ADMIN_H_

#include "rdmarpc/status.h"             // IWYU pragma: export
#include "rpc/builtin/admin_service.h"  // IWYU pragma: export
#include "rpc/builtin/client_admin.h"   // IWYU pragma: export

#endif  // RDMARPC_ADMIN_H_
