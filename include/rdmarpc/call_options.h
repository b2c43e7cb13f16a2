// Per-call options: deadline (or timeout), cancellation, metadata.
#ifndef RDMARPC_CALL_OPTIONS_H_
#define RDMARPC_CALL_OPTIONS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "rdmarpc/bulk.h"
#include "rdmarpc/metadata.h"

namespace rdmarpc {

using Clock = std::chrono::steady_clock;

// Lets a caller cancel a call it started through an API that returns no
// handle (the typed stubs). Cancel() before the call starts cancels it as
// soon as it does; after it completed, Cancel() does nothing.
class CallCancellation {
 public:
  void Cancel() {
    std::function<void()> cancel;
    {
      std::lock_guard lock(mu_);
      if (cancelled_) return;
      cancelled_ = true;
      cancel = std::move(cancel_);
    }
    if (cancel) cancel();
  }
  bool cancelled() const {
    std::lock_guard lock(mu_);
    return cancelled_;
  }

  // Called by the channel when the call starts.
  void Attach(std::function<void()> cancel) {
    {
      std::lock_guard lock(mu_);
      if (!cancelled_) {
        cancel_ = std::move(cancel);
        return;
      }
    }
    cancel();
  }

 private:
  mutable std::mutex mu_;
  bool cancelled_ = false;
  std::function<void()> cancel_;
};

struct CallOptions {
  // When the caller stops waiting: the call completes with DEADLINE_EXCEEDED
  // and the server sees the call cancelled. None by default.
  std::optional<Clock::time_point> deadline;
  // Optional: lets the caller cancel the call (CANCELLED) at any time.
  std::shared_ptr<CallCancellation> cancellation;
  // gRPC's wait-for-ready. By default a call made while the channel backs
  // off after a failed connect fails at once with UNAVAILABLE. With this
  // set, it waits instead: it is sent once a later connect succeeds, and
  // ends only by its deadline or a cancel. (A call already sent when its
  // connection is lost still fails UNAVAILABLE: it may have run.)
  bool wait_for_ready = false;

  // Request headers sent with the call (include/rdmarpc/metadata.h). A block
  // the rules refuse fails the call locally: INVALID_ARGUMENT for a bad key or
  // value, RESOURCE_EXHAUSTED above kMaxMetadataSize.
  Metadata metadata;
  // If set, receives the server's response headers and trailers before the
  // call's completion runs (a stream's headers before its first message is
  // delivered). Optional: a call without it skips them.
  std::shared_ptr<ResponseMetadata> response_metadata;

  // For a channel whose target is a cluster balanced by a hash ring
  // (include/rdmarpc/cluster_options.h): the call's key, e.g.
  // BalanceKey(user_id). Calls with the same key go to the same server while it
  // is there.
  std::optional<uint64_t> balance_key;

  // Memory lent to the server for this call (include/rdmarpc/bulk.h): its
  // handler sees each region as a BulkDescriptor, in this order, and pulls
  // from or pushes into it. Each must lie inside a live MemoryRegistration
  // and stay valid until the call completes; the loans end before the
  // completion runs. At most kMaxBulkLoansPerCall.
  std::vector<BulkRegion> bulk;

  // Has the response's attachment land in `destination` (memory inside a
  // live MemoryRegistration, valid until the call completes): the call's
  // response attachment is then a Buffer borrowing its first bytes. Its
  // size goes with the request; an attachment larger fails the call
  // RESOURCE_EXHAUSTED, naming both sizes, and nothing is written. Over
  // RDMA, an attachment the server has in registered memory is written
  // straight into the destination (RDMA WRITE, no copy on either side);
  // one that is not, and any over TCP, comes with the response and is
  // copied into the destination. Replaces an earlier destination; it is a
  // write loan in `bulk` (response_destination), counted in its limit.
  CallOptions& ResponseInto(std::span<std::byte> destination) {
    const BulkRegion region{destination.data(), destination.size(),
                            BulkAccess::kWrite, true};
    for (BulkRegion& lent : bulk) {
      if (lent.response_destination) {
        lent = region;
        return *this;
      }
    }
    bulk.push_back(region);
    return *this;
  }

  // A timeout past what the clock can represent saturates to "very late".
  static CallOptions WithTimeout(Clock::duration timeout) {
    const auto now = Clock::now();
    const bool fits = timeout < Clock::time_point::max() - now;
    CallOptions options;
    options.deadline = fits ? now + timeout : Clock::time_point::max();
    return options;
  }
  static CallOptions WithDeadline(Clock::time_point deadline) {
    CallOptions options;
    options.deadline = deadline;
    return options;
  }
};

// Deprecated: the name this had before it moved to rdmarpc::; it goes in
// the next release.
namespace rpc {
using rdmarpc::CallCancellation;
using rdmarpc::CallOptions;
using rdmarpc::Clock;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_CALL_OPTIONS_H_
