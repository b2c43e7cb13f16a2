// Retrier: the calls of a Channel that have a retry policy
// (include/rdmarpc/retry_options.h says what it does). Internal to the rpc
// layer: rpc/channel.cc hands it the calls whose method has a policy, and it
// starts their attempts through the channel's own call path.
#ifndef RDMARPC_RPC_CLUSTER_RETRY_H_
#define RDMARPC_RPC_CLUSTER_RETRY_H_

#include <boost/asio/io_context.hpp>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "rdmarpc/call_options.h"
#include "rdmarpc/retry_options.h"
#include "rpc/client/call_table.h"

namespace rdmarpc::rpc {

class Retrier : public std::enable_shared_from_this<Retrier> {
 public:
  // Starts one attempt on the channel, as Channel::Call does without
  // retries.
  using StartFn = std::function<uint64_t(
      std::string_view service, std::string_view method, uint64_t method_id,
      Payload request, const CallOptions& options, ResponseCallback done)>;

  Retrier(RetryPolicy policy,
          const std::map<std::string, RetryPolicy, std::less<>>& per_method,
          RetryBudget budget, boost::asio::io_context& context, StartFn start);

  // The policy of a call of `method_id` (MethodId of its names), or null
  // when its calls are not retried.
  const RetryPolicy* PolicyFor(uint64_t method_id) const {
    if (!by_method_.empty()) {
      const auto it = by_method_.find(method_id);
      if (it != by_method_.end()) {
        return it->second.max_attempts > 1 ? &it->second : nullptr;
      }
    }
    return policy_.max_attempts > 1 ? &policy_ : nullptr;
  }

  // Starts a call that `policy` governs; returns its first attempt's id.
  uint64_t Start(const RetryPolicy& policy, std::string_view service,
                 std::string_view method, uint64_t method_id, bool idempotent,
                 Payload request, const CallOptions& options,
                 ResponseCallback done);

  // The channel is going: no attempt starts from now on, and the calls
  // waiting for their next attempt end (their callbacks to `orphans`).
  // Calls with an attempt running end through it.
  void Shutdown(std::vector<CallTable::Entry>* orphans);

  struct Stats {
    uint64_t retries = 0;
    uint64_t hedges = 0;
    uint64_t throttled = 0;  // Retries or hedges the budget refused.
  };
  Stats stats() const;

  class Call;

 private:
  friend class Call;
  // One token for a retry or hedge, if the budget has it.
  bool Withdraw();
  void Deposit();
  void Forget(const std::shared_ptr<Call>& call);
  bool ShutDown() const;
  void Count(uint64_t Stats::*counter);

  const RetryPolicy policy_;
  std::map<uint64_t, RetryPolicy> by_method_;
  const RetryBudget budget_;
  boost::asio::io_context& context_;
  const StartFn start_;

  mutable std::mutex mu_;
  double tokens_;
  Clock::time_point refilled_;
  bool shut_down_ = false;
  std::set<std::weak_ptr<Call>, std::owner_less<std::weak_ptr<Call>>> live_;
  Stats stats_;
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_CLUSTER_RETRY_H_
