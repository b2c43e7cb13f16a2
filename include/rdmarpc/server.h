// The server side of rdmarpc.
//
//   rdmarpc::rpc::Server          serves registered services on one or more
//                                 URIs (tcp://, rdma://, auto://):
//                                 RegisterService, Listen, Shutdown(grace),
//                                 stats(), per-method metrics.
//   rdmarpc::rpc::ServerOptions   worker threads, transport options (poll
//                                 mode, payload and memory limits), calls
//                                 and connections allowed, where handlers
//                                 run (rpc/common/executor.h), interceptors,
//                                 and admin_listen: an HTTP endpoint with
//                                 /metrics for Prometheus and a status page
//                                 (docs/admin.md).
//   rdmarpc::rpc::Service         a service: generated ones derive from it
//                                 (Foo::Service, from foo.rdmarpc.h); code
//                                 without generated stubs adds methods with
//                                 AddMethod(name, handler), bytes in and out.
//   rdmarpc::rpc::ServerCall      one call as its handler sees it: request(),
//                                 deadline(), IsCancelled(), OnCancel(), and
//                                 Finish(status, response) from any thread;
//                                 request_metadata(), response_headers(),
//                                 response_trailers().
//   rdmarpc::rpc::ServerInterceptor, TokenServerInterceptor,
//   LoggingServerInterceptor      code that sees every call before its
//                                 handler and at its end
//                                 (rpc/common/interceptor.h).
//   rdmarpc::transport::TransportOptions, PollMode
//                                 in ServerOptions::transport.
//
//   MyServiceImpl impl;                      // derives from Foo::Service
//   rdmarpc::rpc::Server server;
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
#include "rdmarpc/status.h"          // IWYU pragma: export
#include "rpc/common/executor.h"     // IWYU pragma: export
#include "rpc/common/interceptor.h"  // IWYU pragma: export
#include "rpc/common/server_call.h"  // IWYU pragma: export
#include "rpc/common/service.h"      // IWYU pragma: export
#include "rpc/server.h"              // IWYU pragma: export

#endif  // RDMARPC_SERVER_H_
