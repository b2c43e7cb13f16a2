// The rdmarpc.Introspection service (proto/introspection.proto): a server's
// services and methods, their .proto descriptors (reflection) and metrics,
// read by `tools/rpc list|describe|call|stats URI`.
//
//   rdmarpc::rpc::EnableIntrospection(server);   // before server.Listen
#ifndef RDMARPC_INTROSPECTION_H_
#define RDMARPC_INTROSPECTION_H_

#include "rdmarpc/server.h"      // IWYU pragma: export
#include "rpc/introspection.h"   // IWYU pragma: export

#endif  // RDMARPC_INTROSPECTION_H_
