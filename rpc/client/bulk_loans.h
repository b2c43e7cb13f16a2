// A call's bulk loans (CallOptions::bulk, include/rdmarpc/bulk.h): lent on
// the connection its REQUEST goes out on, as it goes, and revoked when the
// call ends, before its completion runs.
#ifndef RDMARPC_RPC_CLIENT_BULK_LOANS_H_
#define RDMARPC_RPC_CLIENT_BULK_LOANS_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "rdmarpc/bulk.h"
#include "rdmarpc/payload.h"
#include "rdmarpc/status.h"
#include "rdmarpc/unique_function.h"
#include "transport/connection.h"

namespace rdmarpc::rpc {

class BulkLoans : public std::enable_shared_from_this<BulkLoans> {
 public:
  explicit BulkLoans(std::vector<BulkRegion> regions)
      : regions_(std::move(regions)) {}
  ~BulkLoans() {
    {
      std::lock_guard lock(mu_);
      awaiting_release_ = false;
    }
    Revoke();
  }
  BulkLoans(const BulkLoans&) = delete;
  BulkLoans& operator=(const BulkLoans&) = delete;

  // The call's own check, before anything is lent: INVALID_ARGUMENT or
  // RESOURCE_EXHAUSTED naming the region or the cap.
  Status Validate() const;
  // Lends every region on `connection` and appends their descriptors to
  // `frame`'s header (its bulk field). On an error nothing stays lent.
  // FAILED_PRECONDITION once the call has ended (Revoke).
  Status LendOn(const std::shared_ptr<transport::Connection>& connection,
                transport::OutgoingFrame& frame);
  // Ends every loan; later LendOn fail. `revoked` runs once the server can
  // reach none of the memory any more (at once over TCP; over RDMA once the
  // windows' invalidations have completed), on any thread. Idempotent.
  void Revoke(UniqueFunction<void()> revoked);
  void Revoke() {
    Revoke([] {});
  }
  // The call ended on the client (cancelled, or past its deadline) and its
  // CANCEL goes to the server on `connection`. A READ or WRITE the server
  // posted before it heard would meet an invalidated window and break the
  // connection, failing every call on it: so when the loans are windows
  // (RDMA) lent on `connection`, Revoke waits from now until Released()
  // (the server's answer, the connection's close, or the channel's grace,
  // tunables::kBulkReleaseGrace). False when there is nothing to wait for.
  bool AwaitRelease(const transport::Connection* connection);
  // Ends AwaitRelease: a Revoke waiting goes on now. Idempotent.
  void Released();

  // The response's destination (CallOptions::ResponseInto); empty if none.
  std::span<std::byte> destination() const;
  // A RESPONSE says the server wrote `n` bytes of attachment into the
  // destination (the loop thread, before the call's callback). False if
  // the call has no destination or `n` exceeds it.
  bool SetPlaced(uint64_t n);
  // With the call's OK `response`, once revoked: its attachment becomes a
  // Buffer borrowing the destination's first bytes, written by the server
  // (SetPlaced) or copied from the response. RESOURCE_EXHAUSTED if it does
  // not fit (the server should have refused it).
  Status Land(Payload& response) const;
  // Response attachments copied into a destination, by every call so far.
  static uint64_t copies() { return copies_.load(std::memory_order_relaxed); }

 private:
  // Revokes what is lent, under mu_ (LendOn's: `revoked` does nothing of
  // the caller's).
  void RevokeLocked(UniqueFunction<void()> revoked);

  const std::vector<BulkRegion> regions_;
  uint64_t placed_ = 0;  // SetPlaced, then read by Land.
  static std::atomic<uint64_t> copies_;
  std::mutex mu_;
  bool ended_ = false;                              // Guarded by mu_.
  std::shared_ptr<transport::Connection> lent_on_;  // Guarded by mu_.
  std::vector<uint64_t> keys_;                      // Guarded by mu_.
  bool windows_ = false;  // The loans are RDMA windows; guarded by mu_.
  bool awaiting_release_ = false;    // Guarded by mu_.
  UniqueFunction<void()> deferred_;  // Revoke's, meanwhile; guarded by mu_.
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_CLIENT_BULK_LOANS_H_
