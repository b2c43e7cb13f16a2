// rpc/builtin/client_metrics.h: every live Channel's metrics, summed per
// target.
#include "rpc/builtin/client_metrics.h"

#include <map>

namespace rdmarpc::rpc {

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
  });
  std::vector<ClientTargetMetrics> out;
  out.reserve(by_target.size());
  for (auto& [target, metrics] : by_target) out.push_back(std::move(metrics));
  return out;
}

}  // namespace rdmarpc::rpc
