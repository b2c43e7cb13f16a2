// The server side of rdmarpc.
//
//   rdmarpc::Server          serves registered services on one or more
//                                 URIs (tcp://, rdma://, auto://):
//                                 RegisterService, Listen, Shutdown(grace),
//                                 stats(), per-method metrics.
//   rdmarpc::ServerOptions   worker threads, transport options (poll
//                                 mode, payload and memory limits), calls
//                                 and connections allowed, where handlers
//                                 run (include/rdmarpc/executor.h),
//                                 interceptors, and admin_listen: an HTTP
//                                 endpoint with /metrics for Prometheus and a
//                                 status page (docs/admin.md).
//   rdmarpc::Service         a service: generated ones derive from it
//                                 (Foo::Service, from foo.rdmarpc.h); code
//                                 without generated stubs adds methods with
//                                 AddMethod(name, handler), bytes in and out.
//   rdmarpc::ServerCall      one call as its handler sees it: request(),
//                                 deadline(), IsCancelled(), OnCancel(), and
//                                 Finish(status, response) from any thread;
//                                 request_metadata(), response_headers(),
//                                 response_trailers().
//   rdmarpc::ServerInterceptor, TokenServerInterceptor,
//   LoggingServerInterceptor      code that sees every call before its
//                                 handler and at its end
//                                 (include/rdmarpc/interceptor.h).
//   rdmarpc::TransportOptions, PollMode
//                                 in ServerOptions::transport.
//
//   MyServiceImpl impl;                      // derives from Foo::Service
//   rdmarpc::Server server;
//   server.RegisterService(&impl);
//   auto uri = server.Listen("auto://0.0.0.0:7000");  // StatusOr<std::string>
//
// Handlers run on the connection's worker thread by default; one that blocks
// holds up that worker's other connections. Set ServerOptions::
// handler_threads (or handler_executor) to run them on a pool instead, or
// hand long work to your own threads and Finish from there.
#ifndef RDMARPC_SERVER_H_
#define RDMARPC_SERVER_H_

#include "rdmarpc/buffer.h"          // IWYU pragma: export
#include "rdmarpc/executor.h"        // IWYU pragma: export
#include "rdmarpc/interceptor.h"     // IWYU pragma: export
#include "rdmarpc/status.h"          // IWYU pragma: export
#include "rpc/common/server_call.h"  // IWYU pragma: export
#include "rpc/common/service.h"      // IWYU pragma: export
#include "rpc/server.h"              // IWYU pragma: export

// One namespace for what an application names: rdmarpc::X is the same
// entity as the rdmarpc::rpc::X or rdmarpc::transport::X the implementation
// declares (either spelling compiles; write rdmarpc::X).
namespace rdmarpc {
using rpc::MethodHandler;
using rpc::Server;
using rpc::ServerCall;
using rpc::ServerOptions;
using rpc::ServerStats;
using rpc::Service;
using rpc::SideEndpoint;
}  // namespace rdmarpc

#endif  // RDMARPC_SERVER_H_
