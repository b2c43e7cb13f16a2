// rdmarpc.health.v1.Health (proto/health.proto), shaped like gRPC's health
// service: Check answers a service's serving status, Watch streams it as
// it changes. A cluster channel with ClusterOptions::health_check calls
// Check on each endpoint and sends no call to one that is not SERVING.
//
//   rdmarpc::Server server(options);
//   server.RegisterService(&kv);
//   // Before Listen:
//   rdmarpc::HealthStatus* health = rdmarpc::EnableHealth(server);
//   health->Set("rdmarpc.examples.kv.KeyValue", ServingStatus::SERVING);
//
// The server as a whole ("") is SERVING from the start, and every service
// registered when EnableHealth runs too; Server::Shutdown sets everything
// NOT_SERVING as it begins.
#ifndef RDMARPC_HEALTH_H_
#define RDMARPC_HEALTH_H_

#include <string>
#include <string_view>

#include "proto/health.pb.h"
#include "proto/health.rdmarpc.h"  // IWYU pragma: export
#include "rdmarpc/server.h"        // IWYU pragma: export

namespace rdmarpc {

using ServingStatus = health::v1::HealthCheckResponse::ServingStatus;

class HealthStatus {
 public:
  virtual ~HealthStatus() = default;
  // Sets `service`'s status ("" for the server); Watch calls of it get it.
  virtual void Set(std::string_view service, ServingStatus status) = 0;
  // Every service, and the server, NOT_SERVING from now on.
  virtual void Shutdown() = 0;
};

// Registers the service on `server`, which owns it (before Listen); the
// returned HealthStatus lives as long as the server.
HealthStatus* EnableHealth(Server& server);

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace rpc {
using rdmarpc::EnableHealth;
using rdmarpc::HealthStatus;
using rdmarpc::ServingStatus;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_HEALTH_H_
