// The health service, shaped like gRPC's grpc.health.v1.Health
// (rpc/builtin/health.h, proto/health.proto):
//
//   rdmarpc::HealthStatus* health = rdmarpc::EnableHealth(server);
//   health->Set("pkg.Service", rdmarpc::ServingStatus::NOT_SERVING);
//
// A cluster channel checks it with ClusterOptions::health_check.
#ifndef RDMARPC_HEALTH_H_
#define RDMARPC_HEALTH_H_

#include "proto/health.rdmarpc.h"  // IWYU pragma: export
#include "rdmarpc/server.h"        // IWYU pragma: export
#include "rpc/builtin/health.h"    // IWYU pragma: export

// One namespace for what an application names: rdmarpc::X is the same
// entity as the rdmarpc::rpc::X or rdmarpc::transport::X the implementation
// declares (either spelling compiles; write rdmarpc::X).
namespace rdmarpc {
using rpc::EnableHealth;
using rpc::HealthStatus;
using rpc::ServingStatus;
}  // namespace rdmarpc

#endif  // RDMARPC_HEALTH_H_
