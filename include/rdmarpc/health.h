// The health service, shaped like gRPC's grpc.health.v1.Health
// (rpc/builtin/health.h, proto/health.proto):
//
//   rdmarpc::rpc::HealthStatus* health = rdmarpc::rpc::EnableHealth(server);
//   health->Set("pkg.Service", rdmarpc::rpc::ServingStatus::NOT_SERVING);
//
// A cluster channel checks it with ClusterOptions::health_check.
#ifndef RDMARPC_HEALTH_H_
#define RDMARPC_HEALTH_H_

#include "proto/health.rdmarpc.h"  // IWYU pragma: export
#include "rdmarpc/server.h"        // IWYU pragma: export
#include "rpc/builtin/health.h"    // IWYU pragma: export

#endif  // RDMARPC_HEALTH_H_
