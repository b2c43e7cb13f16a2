// rdmarpc.Introspection (proto/introspection.proto): lists a server's
// services, returns their .proto descriptors (reflection) and its metrics.
// tools/rpc is its client.
//
//   rpc::Server server;
//   server.RegisterService(&my_service);
//   rpc::EnableIntrospection(server);  // Before Listen.
#ifndef RDMARPC_RPC_BUILTIN_INTROSPECTION_H_
#define RDMARPC_RPC_BUILTIN_INTROSPECTION_H_

#include <string_view>

#include "proto/introspection.pb.h"
#include "rdmarpc/server.h"

namespace rdmarpc::rpc {

// Registers the service on `server`, which owns it.
void EnableIntrospection(Server& server);

// What the service's methods answer, for in-process use.
ListServicesResponse ListServices(const Server& server);
// NOT_FOUND for an unknown service, FAILED_PRECONDITION for one without a
// descriptor (built by hand rather than from a .proto).
StatusOr<GetFileDescriptorsResponse> GetFileDescriptors(
    const Server& server, std::string_view service);
ServerMetrics GetMetrics(const Server& server);

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_BUILTIN_INTROSPECTION_H_
