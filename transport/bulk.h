// Bulk transfers below the RPC layer (include/rdmarpc/bulk.h): the checks a
// borrower makes before it moves a byte, and the owner's table of what it
// lent on one connection.
//
// Both sides check. The borrower checks its own Pull or Push against the
// descriptor (CheckBulkRange), so a mistake fails before anything is sent.
// The owner checks what actually arrives: over TCP the LoanTable, for every
// READ and WRITE a peer sends; over RDMA the device, against the memory
// window bound to the loan.
#ifndef RDMARPC_TRANSPORT_BULK_H_
#define RDMARPC_TRANSPORT_BULK_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>

#include "rdmarpc/bulk.h"
#include "rdmarpc/memory.h"
#include "rdmarpc/status.h"
#include "rdmarpc/unique_function.h"

namespace rdmarpc::transport {

// Completes a Pull or a Push, once, on the connection's executor.
using BulkCallback = UniqueFunction<void(const Status&)>;

// Runs `done` once the last copy of the shared_ptr holding it goes: when
// the last of several revocations (one per loan, or per rail) completed.
class Countdown {
 public:
  explicit Countdown(UniqueFunction<void()> done) : done_(std::move(done)) {}
  ~Countdown() { done_(); }
  Countdown(const Countdown&) = delete;
  Countdown& operator=(const Countdown&) = delete;

 private:
  UniqueFunction<void()> done_;
};

// OK if [offset, offset + length) lies inside `loan` and the loan grants
// `wanted`; otherwise OUT_OF_RANGE or PERMISSION_DENIED naming both.
Status CheckBulkRange(const BulkDescriptor& loan, uint64_t offset,
                      uint64_t length, BulkAccess wanted);

// The registration holding all of `bytes`, or INVALID_ARGUMENT naming what
// `what` is ("the loan", "the pull's destination"): bulk bytes are moved
// only from and to registered memory, never through a hidden copy.
StatusOr<std::shared_ptr<MemoryRegistration>> FindRegistered(
    std::span<const std::byte> bytes, const char* what);

// What every transport's Lend checks first: `bytes` lie inside one live
// registration (returned) and are at most kMaxBulkLength.
StatusOr<std::shared_ptr<MemoryRegistration>> CheckLoan(
    std::span<std::byte> bytes);
// RESOURCE_EXHAUSTED naming kMaxBulkLoansPerConnection when a connection
// holding `held` loans may lend no more; else OK.
Status CheckConnectionLoans(size_t held);
// What every transport's Pull and Push check before anything moves: a loan
// of one connection, not of several rails (RailedConnection takes those
// apart), the range and access (CheckBulkRange), and that `local` lies inside
// one live registration (returned; null for no bytes).
StatusOr<std::shared_ptr<MemoryRegistration>> CheckTransfer(
    const BulkDescriptor& loan, uint64_t offset,
    std::span<const std::byte> local, BulkAccess wanted);

// Loans alive in the process (the kMaxBulkLoans cap): counted by each
// transport's Lend (TakeBulkLoan, RESOURCE_EXHAUSTED past the cap) and given
// back as each ends.
uint64_t LiveBulkLoans();
Status TakeBulkLoan();
void GiveBackBulkLoans(uint64_t n);

// What one connection lent its peer. Any thread.
class LoanTable {
 public:
  LoanTable() = default;
  ~LoanTable();
  LoanTable(const LoanTable&) = delete;
  LoanTable& operator=(const LoanTable&) = delete;

  // Lends `bytes` (inside a live registration) with `access`: the
  // descriptor names it by a key never used before on this table.
  // INVALID_ARGUMENT for memory not registered; RESOURCE_EXHAUSTED past
  // kMaxBulkLoansPerConnection or kMaxBulkLoans.
  StatusOr<BulkDescriptor> Lend(std::span<std::byte> bytes, BulkAccess access);
  // Ends a loan; waits for a use of it under way (With). Unknown keys are
  // ignored.
  void Revoke(uint64_t key);
  // Ends every loan (the connection closed), waiting likewise.
  void Clear();
  size_t size() const;

  // Runs use(std::span<std::byte>) on [offset, offset + length) of loan
  // `key` if the loan grants `wanted`; otherwise returns the status naming
  // why (FAILED_PRECONDITION for a key not lent, or revoked). The use runs
  // outside the table's lock (a chunk's copy holds up no other loan), and
  // a Revoke of its loan returns only once it is over, so no byte moves
  // after that.
  template <typename Use>
  Status With(uint64_t key, uint64_t offset, uint64_t length, BulkAccess wanted,
              Use&& use) {
    Loan* loan;
    {
      std::lock_guard lock(mu_);
      const auto it = loans_.find(key);
      if (it == loans_.end() || it->second.ending) return NotLent(key);
      loan = &it->second;  // Its node stays until uses is 0 (Revoke).
      Status allowed = CheckBulkRange(loan->descriptor, offset, length, wanted);
      if (!allowed.ok()) return allowed;
      ++loan->uses;
    }
    use(std::span<std::byte>(loan->data + offset, length));
    std::lock_guard lock(mu_);
    if (--loan->uses == 0 && loan->ending) used_.notify_all();
    return Status();
  }

 private:
  struct Loan {
    std::shared_ptr<MemoryRegistration> registration;  // Keeps it mapped.
    std::byte* data;
    BulkDescriptor descriptor;
    uint32_t uses = 0;    // With's under way; guarded by mu_.
    bool ending = false;  // Revoked: no new use; guarded by mu_.
  };
  static Status NotLent(uint64_t key);
  // Under `lock`: ends `it`'s loan once no use of it is under way.
  void EndLocked(std::unique_lock<std::mutex>& lock,
                 std::unordered_map<uint64_t, Loan>::iterator it);

  mutable std::mutex mu_;
  std::condition_variable used_;              // A use ended on an ending loan.
  std::unordered_map<uint64_t, Loan> loans_;  // Guarded by mu_.
  uint64_t next_key_ = 1;                     // Guarded by mu_.
};

}  // namespace rdmarpc::transport

#endif  // RDMARPC_TRANSPORT_BULK_H_
