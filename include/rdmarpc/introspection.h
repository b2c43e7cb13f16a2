// rdmarpc.Introspection (proto/introspection.proto): lists a server's
// services, returns their .proto descriptors (reflection) and its metrics.
// tools/rpc is its client.
//
//   rdmarpc::Server server;
//   server.RegisterService(&my_service);
//   rdmarpc::EnableIntrospection(server);  // Before Listen.
#ifndef RDMARPC_INTROSPECTION_H_
#define RDMARPC_INTROSPECTION_H_

#include <string_view>

#include "proto/introspection.pb.h"
#include "proto/introspection.rdmarpc.h"  // IWYU pragma: export
#include "rdmarpc/server.h"               // IWYU pragma: export

namespace rdmarpc {

// Registers the service on `server`, which owns it.
void EnableIntrospection(Server& server);

// What the service's methods answer, for in-process use.
ListServicesResponse ListServices(const Server& server);
// NOT_FOUND for an unknown service, FAILED_PRECONDITION for one without a
// descriptor (built by hand rather than from a .proto).
StatusOr<GetFileDescriptorsResponse> GetFileDescriptors(
    const Server& server, std::string_view service);
ServerMetrics GetMetrics(const Server& server);

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace rpc {
using rdmarpc::EnableIntrospection;
using rdmarpc::GetFileDescriptors;
using rdmarpc::GetMetrics;
using rdmarpc::ListServices;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_INTROSPECTION_H_
