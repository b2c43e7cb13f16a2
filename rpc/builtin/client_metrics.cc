// rpc/builtin/client_metrics.h: every live Channel's metrics, summed per
// target.
#include "rpc/builtin/client_metrics.h"

#include <map>

namespace rdmarpc::rpc {

void AddRail(RailStats& sum, const RailStats& rail) {
  sum.rail = rail.rail;
  sum.slices += rail.slices;
  sum.bulk_bytes += rail.bulk_bytes;
  sum.slices_resent += rail.slices_resent;
  sum.failures += rail.failures;
  sum.joins += rail.joins;
  sum.bytes_sent += rail.bytes_sent;
  sum.bytes_received += rail.bytes_received;
}

std::vector<ClientTargetMetrics> ReadClientMetrics() {
  std::map<std::string, ClientTargetMetrics> by_target;
  ForEachChannel([&](const Channel& channel) {
    ClientTargetMetrics& sum = by_target[channel.target()];
    sum.target = channel.target();
    ++sum.channels;
    sum.stats.Add(channel.stats());
    for (const EndpointStats& endpoint : channel.endpoints()) {
      ++sum.endpoints;
      sum.endpoints_ready += endpoint.connected ? 1 : 0;
      sum.endpoints_ejected += endpoint.ejected ? 1 : 0;
      sum.ejections += endpoint.ejections;
    }
    for (const RailStats& rail : channel.rails()) {
      AddRail(sum.rails[rail.rail], rail);
      sum.rails_up[rail.rail] += rail.up ? 1 : 0;
    }
  });
  std::vector<ClientTargetMetrics> out;
  out.reserve(by_target.size());
  for (auto& [target, metrics] : by_target) out.push_back(std::move(metrics));
  return out;
}

}  // namespace rdmarpc::rpc
