// ResourceUsage (transport/rdma/resource_usage.h) from the counters the
// verbs wrappers, pools, completion groups and CM channels keep.
#include "transport/rdma/resource_usage.h"

#include "transport/rdma/cm_channel.h"
#include "transport/rdma/completion_group.h"
#include "transport/rdma/grant_memory.h"
#include "transport/rdma/verbs.h"

namespace rdmarpc::transport::rdma {

ResourceUsage ReadResourceUsage() {
  ResourceUsage usage;
  usage.queue_pairs = LiveQueuePairs();
  usage.registered_bytes = LiveRegisteredBytes();
  usage.pooled_bytes = PooledRegisteredBytes();
  usage.granted_bytes = GrantedBytes();
  usage.parked_ids = CmChannel::ParkedIds();
  usage.locked_memory_limit = LockedMemoryLimit();
  usage.registrations = RegistrationCalls();
  usage.pool_growths = PoolGrowths();
  usage.completion_wakeups = CompletionWakeups();
  usage.completions_polled = CompletionsPolled();
  return usage;
}

}  // namespace rdmarpc::transport::rdma
