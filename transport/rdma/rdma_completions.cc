// RdmaConnection: completion polling (event, busy, hybrid) and small receives.
#include <arpa/inet.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>

#include "base/buffer_pool.h"
#include "base/copy_bytes.h"
#include "base/latency_trace.h"
#include "base/log.h"
#include "base/log_throttle.h"
#include "base/pooled_handler.h"
#include "transport/rdma/completion_member.h"
#include "transport/rdma/rdma_connection.h"

namespace rdmarpc::transport::rdma {

namespace asio = boost::asio;
using tunables::kFramePrefixSize;

void RdmaConnection::AfterBatch(bool woken) {
  if (torn_down_) return;
  Bump(stats_.cq_polls);
  if (woken) Bump(stats_.cq_events);
  Flush();
}

// UseCredit's error, out of line: the string it builds would cost the
// call path a stack frame and saved registers.
[[gnu::noinline, gnu::cold]] void RdmaConnection::NoCreditLeft() {
  ProtocolError(Status(StatusCode::kUnavailable,
                       "peer sent a message with no credit left (" +
                           std::to_string(lent_) + " lent)"));
}

// Inlined into OnCompletion, its one caller.
[[gnu::always_inline]] inline bool RdmaConnection::UseCredit(bool frame) {
  if (peer_holds_ == 0) [[unlikely]] {
    NoCreditLeft();
    return false;
  }
  --peer_holds_;
  if (group_->Short() && lent_ > tunables::kRdmaInitialCredits) {
    // The pool is short: keep this one (the peer holds more than it
    // started with).
    --lent_;
    group_->Unlend(1);
    Bump(stats_.credits_withheld);
    return true;
  }
  // Returned at once (the reply to this message carries it): the group keeps
  // a poll batch of buffers beyond those lent, so the ones not yet
  // re-posted never leave a lent credit without a posted receive.
  ++credits_to_return_;
  // A peer using half or more of what it was lent is busy: lend it one more,
  // so its window grows by one for each message while it stays busy.
  // Control messages (a PING, a GIVE_BACK) do not count: an idle peer's
  // PING would be lent one it gives back at its next idle tick, and so on.
  if (frame && lent_ < tunables::kRdmaReceiveDepth &&
      peer_holds_ * 2 <= lent_ && group_->LendOne()) {
    ++lent_;
    ++credits_to_return_;
    Bump(stats_.credits_lent);
  }
  return true;
}

// Inlined into OnCompletion: split out for reading only.
[[gnu::always_inline]] inline void RdmaConnection::SendsCompleted(
    uint64_t seq) {
  completed_ = std::max(completed_, seq);
  ReleaseBounceChunks(completed_);
  ReleaseStaging(completed_);
  if (!bulk_posted_.empty()) [[unlikely]] {
    FinishBulkChunks();
  }
}

void RdmaConnection::OnCompletionError(const ibv_wc& wc) {
  if (wc.status == IBV_WC_RNR_RETRY_EXC_ERR) Bump(stats_.rnr_errors);
  const std::string why = std::string("completion error: ") +
                          ibv_wc_status_str(wc.status) + " (vendor error " +
                          std::to_string(wc.vendor_err) + ")";
  // A peer can cause these at will (an access outside its grants):
  // logged once per host and interval.
  if (wc.status != IBV_WC_WR_FLUSH_ERR) {
    if (const auto held = ThrottleLog("completion error", peer_)) {
      Log().warn("{}: closing: {}{}", peer_, why, HeldBack(*held));
    }
  } else if (!torn_down_ && !close_after_drain_) {
    // Flushed before we closed: the QP went to error on its own. A peer's
    // RDMA access outside its grant does that (the NIC refuses it), as
    // does a fabric failure; the completion cannot tell which.
    if (const auto held = ThrottleLog("completion error", peer_)) {
      Log().warn(
          "{}: closing: the queue pair entered the error state without a "
          "local cause (a peer's access outside its grants, or a fabric "
          "failure){}",
          peer_, HeldBack(*held));
    }
  }
  // The port going down explains the failure better than the completion.
  CloseNow(Lost(why + (port_down_.empty() ? "" : "; " + port_down_)));
}

void RdmaConnection::OnCompletion(const ibv_wc& wc) {
  const auto tag = static_cast<WrTag>(wc.wr_id >> kTagShift);
  const uint64_t value = wc.wr_id & kValueMask;
  if (wc.status != IBV_WC_SUCCESS) [[unlikely]] {
    return OnCompletionError(wc);
  }
  switch (tag) {
    case kRecvTag: {
      const bool write = wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM;
      const std::byte* data =
          write ? nullptr : group_->ReceiveData(static_cast<uint32_t>(value));
      // Byte 5 of a SEND's prefix is its type (checked when it is read).
      const bool frame =
          write ||
          (wc.byte_len > 5 &&
           data[5] != std::byte{static_cast<uint8_t>(FrameType::kControl)});
      if (!UseCredit(frame)) return;
      if (!started_ || !invalidating_.empty()) {
        // Before the connection is handed over, while it authenticates.
        if (auth_) [[unlikely]] {
          return OnAuthReceive(wc, data);
        }
        // Kept, with a copy of the message, for Start or for the end of
        // the hold (ReplayHeld).
        Buffer copy = PooledBuffer(write ? 0 : wc.byte_len);
        if (!write && wc.byte_len > 0) {
          std::memcpy(copy.data(), data, wc.byte_len);
        }
        held_.emplace_back(wc, std::move(copy));
        return;
      }
      if (write) return OnWriteLanded(ntohl(wc.imm_data), wc.byte_len);
      return OnReceive(data, wc.byte_len);
    }
    case kSendTag:
      if (value > posted_) return;  // Not ours: a QP number reused.
      SendsCompleted(value);
      if (wc.opcode == IBV_WC_LOCAL_INV && !OnLoanInvalidated(value)) {
        OnInvalidated();
      }
      if (close_after_drain_) MaybeFinishClose();  // Rare: no call else.
      return;
    case kWriteTag:                 // The last WRITE of a transfer.
      if (value > posted_) return;  // Not ours: a QP number reused.
      SendsCompleted(value);
      // Releases the callers' buffers and registrations.
      while (!outgoing_.empty() && outgoing_.front().last_seq != 0 &&
             outgoing_.front().last_seq <= value) {
        outgoing_.pop_front();
        Bump(stats_.rdma_writes);
        Bump(stats_.frames_sent);
        // Refused by admission behind it: nothing of theirs was written.
        while (!outgoing_.empty() && outgoing_.front().refused) [[unlikely]] {
            outgoing_.pop_front();
          }
      }
      if (close_after_drain_) MaybeFinishClose();  // Rare: no call else.
      return;
  }
}

void RdmaConnection::ReplayHeld() {
  while (!held_.empty() && invalidating_.empty() && !torn_down_) {
    auto [wc, data] = std::move(held_.front());
    held_.pop_front();
    if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      OnWriteLanded(ntohl(wc.imm_data), wc.byte_len);
    } else {
      OnReceive(data.data(), wc.byte_len);
    }
  }
}

void RdmaConnection::ProtocolError(const Status& error) {
  Bump(stats_.protocol_errors);
  if (const auto held = ThrottleLog("protocol error", peer_)) {
    Log().warn("{}: closing: {}{}", peer_, error.message(), HeldBack(*held));
  }
  CloseNow(error);
}

void RdmaConnection::OnReceive(const std::byte* data, uint32_t bytes) {
  RDMARPC_TRACE(TraceSide(), "on_receive");
  FramePrefix prefix;
  if (bytes < kFramePrefixSize ||
      !AcceptFramePrefix(data, options_.max_payload_size, &prefix) ||
      prefix.type != FrameType::kRpc ||
      uint64_t{kFramePrefixSize} + prefix.header_size + prefix.payload_size !=
          bytes) [[unlikely]] {
    return OnOtherReceive(data, bytes);
  }
  if (Status s = CheckCreditReturn(credits_, prefix.credits,
                                   peer_params_.receive_depth);
      !s.ok()) [[unlikely]] {
    return ProtocolError(s);
  }
  credits_ += prefix.credits;
  Bump(stats_.bytes_received, bytes);
  DeliverReceived(data, prefix, /*dropped=*/false);
}

[[gnu::noinline]] void RdmaConnection::OnOtherReceive(const std::byte* data,
                                                      uint32_t bytes) {
  StatusOr<InboundMessage> inbound =
      CheckInbound(std::span(data, bytes), options_.max_payload_size);
  if (!inbound.ok()) return ProtocolError(inbound.status());
  const FramePrefix& prefix = inbound->prefix;
  if (Status s = CheckCreditReturn(credits_, prefix.credits,
                                   peer_params_.receive_depth);
      !s.ok()) {
    return ProtocolError(s);
  }
  credits_ += prefix.credits;
  Bump(stats_.bytes_received, bytes);
  if (inbound->control) {
    if (inbound->control->kind == ControlKind::kHeader) {
      return OnHeader(*inbound->control, inbound->attached);
    }
    return OnControl(*inbound->control);
  }
  DeliverReceived(data, prefix, inbound->payload_too_large);
}

// Inlined into OnReceive and OnOtherReceive.
[[gnu::always_inline]] inline void RdmaConnection::DeliverReceived(
    const std::byte* data, const FramePrefix& prefix, bool dropped) {
  const size_t keep = prefix.header_size + (dropped ? 0 : prefix.payload_size);
  Buffer block = PooledBuffer(keep);
  CopyBytes(block.data(), data + kFramePrefixSize, keep);
  Bump(stats_.frames_received);
  InsideOnFrame guard(in_observer_);
  RDMARPC_TRACE(TraceSide(), "deliver");
  observer_->OnFrame(ReceivedFrame(FrameType::kRpc, std::move(block),
                                   prefix.header_size,
                                   dropped ? prefix.payload_size : 0));
}

}  // namespace rdmarpc::transport::rdma
