// How a Channel whose target names a cluster (list://, dns://, etcd://:
// naming/resolver.h) spreads its calls: ChannelOptions::cluster.
//
// The channel keeps one subchannel (a connection with its reconnect
// backoff, as a single-server Channel has) per endpoint the resolver
// lists. Once the channel has made its first call it keeps each one
// connected, and picks for each call among those that are connected and
// not ejected:
//   kRoundRobin   each in turn;
//   kLeastLoaded  the less busy of two chosen at random (fewer calls
//                 outstanding): "power of two choices";
//   kHashRing     by the call's CallOptions::balance_key (or the value of
//                 the request metadata balance_metadata_key) on a
//                 consistent-hash ring, so a key goes to the same server
//                 while membership holds and moves only when its server
//                 goes; with bounded load: an endpoint with more than
//                 hash_load_bound times the average of outstanding calls
//                 is passed over for the next on the ring. A call without
//                 a key goes round robin.
// A call made while no endpoint is connected waits in the channel for the
// first one that connects (or its deadline); it fails UNAVAILABLE at once
// only when every endpoint has failed to connect, or the resolver has
// reported no endpoint, and it is not wait_for_ready.
//
// Outlier detection: every `interval` the channel looks at each endpoint's
// calls since the last look; one that failed consecutive_failures calls
// in a row, or a failure_rate of at least min_calls calls (UNAVAILABLE,
// INTERNAL, UNKNOWN, DATA_LOSS, DEADLINE_EXCEEDED and lost connections
// count as failures), is ejected for base_ejection times the number of
// times it has been ejected (at most max_ejection), then tried again. At
// most max_ejected_fraction of the endpoints are ejected at once.
#ifndef RDMARPC_CLUSTER_OPTIONS_H_
#define RDMARPC_CLUSTER_OPTIONS_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "rdmarpc/call_options.h"
#include "rdmarpc/naming_options.h"

namespace rdmarpc {

enum class LoadBalancing { kRoundRobin, kLeastLoaded, kHashRing };

struct OutlierDetection {
  std::chrono::milliseconds interval{1000};
  uint32_t consecutive_failures = 5;
  double failure_rate = 0.5;
  uint32_t min_calls = 20;
  std::chrono::milliseconds base_ejection{1000};
  std::chrono::milliseconds max_ejection{30000};
  double max_ejected_fraction = 0.5;
};

// Active health checks (off by default): every `interval` the channel asks
// each connected endpoint rdmarpc.health.v1.Health/Check
// (include/rdmarpc/health.h) about `service` ("" for the server); one that
// answers other than SERVING, or not within `timeout`, gets no calls until it
// answers SERVING again. A server without the health service (UNIMPLEMENTED)
// counts as serving.
struct HealthCheck {
  bool enabled = false;
  std::string service;
  std::chrono::milliseconds interval{1000};
  std::chrono::milliseconds timeout{1000};
};

struct ClusterOptions {
  LoadBalancing policy = LoadBalancing::kRoundRobin;
  // kHashRing: an endpoint takes a key's call while it has fewer than
  // ceil(hash_load_bound * (outstanding + 1) / endpoints) calls.
  double hash_load_bound = 1.25;
  // Points on the ring per endpoint: more spread keys more evenly.
  int hash_points = 100;
  // If set, a call without a balance_key is keyed by the value of this
  // request metadata entry, if it has one.
  std::string balance_metadata_key;
  OutlierDetection outliers;
  HealthCheck health_check;
  ResolverOptions naming;
};

// One endpoint of a cluster channel, as Channel::endpoints() reports it.
struct EndpointStats {
  std::string uri;
  bool connected = false;
  bool ejected = false;
  bool healthy = true;  // As the last active health check said.
  uint32_t ejections = 0;
  uint64_t outstanding_calls = 0;
  uint64_t calls = 0;     // Completed, since the endpoint was added.
  uint64_t failures = 0;  // Of those, failed (as outlier detection counts).
};

// The stable 64-bit hash of the ring (the same in every process, so every
// client sends a key to the same server): for a balance_key from bytes.
uint64_t BalanceKey(std::string_view bytes);

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace rpc {
using rdmarpc::BalanceKey;
using rdmarpc::ClusterOptions;
using rdmarpc::EndpointStats;
using rdmarpc::HealthCheck;
using rdmarpc::LoadBalancing;
using rdmarpc::OutlierDetection;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_CLUSTER_OPTIONS_H_
