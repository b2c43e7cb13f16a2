// Metrics cheap enough to leave on: per-method call counts, counts by status
// code, and latency histograms, recorded with relaxed atomics only.
//
// LatencyHistogram buckets are log-linear: 8 per power of two from 1 µs,
// so any percentile read from them is within 12.5% of the true value, and
// recording is a bit scan and one increment.
#ifndef RDMARPC_RPC_SERVER_METRICS_H_
#define RDMARPC_RPC_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "rdmarpc/status.h"

namespace rdmarpc::rpc {

class LatencyHistogram {
 public:
  static constexpr int kSubBuckets = 8;  // Per power of two.
  static constexpr int kPowers = 36;     // 1 µs .. 2^36 µs (19 hours).
  static constexpr int kBuckets = kSubBuckets * kPowers + 1;

  void Record(std::chrono::nanoseconds latency);

  struct Snapshot {
    std::array<uint64_t, kBuckets> counts{};
    uint64_t total = 0;
    uint64_t sum_ns = 0;
    uint64_t max_ns = 0;
    // The upper bound of the bucket holding the q-quantile (0 < q <= 1), in
    // microseconds; 0 when empty.
    double PercentileUs(double q) const;
  };
  Snapshot Read() const;

  // The bucket of a latency, and a bucket's upper bound in microseconds.
  static int BucketOf(std::chrono::nanoseconds latency);
  static double UpperBoundUs(int bucket);

 private:
  std::array<std::atomic<uint64_t>, kBuckets> counts_{};
  std::atomic<uint64_t> sum_ns_{0};
  std::atomic<uint64_t> max_ns_{0};
};

// What the server counts for one method.
struct MethodMetrics {
  static constexpr int kCodes = 17;  // gRPC's canonical codes, 0..16.

  void Record(StatusCode code, std::chrono::nanoseconds elapsed,
              uint64_t request, uint64_t response);
  // A call answered before any handler ran: counted, not timed.
  void RecordRejected(StatusCode code, uint64_t request);

  std::atomic<uint64_t> started{0};
  std::array<std::atomic<uint64_t>, kCodes> finished_by_code{};
  std::atomic<uint64_t> request_bytes{0};
  std::atomic<uint64_t> response_bytes{0};
  // From request arrival (its batch's ReceiveClock time) to response queued.
  LatencyHistogram latency;
  // Streaming methods: messages read from clients and written to them (each
  // counted once admitted or sent), and calls whose stream is open now.
  std::atomic<uint64_t> messages_received{0};
  std::atomic<uint64_t> messages_sent{0};
  std::atomic<int64_t> streams_open{0};
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_SERVER_METRICS_H_
