// What the admin endpoint shows of this process's clients: every Channel
// alive (include/rdmarpc/channel.h, ForEachChannel), summed per target, since
// two channels to one target must not give Prometheus two series of one name
// and labels. A channel's counts leave the sums when it is destroyed.
#ifndef RDMARPC_RPC_BUILTIN_CLIENT_METRICS_H_
#define RDMARPC_RPC_BUILTIN_CLIENT_METRICS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rdmarpc/channel.h"

namespace rdmarpc::rpc {

struct ClientTargetMetrics {
  std::string target;
  uint64_t channels = 0;
  ChannelStats stats;  // Summed over the channels.
  // A cluster's membership: endpoints now, connected, ejected; and
  // ejections over the endpoints now.
  uint64_t endpoints = 0;
  uint64_t endpoints_ready = 0;
  uint64_t endpoints_ejected = 0;
  uint64_t ejections = 0;
  // Rails of the channels' connections (a target with rails=), summed by
  // rail number; `up` counts the rails up.
  std::map<uint8_t, RailStats> rails;
  std::map<uint8_t, uint64_t> rails_up;
};

// Adds `rail`'s counters to `sum` (whose `up` it leaves).
void AddRail(RailStats& sum, const RailStats& rail);

// One per target, in target order.
std::vector<ClientTargetMetrics> ReadClientMetrics();

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_BUILTIN_CLIENT_METRICS_H_
