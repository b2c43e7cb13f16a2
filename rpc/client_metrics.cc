// rpc/client_metrics.h: every live Channel's metrics, summed per target.
#include "rpc/client_metrics.h"

#include <map>

namespace rdmarpc::rpc {

std::vector<ClientTargetMetrics> ReadClientMetrics() {
  std::map<std::string, ClientTargetMetrics> by_target;
  ForEachChannel([&](const Channel& channel) {
    ClientTargetMetrics& sum = by_target[channel.target()];
    sum.target = channel.target();
    ++sum.channels;
    const ChannelStats s = channel.stats();
    ChannelStats& t = sum.stats;
    t.outstanding_calls += s.outstanding_calls;
    t.connects += s.connects;
    t.connect_failures += s.connect_failures;
    t.late_responses_dropped += s.late_responses_dropped;
    t.stream_frames_dropped += s.stream_frames_dropped;
    t.retries += s.retries;
    t.hedges += s.hedges;
    t.retries_throttled += s.retries_throttled;
    t.calls_held += s.calls_held;
    t.disconnects += s.disconnects;
    t.keepalive_timeouts += s.keepalive_timeouts;
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
