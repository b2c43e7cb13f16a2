// A Channel's options (ChannelOptions), its connection state (ChannelState)
// and counters (ChannelStats): include/rdmarpc/channel.h's vocabulary, which
// the subchannels and clusters under it share.
#ifndef RDMARPC_CHANNEL_OPTIONS_H_
#define RDMARPC_CHANNEL_OPTIONS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rdmarpc/cluster_options.h"
#include "rdmarpc/executor.h"
#include "rdmarpc/interceptor.h"
#include "rdmarpc/retry_options.h"
#include "rdmarpc/transport_options.h"
#include "rdmarpc/tunables.h"

namespace rdmarpc {

struct ChannelOptions {
  // max_payload_size bounds responses; larger ones fail RESOURCE_EXHAUSTED.
  TransportOptions transport;
  // Requests larger than this fail locally with RESOURCE_EXHAUSTED.
  uint64_t max_request_size = tunables::kDefaultMaxPayloadSize;
  // A request (or a client stream's message, or a cancellation) that finds
  // the connection's send queue past transport.max_queued_bytes waits in it,
  // in order, until the server reads (the call's deadline still applies),
  // as gRPC's calls wait on flow control: its bytes are the caller's own
  // outstanding calls. false: it fails at once with RESOURCE_EXHAUSTED, as
  // brpc's EOVERCROWDED, and the queue bounds this side's memory.
  bool wait_for_room = true;
  // The request window: a unary call's request goes out while fewer than
  // this many request bytes are in flight (sent and not yet answered) or
  // fewer than 2 calls; later calls wait in the channel, in order, and go as
  // earlier ones end. Calls past what the link can carry then queue here
  // rather than in socket buffers, where they only cost throughput (see
  // include/rdmarpc/tunables.h). Their deadlines and cancellation still apply.
  // With wait_for_room false, a call that finds transport.max_queued_bytes of
  // requests waiting fails at once with RESOURCE_EXHAUSTED. Streams are not
  // counted: they have their own flow control. 0: no window.
  uint64_t max_request_bytes_in_flight =
      tunables::kDefaultMaxRequestBytesInFlight;
  // A response whose metadata (headers and trailers each, as
  // include/rdmarpc/metadata.h counts them) is larger fails RESOURCE_EXHAUSTED.
  size_t max_metadata_size = tunables::kDefaultMaxMetadataSize;
  std::chrono::milliseconds initial_backoff =
      tunables::kInitialReconnectBackoff;
  std::chrono::milliseconds max_backoff = tunables::kMaxReconnectBackoff;
  double backoff_multiplier = tunables::kReconnectBackoffMultiplier;
  // Where completion callbacks run (include/rdmarpc/executor.h). By default (0,
  // no executor) on the channel's event-loop thread: the fastest, but a
  // callback that blocks holds up every connection on that loop. With
  // callback_threads > 0, on a pool of that many threads the channel owns;
  // with callback_executor set, there instead (it must outlive the channel).
  // Either way the loop threads then never run user code.
  int callback_threads = 0;
  Executor callback_executor;
  // Run, in order, on each call before it is sent and at its end
  // (include/rdmarpc/interceptor.h): a token, logging, metrics.
  std::vector<std::shared_ptr<ClientInterceptor>> interceptors;
  // For a target that names a cluster (list://, dns://, etcd://): how the
  // channel finds its servers and spreads calls over them
  // (include/rdmarpc/cluster_options.h). Each server's connection has the
  // options above.
  ClusterOptions cluster;
  // Retries and hedging (include/rdmarpc/retry_options.h): `retry` for every
  // method, unless method_retry has a policy for it ("pkg.Service/Method"). By
  // default none: max_attempts 1.
  RetryPolicy retry;
  std::map<std::string, RetryPolicy, std::less<>> method_retry;
  RetryBudget retry_budget;
};

enum class ChannelState { kIdle, kConnecting, kReady, kTransientFailure };

struct ChannelStats {
  uint64_t outstanding_calls = 0;
  uint64_t connects = 0;
  uint64_t connect_failures = 0;
  // Responses that arrived after their call had completed (deadline, cancel).
  uint64_t late_responses_dropped = 0;
  // MESSAGE and WINDOW frames for a call that is not an open stream.
  uint64_t stream_frames_dropped = 0;
  // Retry policies (include/rdmarpc/retry_options.h): attempts sent again,
  // hedges, and retries or hedges the budget refused.
  uint64_t retries = 0;
  uint64_t hedges = 0;
  uint64_t retries_throttled = 0;
  // Calls that waited for the request window
  // (ChannelOptions::max_request_bytes_in_flight) before being sent.
  uint64_t calls_held = 0;
  // Connections lost (each may be followed by a reconnect), and of those,
  // closed because the server sent nothing, not even a keepalive PONG.
  uint64_t disconnects = 0;
  uint64_t keepalive_timeouts = 0;
  // A cluster's calls that reached an endpoint just after its server said
  // GOAWAY, and went to another endpoint instead.
  uint64_t calls_repicked = 0;
  // Calls that lent windows and ended on the client (cancel, deadline):
  // those whose server answered that it released them, and those whose
  // windows were invalidated after tunables::kBulkReleaseGrace without it.
  uint64_t bulk_releases = 0;
  uint64_t bulk_releases_timed_out = 0;

  // Adds every field of `other` to this one (a cluster's subchannels, the
  // channels of one target).
  void Add(const ChannelStats& other);
};

inline void ChannelStats::Add(const ChannelStats& other) {
  static constexpr uint64_t ChannelStats::*kFields[] = {
      &ChannelStats::outstanding_calls,
      &ChannelStats::connects,
      &ChannelStats::connect_failures,
      &ChannelStats::late_responses_dropped,
      &ChannelStats::stream_frames_dropped,
      &ChannelStats::retries,
      &ChannelStats::hedges,
      &ChannelStats::retries_throttled,
      &ChannelStats::calls_held,
      &ChannelStats::disconnects,
      &ChannelStats::keepalive_timeouts,
      &ChannelStats::calls_repicked,
      &ChannelStats::bulk_releases,
      &ChannelStats::bulk_releases_timed_out};
  // A field added above and not here would be left out of every sum.
  static_assert(sizeof(kFields) / sizeof(kFields[0]) * sizeof(uint64_t) ==
                sizeof(ChannelStats));
  for (auto field : kFields) this->*field += other.*field;
}

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace rpc {
using rdmarpc::ChannelOptions;
using rdmarpc::ChannelState;
using rdmarpc::ChannelStats;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_CHANNEL_OPTIONS_H_
