#include "rpc/server/metrics.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace rdmarpc::rpc {

int LatencyHistogram::BucketOf(std::chrono::nanoseconds latency) {
  // In 1/kSubBuckets µs units: values below one µs share bucket 0.
  const int64_t ns = std::max<int64_t>(latency.count(), 0);
  const uint64_t units = static_cast<uint64_t>(ns) * kSubBuckets / 1000;
  if (units < kSubBuckets) return 0;
  // units = 2^p * (1 + f), kSubBuckets sub-buckets for f.
  const int power =
      static_cast<int>(std::bit_width(units)) - 1;  // >= log2(kSubBuckets)
  const int shift = power - std::countr_zero(unsigned{kSubBuckets});
  const int sub = static_cast<int>((units >> shift) - kSubBuckets);
  const int bucket = shift * kSubBuckets + sub + 1;
  return std::min(bucket, kBuckets - 1);
}

double LatencyHistogram::UpperBoundUs(int bucket) {
  if (bucket <= 0) return 1.0;
  const int shift = (bucket - 1) / kSubBuckets;
  const int sub = (bucket - 1) % kSubBuckets;
  // Units in [(kSubBuckets + sub) << shift, (kSubBuckets + sub + 1) << shift).
  return std::ldexp(static_cast<double>(kSubBuckets + sub + 1), shift) /
         kSubBuckets;
}

void LatencyHistogram::Record(std::chrono::nanoseconds latency) {
  counts_[BucketOf(latency)].fetch_add(1, std::memory_order_relaxed);
  const auto ns = static_cast<uint64_t>(std::max<int64_t>(latency.count(), 0));
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  uint64_t max = max_ns_.load(std::memory_order_relaxed);
  while (ns > max &&
         !max_ns_.compare_exchange_weak(max, ns, std::memory_order_relaxed)) {
  }
}

LatencyHistogram::Snapshot LatencyHistogram::Read() const {
  Snapshot snapshot;
  for (int i = 0; i < kBuckets; ++i) {
    snapshot.counts[i] = counts_[i].load(std::memory_order_relaxed);
    snapshot.total += snapshot.counts[i];
  }
  snapshot.sum_ns = sum_ns_.load(std::memory_order_relaxed);
  snapshot.max_ns = max_ns_.load(std::memory_order_relaxed);
  return snapshot;
}

double LatencyHistogram::Snapshot::PercentileUs(double q) const {
  if (total == 0) return 0;
  const auto rank = static_cast<uint64_t>(std::ceil(q * total));
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += counts[i];
    if (seen >= std::max<uint64_t>(rank, 1)) {
      // Never report more than the largest value seen.
      return std::min(UpperBoundUs(i), max_ns / 1000.0);
    }
  }
  return max_ns / 1000.0;
}

void MethodMetrics::RecordRejected(StatusCode code, uint64_t request) {
  const int index = static_cast<int>(code);
  finished_by_code[index >= 0 && index < kCodes ? index : 2].fetch_add(
      1, std::memory_order_relaxed);  // 2 is UNKNOWN.
  request_bytes.fetch_add(request, std::memory_order_relaxed);
}

void MethodMetrics::Record(StatusCode code, std::chrono::nanoseconds elapsed,
                           uint64_t request, uint64_t response) {
  RecordRejected(code, request);  // The counts; then what a handler adds.
  response_bytes.fetch_add(response, std::memory_order_relaxed);
  latency.Record(elapsed);
}

}  // namespace rdmarpc::rpc
