// RdmaConnection: bulk loans and transfers (include/rdmarpc/bulk.h,
// docs/protocol.md "Bulk over RDMA").
//
// The owner lends with a type 2 memory window bound to this QP over the
// lent bytes, with the loan's access: the peer's READs and WRITEs through
// its key reach that window on this connection only. Revoking invalidates
// the window (LOCAL_INV); the revocation completes with it. Binds and
// invalidations go on the send queue in the order asked, ahead of frames
// sent after them, under the rule for local operations (LocalOpMayGo).
//
// The borrower posts RDMA READs (pull) or WRITEs (push) of at most
// kBulkChunkSize, signaled, at most the QP's READ depth of READs and
// kBulkWindowChunks of WRITEs at once; each chunk is done when the send
// queue's completions reach it. An access the owner's window refuses is a
// remote access error: the QP, and with it the connection, fails.
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "transport/bulk.h"
#include "transport/rdma/rdma_connection.h"

namespace rdmarpc::transport::rdma {

namespace asio = boost::asio;

struct RdmaConnection::BulkOp {
  bool push = false;
  std::byte* local = nullptr;
  uint64_t length = 0;
  uint32_t lkey = 0;
  uint64_t remote_address = 0;
  uint32_t rkey = 0;
  uint64_t issued = 0;  // Bytes posted.
  uint32_t in_flight = 0;
  BulkCallback done;
  // Keeps the local memory registered while the bytes move.
  std::shared_ptr<MemoryRegistration> registration;
};

StatusOr<BulkDescriptor> RdmaConnection::LendImpl(
    std::span<std::byte> bytes, BulkAccess access,
    UniqueFunction<void()> usable) {
  auto registration = CheckLoan(bytes);
  if (!registration.ok()) return registration.status();
  if (!domain_) return ClosedError(peer_);
  std::shared_ptr<ibv_mr> own_region;
  ibv_mr* region = nullptr;
  RegistrationCache& cache = domain_->registrations();
  const uint64_t registrations_before = cache.registrations();
  if (domain_->windows_bound_by_range()) {
    region = cache.BulkRegion(**registration);
  } else {
    // The window would open its whole region: one of exactly these bytes.
    own_region = cache.ExactBulkRegion(**registration, bytes);
    region = own_region.get();
  }
  Bump(stats_.registrations, cache.registrations() - registrations_before);
  if (region == nullptr) {
    return Status(
        StatusCode::kInternal,
        std::string("ibv_reg_mr for a bulk loan: ") + std::strerror(errno));
  }
  bool post = false;
  BulkDescriptor descriptor;
  {
    std::lock_guard lock(mu_);
    if (closing_) return ClosedError(peer_);
    if (Status room = CheckConnectionLoans(loans_.size()); !room.ok()) {
      return room;
    }
    ibv_mw* window = nullptr;
    if (!free_loan_windows_.empty()) {
      window = free_loan_windows_.back();
      free_loan_windows_.pop_back();
    } else {
      MemoryWindow fresh(ibv_alloc_mw(domain_->pd(), IBV_MW_TYPE_2));
      if (!fresh) {
        return Status(StatusCode::kResourceExhausted,
                      std::string("ibv_alloc_mw for a bulk loan: ") +
                          std::strerror(errno) +
                          " (the device's max_mw bounds the loans)");
      }
      window = fresh.get();
      loan_windows_.push_back(std::move(fresh));
    }
    if (Status taken = TakeBulkLoan(); !taken.ok()) {
      free_loan_windows_.push_back(window);
      return taken;
    }
    descriptor.key = next_loan_key_++;
    descriptor.address = reinterpret_cast<uint64_t>(bytes.data());
    descriptor.length = bytes.size();
    // A new key for each binding: an earlier loan's key on this window no
    // longer opens it.
    descriptor.rkey = ibv_inc_rkey(window->rkey);
    descriptor.access = access;
    Loan loan;
    loan.descriptor = descriptor;
    loan.registration = std::move(*registration);
    loan.region = region;
    loan.own_region = std::move(own_region);
    loan.window = window;
    loan.usable = std::move(usable);
    loans_.emplace(descriptor.key, std::move(loan));
    loan_work_.push_back(descriptor.key);
    // On the loop, mid-delivery, a frame sent next could be posted at once
    // (Send), ahead of the bind: it goes through Flush instead.
    if (delivering_last == this) local_op_waiting_ = true;
    post = !flush_pending_.exchange(true, std::memory_order_relaxed);
  }
  if (post) {
    asio::post(context_, [self = shared_from_this()] { self->Flush(); });
  }
  return descriptor;
}

void RdmaConnection::Revoke(uint64_t key, UniqueFunction<void()> revoked) {
  bool post = false;
  UniqueFunction<void()> now;  // Run outside the lock.
  {
    std::lock_guard lock(mu_);
    const auto it = loans_.find(key);
    if (it == loans_.end()) {
      // Not lent, or ended with the connection: nothing can reach it.
      now = std::move(revoked);
    } else {
      Loan& loan = it->second;
      loan.revoked.push_back(std::move(revoked));
      if (loan.state == Loan::State::kToBind ||
          loan.state == Loan::State::kBound) {
        loan.state = Loan::State::kToInvalidate;
        loan_work_.push_back(key);
        post = !flush_pending_.exchange(true, std::memory_order_relaxed);
      }
    }
  }
  if (now) return now();
  if (post) {
    asio::post(context_, [self = shared_from_this()] { self->Flush(); });
  }
}

void RdmaConnection::PostLoanWork() {
  std::vector<UniqueFunction<void()>> revoked;
  // Released outside the lock (deregistered, if the cache let them go).
  std::vector<std::shared_ptr<ibv_mr>> regions;
  {
    std::lock_guard lock(mu_);
    while (!loan_work_.empty()) {
      const auto it = loans_.find(loan_work_.front());
      if (it == loans_.end()) {
        loan_work_.pop_front();
        continue;
      }
      Loan& loan = it->second;
      const bool bind = loan.state == Loan::State::kToBind;
      if (!bind && loan.state != Loan::State::kToInvalidate) {
        loan_work_.pop_front();  // Done already.
        continue;
      }
      if (!bind && loan.invalidate_seq == 0 && !loan.window_bound) {
        // Revoked before its bind was posted: nothing to undo.
        if (loan.usable) revoked.push_back(std::move(loan.usable));
        free_loan_windows_.push_back(loan.window);
        for (auto& done : loan.revoked) revoked.push_back(std::move(done));
        regions.push_back(std::move(loan.own_region));
        loans_.erase(it);
        GiveBackBulkLoans(1);
        loan_work_.pop_front();
        continue;
      }
      if (!SendSlotFree() || !LocalOpMayGo()) break;
      ibv_send_wr wr{};
      wr.wr_id = WrId(kSendTag, ++posted_);
      if (bind) {
        const BulkDescriptor& d = loan.descriptor;
        wr.opcode = IBV_WR_BIND_MW;
        wr.bind_mw.mw = loan.window;
        wr.bind_mw.rkey = d.rkey;
        wr.bind_mw.bind_info.mr = loan.region;
        wr.bind_mw.bind_info.addr = d.address;
        wr.bind_mw.bind_info.length = d.length;
        wr.bind_mw.bind_info.mw_access_flags =
            (d.readable() ? IBV_ACCESS_REMOTE_READ : 0) |
            (d.writable() ? IBV_ACCESS_REMOTE_WRITE : 0);
        if (loan.usable) {
          // Its completion says the peer may use the window.
          wr.send_flags = IBV_SEND_SIGNALED;
          unsignaled_ = 0;
          auto op = std::make_shared<BulkOp>();
          op->in_flight = 1;
          op->done = [usable = std::move(loan.usable)](const Status&) mutable {
            usable();
          };
          bulk_posted_.push_back({posted_, std::move(op), false, false});
        } else if (SignalNext()) {
          wr.send_flags = IBV_SEND_SIGNALED;
        }
        loan.state = Loan::State::kBound;
        loan.window_bound = true;
      } else {
        wr.opcode = IBV_WR_LOCAL_INV;
        wr.invalidate_rkey = loan.descriptor.rkey;
        wr.send_flags = IBV_SEND_SIGNALED;  // Its completion revokes.
        unsignaled_ = 0;
        loan.state = Loan::State::kInvalidating;
        loan.invalidate_seq = posted_;
        ++loan_invalidations_;
      }
      send_wrs_.push_back(wr);
      loan_work_.pop_front();
    }
  }
  for (auto& done : revoked) done();
}

bool RdmaConnection::OnLoanInvalidated(uint64_t seq) {
  if (loan_invalidations_ == 0) return false;
  std::vector<UniqueFunction<void()>> revoked;
  std::shared_ptr<ibv_mr> region;
  {
    std::lock_guard lock(mu_);
    auto it = loans_.begin();
    while (it != loans_.end() && it->second.invalidate_seq != seq) ++it;
    if (it == loans_.end()) return false;
    Loan& loan = it->second;
    loan.window->rkey = loan.descriptor.rkey;  // Its key now.
    free_loan_windows_.push_back(loan.window);
    revoked = std::move(loan.revoked);
    region = std::move(loan.own_region);  // Deregistered outside the lock.
    loans_.erase(it);
    GiveBackBulkLoans(1);
  }
  region.reset();
  --loan_invalidations_;
  for (auto& done : revoked) done();
  return true;
}

void RdmaConnection::EndLoans() {
  std::vector<UniqueFunction<void()>> revoked;
  std::unordered_map<uint64_t, Loan> ended;
  {
    std::lock_guard lock(mu_);
    for (auto& [key, loan] : loans_) {
      for (auto& done : loan.revoked) revoked.push_back(std::move(done));
      if (loan.usable) revoked.push_back(std::move(loan.usable));
    }
    GiveBackBulkLoans(loans_.size());
    ended.swap(loans_);
    loan_work_.clear();
    free_loan_windows_.clear();
    // Before the QP: a window still bound holds it (rxe); and before the
    // regions they are bound on.
    loan_windows_.clear();
  }
  ended.clear();
  loan_invalidations_ = 0;
  for (auto& done : revoked) done();
}

void RdmaConnection::Pull(const BulkDescriptor& loan, uint64_t offset,
                          std::span<std::byte> destination, BulkCallback done) {
  auto op = std::make_shared<BulkOp>();
  op->local = destination.data();
  op->length = destination.size();
  op->remote_address = loan.address + offset;
  op->done = std::move(done);
  StartBulk(std::move(op), loan, BulkAccess::kRead);
}

void RdmaConnection::Push(std::span<const std::byte> source,
                          const BulkDescriptor& loan, uint64_t offset,
                          BulkCallback done) {
  auto op = std::make_shared<BulkOp>();
  op->push = true;
  op->local = const_cast<std::byte*>(source.data());
  op->length = source.size();
  op->remote_address = loan.address + offset;
  op->done = std::move(done);
  StartBulk(std::move(op), loan, BulkAccess::kWrite);
}

void RdmaConnection::StartBulk(std::shared_ptr<BulkOp> op,
                               const BulkDescriptor& loan, BulkAccess wanted) {
  op->rkey = loan.rkey;
  auto registration =
      CheckTransfer(loan, op->remote_address - loan.address,
                    std::span<const std::byte>(op->local, op->length), wanted);
  Status checked = registration.status();
  if (registration.ok()) op->registration = std::move(*registration);
  if (checked.ok() && loan.rkey == 0) {
    checked = Status(StatusCode::kInvalidArgument,
                     "bulk loan " + std::to_string(loan.key) +
                         " was not lent over RDMA: it has no window key");
  }
  asio::post(context_, [self = shared_from_this(), op = std::move(op),
                        checked = std::move(checked)]() mutable {
    if (!checked.ok() || op->length == 0) return op->done(checked);
    if (self->torn_down_ || !self->domain_) {
      return op->done(ClosedError(self->peer_));
    }
    // A pull's destination is written by the device: a region with local
    // write access; a push's source is only read.
    RegistrationCache& cache = self->domain_->registrations();
    if (op->push) {
      const std::optional<uint32_t> lkey = cache.Lkey(*op->registration);
      if (lkey) op->lkey = *lkey;
      if (!lkey) checked = Status(StatusCode::kInternal, "ibv_reg_mr failed");
    } else {
      ibv_mr* region = cache.BulkRegion(*op->registration);
      if (region != nullptr) op->lkey = region->lkey;
      if (region == nullptr) {
        checked = Status(StatusCode::kInternal, "ibv_reg_mr failed");
      }
    }
    if (!checked.ok()) return op->done(checked);
    self->bulk_waiting_.push_back(std::move(op));
    self->PumpBulk();
    self->Post();
  });
}

void RdmaConnection::PumpBulk() {
  if (read_depth_ == 0) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    const bool queried =
        ibv_query_qp(id_->qp, &attr, IBV_QP_MAX_QP_RD_ATOMIC, &init) == 0;
    read_depth_ = queried ? std::max<uint32_t>(attr.max_rd_atomic, 1) : 1;
  }
  while (!bulk_waiting_.empty() && !torn_down_ && !local_op_waiting_ &&
         SendSlotFree()) {
    const std::shared_ptr<BulkOp>& op = bulk_waiting_.front();
    if (op->issued == op->length) {
      bulk_waiting_.pop_front();
      continue;
    }
    const bool read = !op->push;
    if (read ? reads_posted_ >= read_depth_
             : writes_posted_ >= tunables::kBulkWindowChunks) {
      break;
    }
    const uint64_t length =
        std::min<uint64_t>(op->length - op->issued, tunables::kBulkChunkSize);
    ibv_sge& sge = send_sges_[send_wrs_.size() * tunables::kRdmaMaxSendSge];
    sge.addr = reinterpret_cast<uint64_t>(op->local + op->issued);
    sge.length = static_cast<uint32_t>(length);
    sge.lkey = op->lkey;
    ibv_send_wr wr{};
    wr.wr_id = WrId(kSendTag, ++posted_);
    wr.opcode = read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;  // Its completion finishes the chunk.
    unsignaled_ = 0;
    wr.wr.rdma.remote_addr = op->remote_address + op->issued;
    wr.wr.rdma.rkey = op->rkey;
    send_wrs_.push_back(wr);
    last_transmit_ = posted_;
    bulk_posted_.push_back({posted_, op, read});
    ++(read ? reads_posted_ : writes_posted_);
    op->issued += length;
    ++op->in_flight;
  }
}

void RdmaConnection::FinishBulkChunks() {
  while (!bulk_posted_.empty() && bulk_posted_.front().seq <= completed_) {
    BulkChunk chunk = std::move(bulk_posted_.front());
    bulk_posted_.pop_front();
    if (chunk.counted) {
      --(chunk.read ? reads_posted_ : writes_posted_);
      Bump(stats_.bulk_chunks);
      // The peer's NIC answered a READ or acknowledged a WRITE: a sign of
      // life for keepalive, as bytes received are. A rail that only
      // carries this side's one-sided chunks receives no frame at all.
      keepalive_.Touch();
    }
    BulkOp& op = *chunk.op;
    if (--op.in_flight == 0 && op.issued == op.length && op.done) {
      BulkCallback done = std::move(op.done);
      done(Status());
    }
  }
  if (!bulk_waiting_.empty() && !torn_down_) {
    PumpBulk();
    Post();
  }
}

void RdmaConnection::EndBulk(const Status& reason) {
  const Status closed(
      StatusCode::kUnavailable,
      "connection to " + peer_ +
          " closed during a bulk transfer: " + reason.message());
  std::vector<std::shared_ptr<BulkOp>> ended;
  for (auto& chunk : bulk_posted_) ended.push_back(chunk.op);
  for (auto& op : bulk_waiting_) ended.push_back(op);
  bulk_posted_.clear();
  bulk_waiting_.clear();
  reads_posted_ = writes_posted_ = 0;
  for (auto& op : ended) {
    if (op->done) {
      BulkCallback done = std::move(op->done);
      done(closed);
    }
  }
}

}  // namespace rdmarpc::transport::rdma
