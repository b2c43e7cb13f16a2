// Cluster (rpc/cluster/cluster.h): whether each endpoint deserves
// calls, by outlier detection (its calls' outcomes) and by active health checks
// (rdmarpc.health.v1.Health/Check). rpc/cluster/cluster.cc has the rest.
#include <algorithm>
#include <cmath>

#include "base/log.h"
#include "proto/health.pb.h"
#include "rdmarpc/method_ref.h"
#include "rpc/cluster/cluster.h"

namespace rdmarpc::rpc {

void Cluster::CheckOutliers() {
  const OutlierDetection& policy = options_.cluster.outliers;
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return;
    const auto now = Clock::now();
    const size_t max_ejected = static_cast<size_t>(
        std::floor(subchannels_.size() * policy.max_ejected_fraction));
    size_t ejected = 0;
    bool changed = false;
    for (const auto& sub : subchannels_) {
      if (sub->ejected && now >= sub->ejected_until) {
        sub->ejected = false;
        changed = true;
        Log().info("{}: endpoint {} is tried again", target_, sub->uri);
      }
      ejected += sub->ejected;
    }
    for (const auto& sub : subchannels_) {
      const Subchannel::Outcomes now_seen = sub->impl->outcomes();
      const uint64_t completed = now_seen.completed - sub->seen.completed;
      const uint64_t failures = now_seen.failed - sub->seen.failed;
      sub->seen = now_seen;
      if (sub->ejected) continue;
      const bool bad = (failures > 0 && now_seen.consecutive_failures >=
                                            policy.consecutive_failures) ||
                       (completed >= policy.min_calls &&
                        failures >= policy.failure_rate * completed);
      if (!bad) {
        // A healthy interval with calls wears one ejection off.
        if (completed > 0 && failures == 0 && sub->ejections > 0) {
          --sub->ejections;
        }
        continue;
      }
      if (ejected >= max_ejected) continue;
      ++ejected;
      ++sub->ejections;
      const auto length =
          std::min(policy.max_ejection, policy.base_ejection * sub->ejections);
      sub->ejected = true;
      sub->ejected_until = now + length;
      changed = true;
      Log().warn("{}: endpoint {} ejected for {} ms ({} of {} calls failed)",
                 target_, sub->uri, length.count(), failures, completed);
    }
    if (changed) RebuildPicker();
  }
  outlier_timer_.expires_after(policy.interval);
  outlier_timer_.async_wait(
      [weak = weak_from_this()](const boost::system::error_code& error) {
        if (error) return;
        if (auto self = weak.lock()) self->CheckOutliers();
      });
}

void Cluster::CheckHealth() {
  const HealthCheck& check = options_.cluster.health_check;
  std::vector<std::shared_ptr<Endpoint>> asked;
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return;
    for (const auto& sub : subchannels_) {
      if (sub->ready) asked.push_back(sub);
    }
  }
  health::v1::HealthCheckRequest request;
  request.set_service(check.service);
  const std::string bytes = request.SerializeAsString();
  static constexpr MethodRef kCheck("rdmarpc.health.v1.Health", "Check");
  for (const auto& sub : asked) {
    sub->impl->Start(
        kCheck.service(), kCheck.method(), kCheck.id(), Buffer::CopyOf(bytes),
        CallOptions::WithTimeout(check.timeout),
        [weak = weak_from_this(), held = std::weak_ptr<Endpoint>(sub)](
            const Status& status, Payload response) {
          auto self = weak.lock();
          auto sub = held.lock();
          if (self && sub) self->OnHealth(sub, status, response);
        });
  }
  health_timer_.expires_after(check.interval);
  health_timer_.async_wait(
      [weak = weak_from_this()](const boost::system::error_code& error) {
        if (error) return;
        if (auto self = weak.lock()) self->CheckHealth();
      });
}

void Cluster::OnHealth(const std::shared_ptr<Endpoint>& sub,
                       const Status& status, const Payload& response) {
  bool healthy = status.code() == StatusCode::kUnimplemented;
  if (status.ok()) {
    health::v1::HealthCheckResponse answer;
    healthy =
        answer.ParseFromArray(response.message.data(),
                              static_cast<int>(response.message.size())) &&
        answer.status() == health::v1::HealthCheckResponse::SERVING;
  }
  std::vector<std::pair<Pending, std::shared_ptr<Subchannel>>> ready;
  std::vector<Pending> failed;
  Status why;
  {
    std::lock_guard lock(mu_);
    if (shut_down_ || sub->healthy == healthy) return;
    sub->healthy = healthy;
    Log().info("{}: endpoint {} is {}", target_, sub->uri,
               healthy ? "healthy again" : "not serving: no calls go to it");
    RebuildPicker();
    TakeDispatchable(&ready, &failed, &why);
  }
  Dispatch(std::move(ready), std::move(failed), why);
}

}  // namespace rdmarpc::rpc
