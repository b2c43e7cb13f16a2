// The rdmarpc.Introspection service (proto/introspection.proto): a server's
// services and methods, their .proto descriptors (reflection) and metrics,
// read by `tools/rpc list|describe|call|stats URI`.
//
//   rdmarpc::EnableIntrospection(server);   // before server.Listen
//   rdmarpc::Introspection::Stub stub(channel);  // ask another server
#ifndef RDMARPC_INTROSPECTION_H_
#define RDMARPC_INTROSPECTION_H_

#include "proto/introspection.rdmarpc.h"  // IWYU pragma: export
#include "rdmarpc/server.h"               // IWYU pragma: export
#include "rpc/builtin/introspection.h"    // IWYU pragma: export

// One namespace for what an application names: rdmarpc::X is the same
// entity as the rdmarpc::rpc::X or rdmarpc::transport::X the implementation
// declares (either spelling compiles; write rdmarpc::X).
namespace rdmarpc {
using rpc::EnableIntrospection;
}  // namespace rdmarpc

#endif  // RDMARPC_INTROSPECTION_H_
