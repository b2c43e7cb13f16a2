// Retries and hedging (ChannelOptions::retry, method_retry, retry_budget).
//
// A call is retried only where that is safe:
//  - its method is idempotent (MethodRef::idempotent(); generated stubs mark
//    the methods whose .proto says `option idempotency_level = IDEMPOTENT`
//    or NO_SIDE_EFFECTS), and it failed with one of retryable_codes; or
//  - its request provably never ran, whatever the method: it was never
//    sent (no endpoint could be reached), or a server refused it before
//    its handler ran (shutting down, over max_concurrency or a connection's
//    limit), which the server marks with the trailer "rdmarpc-not-run".
//    Such a call is retried on UNAVAILABLE and RESOURCE_EXHAUSTED.
// Each retry waits a backoff with jitter (half the backoff plus a random
// part of the other half), the backoff growing by backoff_multiplier from
// initial_backoff to max_backoff; all attempts share the call's deadline.
//
// Hedging (an idempotent method with hedging_delay > 0): when no answer has
// come hedging_delay after an attempt started, another starts (a cluster
// channel sends it where its policy picks), up to max_attempts in all; the
// first answer that is OK or not retryable is the call's, and the other
// attempts are cancelled.
//
// The budget bounds how much retries and hedges add, so that they cannot
// multiply an outage's load: each call puts `ratio` tokens in a bucket,
// and `reserve_per_second` more arrive each second, up to max_tokens; each
// retry or hedge takes one, and without one the call ends with its last
// answer (counted in ChannelStats::retries_throttled). Finagle's
// RetryBudget and gRPC's retry throttling work the same way.
//
// Channel::Cancel(id) of a call with retries cancels the attempt it names;
// a CallCancellation (CallOptions::cancellation) reaches every attempt.
#ifndef RDMARPC_RETRY_OPTIONS_H_
#define RDMARPC_RETRY_OPTIONS_H_

#include <chrono>
#include <vector>

#include "rdmarpc/status.h"

namespace rdmarpc {

struct RetryPolicy {
  // Attempts in all, the first included: 1 means no retry and no hedge.
  int max_attempts = 1;
  std::chrono::milliseconds initial_backoff{20};
  std::chrono::milliseconds max_backoff{1000};
  double backoff_multiplier = 2.0;
  // What an idempotent method's call is retried on.
  std::vector<StatusCode> retryable_codes = {StatusCode::kUnavailable};
  // 0: no hedging.
  std::chrono::milliseconds hedging_delay{0};
};

struct RetryBudget {
  double ratio = 0.1;
  double reserve_per_second = 10;
  double max_tokens = 100;
};

// The trailer a server adds to an answer given before the call's handler
// ran: the request did not run, so sending it again is safe.
inline constexpr char kNotRunTrailer[] = "rdmarpc-not-run";

// Deprecated: the name this had before it moved to rdmarpc::; it goes in
// the next release.
namespace rpc {
using rdmarpc::RetryBudget;
using rdmarpc::RetryPolicy;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_RETRY_OPTIONS_H_
