// What this process holds of RDMA resources, and what it has done with them,
// read in one place: the admin endpoint's /metrics (Prometheus) and the
// introspection service's GetMetrics both report this struct.
#ifndef RDMARPC_TRANSPORT_RDMA_RESOURCE_USAGE_H_
#define RDMARPC_TRANSPORT_RDMA_RESOURCE_USAGE_H_

#include <cstdint>
#include <optional>

namespace rdmarpc::transport::rdma {

struct ResourceUsage {
  // Gauges: held now.
  uint64_t queue_pairs = 0;       // Queue pairs open.
  uint64_t registered_bytes = 0;  // Registered (pinned) with devices.
  uint64_t pooled_bytes = 0;      // Of those, the shared pools'.
  uint64_t granted_bytes = 0;     // Granted to peers' large frames.
  uint64_t parked_ids = 0;        // CM ids waiting for their port to return.
  // RLIMIT_MEMLOCK, when it bounds what this process may register.
  std::optional<uint64_t> locked_memory_limit;
  // Counters: since the process started.
  uint64_t registrations = 0;       // ibv_reg_mr calls.
  uint64_t pool_growths = 0;        // Chunks added to the registered pools.
  uint64_t completion_wakeups = 0;  // Completion-channel wake-ups.
  uint64_t completions_polled = 0;  // Work completions polled.
};

ResourceUsage ReadResourceUsage();

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_RESOURCE_USAGE_H_
