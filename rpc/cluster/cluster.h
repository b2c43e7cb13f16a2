// Cluster: what a Channel runs when its target names a cluster
// (include/rdmarpc/cluster_options.h says what it does): the resolver's
// endpoints, a subchannel (a Subchannel) per endpoint, the pick of one for each
// call, the calls that wait for a first connected endpoint, and outlier
// detection. Internal to the rpc layer; rpc/channel.cc routes to it.
#ifndef RDMARPC_RPC_CLUSTER_CLUSTER_H_
#define RDMARPC_RPC_CLUSTER_CLUSTER_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/futex_mutex.h"
#include "naming/resolver.h"
#include "rdmarpc/channel_options.h"
#include "rpc/client/subchannel.h"
#include "rpc/cluster/hash_ring.h"

namespace rdmarpc::rpc {

class Cluster : public std::enable_shared_from_this<Cluster> {
 public:
  using CallId = uint64_t;  // Channel::CallId

  Cluster(std::string target, ChannelOptions options,
          boost::asio::io_context& context);

  // Starts the resolver; a target it refuses fails every call with why.
  void Begin();

  // The endpoint for a call, as the policy picks among those connected and
  // not ejected; null if there is none (the call then goes to StartLater).
  std::shared_ptr<Subchannel> Pick(const CallOptions& options);
  // A call Pick found no endpoint for: it waits for the first endpoint to
  // connect, or fails now (include/rdmarpc/cluster_options.h says when).
  CallId StartLater(std::string_view service, std::string_view method,
                    uint64_t method_id, Payload request,
                    const CallOptions& options, ResponseCallback done);
  void Cancel(CallId id);
  // The subchannel a new stream goes to: a connected one if any, else one
  // that connects; if the cluster has none, a stand-in that refuses calls
  // with UNAVAILABLE.
  std::shared_ptr<Subchannel> PickForStream(const CallOptions& options);
  void Shutdown(std::vector<CallTable::Entry>* orphans);

  ChannelState state() const;
  ChannelStats stats() const;
  std::vector<EndpointStats> endpoints() const;
  const std::string& target() const { return target_; }
  const std::shared_ptr<CallbackRunner>& runner() const { return runner_; }

 private:
  struct Endpoint {
    std::string uri;
    uint16_t tag = 0;
    std::shared_ptr<Subchannel> impl;
    bool ready = false;
    bool failed = false;  // Its last connect failed.
    bool ejected = false;
    bool healthy = true;  // ClusterOptions::health_check's last answer.
    uint32_t ejections = 0;
    Clock::time_point ejected_until;
    Subchannel::Outcomes seen{};  // At the last outlier check.
  };
  // A call made while no endpoint was connected.
  struct Pending {
    uint64_t id;
    std::string service;
    std::string method;
    uint64_t method_id;
    Payload request;
    CallOptions options;
    ResponseCallback done;
  };

  // Lets a removed endpoint's subchannel finish its calls (polling), then
  // shuts it down; at `give_up` whatever is left fails UNAVAILABLE.
  static void Retire(boost::asio::io_context& context,
                     std::shared_ptr<Subchannel> impl,
                     std::shared_ptr<CallbackRunner> runner,
                     Clock::time_point give_up);

  // The loop thread.
  void OnResolved(StatusOr<std::vector<std::string>> endpoints);
  void OnSubchannelState(const std::shared_ptr<Endpoint>& sub,
                         ChannelState state);
  void CheckOutliers();
  // Asks each connected endpoint for its health, then again after the
  // interval.
  void CheckHealth();
  void OnHealth(const std::shared_ptr<Endpoint>& sub, const Status& status,
                const Payload& response);
  void ArmPendingTimer();

  // Under mu_.
  std::shared_ptr<Endpoint> AddSubchannel(const std::string& uri);
  // Has the subchannel stay connected and report its state changes.
  void KeepConnected(const std::shared_ptr<Endpoint>& sub);
  void Activate();
  void RebuildPicker();
  // Points into ready_; null if it is empty.
  const std::shared_ptr<Subchannel>* PickLocked(const CallOptions& options);
  bool AllFailed() const;
  Status NoEndpointStatus() const;
  // Takes the pending calls that can go now (to `*ready`, with their
  // subchannel) or must fail (to `*failed`).
  void TakeDispatchable(
      std::vector<std::pair<Pending, std::shared_ptr<Subchannel>>>* ready,
      std::vector<Pending>* failed, Status* why);
  void Dispatch(
      std::vector<std::pair<Pending, std::shared_ptr<Subchannel>>>&& ready,
      std::vector<Pending>&& failed, const Status& why);

  const std::string target_;
  const ChannelOptions options_;
  boost::asio::io_context& context_;
  const std::shared_ptr<CallbackRunner> runner_;
  boost::asio::steady_timer outlier_timer_;  // The loop thread only.
  boost::asio::steady_timer pending_timer_;  // The loop thread only.
  boost::asio::steady_timer health_timer_;   // The loop thread only.
  std::unique_ptr<naming::Resolver> resolver_;

  mutable FutexMutex mu_;
  bool shut_down_ = false;
  bool active_ = false;  // A call has been made: keep endpoints connected.
  std::optional<Status> resolver_error_;
  bool resolved_ = false;
  std::vector<std::shared_ptr<Endpoint>> subchannels_;  // Sorted by uri.
  // Subchannels by id tag, for Cancel; a removed one's slot is empty.
  std::vector<std::weak_ptr<Subchannel>> by_tag_;
  uint16_t next_tag_ = 1;
  // The picker: connected, not ejected.
  std::vector<std::shared_ptr<Subchannel>> ready_;
  HashRing ring_;  // Over ready_.
  uint64_t next_ = 0;
  std::vector<Pending> pending_;
  uint64_t next_pending_id_ = 1;
  std::optional<Clock::time_point> pending_armed_;
  ChannelStats stats_;
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_CLUSTER_CLUSTER_H_
