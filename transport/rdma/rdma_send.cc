// RdmaConnection: the send path (queue, credits, SENDs, posting chains).
#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstring>

#include "base/copy_bytes.h"
#include "base/latency_trace.h"
#include "base/pooled_handler.h"
#include "transport/peer_budget.h"
#include "transport/rdma/completion_member.h"
#include "transport/rdma/rdma_connection.h"

namespace rdmarpc::transport::rdma {

namespace asio = boost::asio;
using tunables::kFramePrefixSize;

// Inlined into Send, on the call path (out of line it cost a call and the
// registers saved around it, 8 instructions a frame).
[[gnu::always_inline]] inline bool RdmaConnection::CanPostSmallAtOnce(
    uint64_t frame_bytes) const {
  // The conditions under which Flush would post it first, as its own SEND.
  return established_ && !torn_down_ && !local_op_waiting_ &&
         control_queue_.empty() && credits_ >= 2 && SendSlotFree() &&
         outgoing_.empty() && frame_bytes <= SmallLimit();
}

Status RdmaConnection::Send(OutgoingFrame&& frame) {
  RDMARPC_TRACE(TraceSide(), "send");
  if (frame.header.size() > tunables::kMaxCallHeaderSize) {
    return Status(StatusCode::kInternal, "frame header too large");
  }
  if (frame.payload_size() > tunables::kMaxPayloadSizeLimit) {
    return Status(StatusCode::kResourceExhausted,
                  "payload exceeds the frame format's limit");
  }
  const uint64_t bytes =
      kFramePrefixSize + frame.header.size() + frame.payload_size();
  // A reply to a message being delivered (loop thread), small, with a credit
  // and a send slot to spare and nothing queued ahead of it, joins the chain
  // of work requests from here, without passing through the queue and
  // Flush. A reply to the poll's last message is posted at once; the others
  // leave together when the batch ends (AfterBatch posts the chain).
  if (delivering == this && CanPostSmallAtOnce(bytes) &&
      queued_frames_.load(std::memory_order_acquire) == 0) {
    // No lock: only atomics and loop-thread state are read, so the reply
    // does not pay the queue lock's two atomic operations.
    if (closing_.load(std::memory_order_acquire)) return ClosedError(peer_);
    // The receives freed so far are re-posted after it, when the drain
    // ends: off the reply's path. Their credits ride on the next frame.
    if (PostSmall(frame, frame.type, {})) {
      if (delivering_last == this) {
        Bump(stats_.frames_written_directly);
        Post();
      } else {
        Bump(stats_.frames_coalesced);
      }
      return Status();
    }
    // No staging slot free: it waits in the queue like any other.
  }
  bool post = false;
  {
    std::lock_guard lock(mu_);
    if (closing_) return ClosedError(peer_);
    if (Status room = CheckQueueRoom(queued_bytes_, bytes,
                                     options_.max_queued_bytes, peer_);
        !room.ok()) {
      if (!frame.may_wait) return room;
      Bump(stats_.frames_waited_for_room);
    } else if (PeerBytesFull(QueuedCharge(bytes)) && !frame.may_wait)
        [[unlikely]] {
      return PeerMemoryFullError(QueuedCharge(bytes), peer_);
    }
    // Counted in the peer memory budget until it leaves the queue.
    ChargePeerBytes(QueuedCharge(bytes));
    queued_bytes_ += bytes;
    queue_.push_back(std::move(frame));
    queued_frames_.store(queue_.size(), std::memory_order_relaxed);
    post = !flush_pending_.exchange(true, std::memory_order_relaxed);
  }
  if (post && delivering_last == this) {
    Flush();
    return Status();
  }
  if (post) {
    // A busy poll would reach the posted Flush only when it yields; told,
    // it posts the frame between two polls.
    if (flush_wanted_) flush_wanted_->store(true, std::memory_order_release);
    asio::post(context_,
               Pooled([self = shared_from_this()] { self->Flush(); }));
  }
  return Status();
}

// Frames queued wait while loan work is pending: a loan made on another
// thread after PostLoanWork below ran has its REQUEST queued behind it, and
// sent at once the REQUEST could reach the server before the window it
// names is bound. The Flush posted with the loan binds it, then sends.
void RdmaConnection::Flush() {
  bool loan_work;
  {
    std::lock_guard lock(mu_);
    flush_pending_.store(false, std::memory_order_relaxed);
    loan_work = !loan_work_.empty();
  }
  if (torn_down_ || !established_) return;
  local_op_waiting_ = false;
  // Windows to invalidate, then grants: the peer's frames wait on them.
  if (!invalidating_.empty()) PostInvalidates();
  // Loans to bind or revoke (rdma_bulk.cc): a REQUEST that lends goes
  // after its binds.
  if (loan_work) [[unlikely]] {
    PostLoanWork();
  }
  while (!local_op_waiting_ && !control_queue_.empty() &&
         MaySpendCredit(credits_to_return_ > 0) && SendSlotFree() &&
         PostQueuedControl(control_queue_.front())) {
    control_queue_.pop_front();
  }
  if (local_op_waiting_) {
    // A bind or an invalidation waits for the send queue to drain (rxe):
    // nothing goes ahead of it. The completion of the last request posted
    // flushes again.
    return Post();
  }
  if (!outgoing_.empty()) PostWrites();  // Large frames only: no call else.
  const size_t small_limit = SmallLimit();
  // A transfer that went into a standing grant has its WRITEs planned and
  // posted at once (outside the lock: posting may close), and the queue
  // goes on behind them. Each pass uses up a standing grant: few passes.
  for (bool standing = true; standing;) {
    standing = false;
    {
      std::lock_guard lock(mu_);
      // Not while loans wait (see above).
      while (!queue_.empty() && loan_work_.empty()) {
        OutgoingFrame& frame = queue_.front();
        // One credit stays in reserve for CREDIT messages.
        if (credits_ < 2 || !SendSlotFree()) {
          Bump(stats_.credit_stalls);
          break;
        }
        const uint64_t total =
            kFramePrefixSize + frame.header.size() + frame.payload_size();
        const bool small = total <= small_limit;
        // A small frame follows the WRITEs of the large ones ahead of it; a
        // large one may ask for its grant while those are under way.
        if (small ? WritesPending() : outgoing_.size() >= max_transfers_) break;
        if (small) {
          if (!PostSmall(frame, frame.type, {})) break;  // No staging slot.
          queued_bytes_ -= total;
          ReleasePeerBytes(QueuedCharge(total));
          queue_.pop_front();
          continue;
        }
        queued_bytes_ -= total;
        ReleasePeerBytes(QueuedCharge(total));
        if (StartTransferLocked()) {
          standing = true;
          break;
        }
      }
      queued_frames_.store(queue_.size(), std::memory_order_relaxed);
    }
    if (standing) {
      StartWrites(outgoing_.back());  // The transfer just queued.
      PostWrites();
      standing = !torn_down_;
    }
  }
  PostCredits();
  if (!bulk_waiting_.empty()) [[unlikely]] {
    PumpBulk();
  }
  Post();
}

bool RdmaConnection::StartTransferLocked() {
  if (!outgoing_.empty()) Bump(stats_.pipelined_transfers);
  OutgoingTransfer transfer;
  transfer.id = next_transfer_id_++;
  transfer.frame = std::move(queue_.front());
  // Its write plan will point into the header while outgoing_ may grow and
  // move the transfer.
  transfer.frame.header.MoveOutOfLine();
  queue_.pop_front();
  ControlMessage rts;
  rts.kind = ControlKind::kRts;
  rts.transfer = transfer.id;
  rts.header_size = static_cast<uint32_t>(transfer.frame.header.size());
  rts.payload_size = static_cast<uint32_t>(transfer.frame.payload_size());
  // With a standing grant it fits, its WRITEs follow the RTS at once.
  const bool granted = TakeStandingGrant(transfer, rts);
  outgoing_.push_back(std::move(transfer));
  PostControl(rts);
  return granted;
}

void RdmaConnection::PostCredits() {
  // Return credits explicitly when no traffic has carried them back and the
  // peer is down to half of what it was lent (or to the one it holds back).
  if (credits_to_return_ > 0 && peer_holds_ * 2 <= lent_ && credits_ >= 1 &&
      SendSlotFree()) {
    ControlMessage credit;
    credit.kind = ControlKind::kCredit;
    if (PostControl(credit)) Bump(stats_.credit_messages);
  }
  // Closing with sends posted unsignaled and nothing else to post: a
  // signaled CREDIT (the reserve credit's use) completes after all of them,
  // which is what the close waits for.
  if (close_after_drain_ && send_wrs_.empty() && signaled_ < posted_ &&
      credits_ >= 1 && SendSlotFree()) {
    ControlMessage marker;
    marker.kind = ControlKind::kCredit;
    if (PostControl(marker)) Bump(stats_.credit_messages);
  }
}

bool RdmaConnection::PostControl(const ControlMessage& message) {
  OutgoingFrame frame;
  frame.type = FrameType::kControl;
  return PostSmall(frame, FrameType::kControl,
                   std::as_bytes(std::span(&message, 1)));
}

std::byte* RdmaConnection::AcquireStaging(uint64_t seq, uint32_t* lkey) {
  auto slot = group_->AcquireSendSlot(this);
  if (!slot) {
    Bump(stats_.credit_stalls);
    return nullptr;
  }
  staging_.push_back({seq, slot->index});
  *lkey = slot->lkey;
  return slot->data;
}

void RdmaConnection::ReleaseStaging(uint64_t completed) {
  while (!staging_.empty() && staging_.front().first <= completed) {
    group_->ReleaseSendSlot(staging_.front().second);
    staging_.pop_front();
  }
}

bool RdmaConnection::PostSmall(const OutgoingFrame& frame, FrameType type,
                               std::span<const std::byte> body) {
  const size_t index = send_wrs_.size();  // In the chain.
  const uint32_t header_size =
      static_cast<uint32_t>(body.empty() ? frame.header.size() : body.size());
  const auto payload_size =
      static_cast<uint32_t>(body.empty() ? frame.payload_size() : 0);
  // The device copies an inline send into its work request when it is
  // posted, so it is staged in a dense area (entry `index`, free again once
  // the chain is posted) rather than in a slot of the group's send pool,
  // which is held until the send completes.
  const bool inline_send =
      uint64_t{kFramePrefixSize} + header_size + payload_size <= max_inline_;
  uint32_t lkey = 0;
  std::byte* slot = inline_send ? inline_staging_.data() + index * max_inline_
                                : AcquireStaging(posted_ + 1, &lkey);
  if (slot == nullptr) return false;
  const uint64_t seq = ++posted_;
  const auto credits =
      static_cast<uint16_t>(std::min<uint32_t>(credits_to_return_, 0xffff));
  credits_to_return_ -= credits;
  EncodeFramePrefixInto({type, credits, header_size, payload_size}, slot);
  std::byte* out = slot + kFramePrefixSize;
  if (!body.empty()) {
    std::memcpy(out, body.data(), body.size());
    out += body.size();
  } else {
    if (!frame.header.empty()) {
      CopyBytes(out, frame.header.data(), frame.header.size());
      out += frame.header.size();
    }
    for (size_t i = 0; i < frame.payload_slices(); ++i) {
      CopyBytes(out, frame.payload[i].data(), frame.payload[i].size());
      out += frame.payload[i].size();
    }
  }
  const auto length = static_cast<uint32_t>(out - slot);
  ibv_sge& sge = send_sges_[index * tunables::kRdmaMaxSendSge];
  sge.addr = reinterpret_cast<uint64_t>(slot);
  sge.length = length;
  sge.lkey = lkey;  // Not checked for an inline send.
  ibv_send_wr& wr = send_wrs_.emplace_back();  // Zeroed in place.
  wr.wr_id = WrId(kSendTag, seq);
  wr.opcode = IBV_WR_SEND;
  wr.num_sge = 1;
  if (inline_send) {
    wr.send_flags |= IBV_SEND_INLINE;
    Bump(stats_.inline_sends);
  }
  if (SignalNext()) wr.send_flags |= IBV_SEND_SIGNALED;
  last_transmit_ = seq;
  --credits_;
  chained_credits_ += credits;
  Bump(stats_.bytes_sent, length);
  if (type == FrameType::kRpc) Bump(stats_.frames_sent);
  return true;
}

void RdmaConnection::Post() {
  if (send_wrs_.empty() || torn_down_) return;
  // A chain's last request is signaled when the chain holds staging slots
  // (the group's send pool wants them back), or while closing (a graceful
  // close waits for completed_ to reach posted_). Other small sends are
  // signaled one in kRdmaSignalEvery: one completion, and one wake-up, per
  // kRdmaSignalEvery messages rather than per message.
  const bool staged = !staging_.empty() && staging_.back().first > signaled_;
  if (!(send_wrs_.back().send_flags & IBV_SEND_SIGNALED) &&
      (staged || close_after_drain_)) {
    send_wrs_.back().send_flags |= IBV_SEND_SIGNALED;
    unsignaled_ = 0;
  }
  for (size_t i = 0; i < send_wrs_.size(); ++i) {
    if (send_wrs_[i].send_flags & IBV_SEND_SIGNALED) {
      signaled_ = send_wrs_[i].wr_id & kValueMask;
    }
    send_wrs_[i].sg_list = &send_sges_[i * tunables::kRdmaMaxSendSge];
    send_wrs_[i].next = i + 1 < send_wrs_.size() ? &send_wrs_[i + 1] : nullptr;
  }
  peer_holds_ += chained_credits_;
  chained_credits_ = 0;
  ibv_send_wr* bad = nullptr;
  RDMARPC_TRACE(TraceSide(), "post_start");
  const int error = ibv_post_send(id_->qp, send_wrs_.data(), &bad);
  RDMARPC_TRACE(TraceSide(), "post_end");
  Bump(stats_.write_calls);
  send_wrs_.clear();
  if (error != 0) CloseNow(ErrnoStatus("ibv_post_send", error));
}

}  // namespace rdmarpc::transport::rdma
