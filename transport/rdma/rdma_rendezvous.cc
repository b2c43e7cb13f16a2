// RdmaConnection: large frames by rendezvous, the receiver's side (RTS,
// GRANT, landing, delivery); rdma_writes.cc has the sender's WRITEs and
// rdma_standing.cc the standing grants.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "base/log_throttle.h"
#include "transport/rdma/completion_member.h"
#include "transport/rdma/grant_memory.h"
#include "transport/rdma/rdma_connection.h"

namespace rdmarpc::transport::rdma {

using tunables::kRdmaReceiveBufferSize;

void RdmaConnection::TooManyPings() {
  if (close_after_drain_) return;  // Told already; closing.
  const Status status = keepalive_.TooManyPings(peer_);
  Bump(stats_.pings_refused);
  if (const auto held = ThrottleLog("too many pings", peer_)) {
    Log().warn("{}: closing: {}{}", peer_, status.message(), HeldBack(*held));
  }
  // The peer learns why, if it gives a credit back within
  // kCloseFlushTimeout.
  ControlMessage told;
  told.kind = ControlKind::kTooManyPings;
  control_queue_.push_back(told);
  Close(status);
}

void RdmaConnection::OnControl(const ControlMessage& message) {
  switch (message.kind) {
    case ControlKind::kCredit:
      return;
    case ControlKind::kPong:  // Its bytes already counted as a sign of life.
      // Keepalive traffic: this side sent nothing for an interval. Credits
      // that came back since the last give-back go back now: once both
      // sides ping, neither may be silent for a whole interval again.
      GiveBackIdleCredits();
      return;
    case ControlKind::kPing: {
      if (!keepalive_.PingReceived(
              tunables::kFramePrefixSize + sizeof(ControlMessage),
              std::chrono::steady_clock::now())) {
        return TooManyPings();
      }
      GiveBackIdleCredits();  // As for a PONG: before the reply.
      // Owed unless a PONG still waits to go (for credits): a peer that
      // pings and never gives credits back gets one PONG queued.
      for (size_t i = 0; i < control_queue_.size(); ++i) {
        if (control_queue_[i].kind == ControlKind::kPong) return;
      }
      ControlMessage pong;
      pong.kind = ControlKind::kPong;
      control_queue_.push_back(pong);  // Drain's Flush posts it.
      return;
    }
    case ControlKind::kHeader:  // OnReceive takes it, with its bytes.
      return;
    case ControlKind::kAuth:  // Only before the connection is handed over.
      return ProtocolError(Status(
          StatusCode::kInternal,
          "malformed frame: an AUTH message after authentication (or on a "
          "connection without it)"));
    case ControlKind::kHeaderTooLarge: {
      const Status told(
          StatusCode::kResourceExhausted,
          "the server refused a call header of " +
              std::to_string(message.length) +
              " bytes before this connection's first call was admitted (at "
              "most " +
              std::to_string(kMaxHeaderFirst) + ")");
      Log().warn("{}: {}", peer_, told.message());
      return CloseNow(told);
    }
    case ControlKind::kTooManyPings: {
      const Status told = KeepaliveClock::ToldTooManyPings(peer_);
      Log().warn("{}: {}", peer_, told.message());
      return CloseNow(told);
    }
    case ControlKind::kGiveBack:
      // Our pool's: the peer was idle and holds no more than it started
      // with (peer_holds_ already counts this message's own credit used).
      if (Status s = CheckGiveBack(message.length, peer_holds_); !s.ok()) {
        return ProtocolError(s);
      }
      peer_holds_ -= message.length;
      lent_ -= message.length;
      group_->Unlend(message.length);
      Bump(stats_.credits_taken_back, message.length);
      return;
    case ControlKind::kRts:
      if (message.flags == kRtsStanding) return OnStandingRts(message);
      return OnRts(message);
    case ControlKind::kRelease:
      return OnRelease(message);
    case ControlKind::kGrant:
      return OnGrant(message);
  }
}

void RdmaConnection::OnGrant(const ControlMessage& message) {
  if (message.flags & kGrantStanding) return OnStandingGrant(message);
  // Grants answer our RTSs in order: this one is for the oldest transfer
  // not yet covered by grants (without one, or with segments to come).
  OutgoingTransfer* oldest = nullptr;
  for (size_t i = 0; i < outgoing_.size() && !oldest; ++i) {
    if (!outgoing_[i].granted || outgoing_[i].covered < outgoing_[i].total) {
      oldest = &outgoing_[i];
    }
  }
  std::optional<PendingTransfer> pending;
  if (oldest) {
    pending = PendingTransfer{
        oldest->id,
        oldest->frame.header.size(),
        oldest->frame.payload_size(),
        oldest->covered,
        oldest->granted && oldest->next_write < oldest->plan.writes.size(),
        oldest->header_sent};
  }
  if (Status s = CheckGrant(message, pending); !s.ok()) {
    return ProtocolError(s);
  }
  if (message.flags & (kGrantHeaderFirst | kGrantRefused)) [[unlikely]] {
    return OnAdmissionGrant(*oldest, message);
  }
  if (!oldest->granted) {
    oldest->total =
        (message.flags & kGrantSegment)
            ? oldest->frame.header.size() + oldest->frame.payload_size()
            : message.length;
  }
  oldest->granted = true;
  oldest->grant = message;
  return StartWrites(*oldest);
}

uint64_t RdmaConnection::GrantBudget(uint64_t length) {
  const uint64_t in_use = GrantedBytes();
  const uint64_t limit = options_.max_grant_bytes;
  uint64_t budget = in_use < limit ? limit - in_use : 0;
  // A process that may pin only so much (RLIMIT_MEMLOCK, no CAP_IPC_LOCK)
  // cannot register more than what is left of it: the payload goes in
  // segments, or is refused (RESOURCE_EXHAUSTED), rather than the
  // registration failing. A grant that a free grant-pool block will take
  // pins nothing new.
  GrantPool* pool = PooledGrants();
  if (pool && pool->HasFree(length)) return budget;
  if (const std::optional<uint64_t> lockable = LockedMemoryLimit()) {
    const uint64_t registered = LiveRegisteredBytes();
    budget =
        std::min(budget, *lockable > registered ? *lockable - registered : 0);
  }
  return budget;
}

StatusOr<GrantPlan> RdmaConnection::PlanGrantFor(
    const IncomingTransfer& transfer, size_t ahead) {
  if (transfer.segmented) {  // Its next segment: it is under way.
    const uint64_t remaining = transfer.Total() - transfer.covered;
    GrantPlan plan;
    plan.segment = true;
    plan.length = PlanSegment(
        remaining,
        GrantBudget(std::min<uint64_t>(remaining, tunables::kRdmaSegmentSize)));
    return plan;
  }
  // With the pool, a frame larger than its blocks goes in segments that
  // its blocks take, rather than registering memory of its own.
  const uint64_t whole_limit =
      PooledGrants() ? tunables::kRdmaGrantPoolMaxBlock : UINT64_MAX;
  return PlanGrant(transfer.rts, static_cast<uint32_t>(ahead),
                   tunables::kRdmaMaxOpenGrants, options_.max_payload_size,
                   GrantBudget(transfer.Total()), whole_limit);
}

void RdmaConnection::OnRts(const ControlMessage& rts) {
  IncomingTransfer transfer;
  transfer.rts = rts;
  StatusOr<GrantPlan> plan = PlanGrantFor(transfer, incoming_.size());
  if (!plan.ok()) return ProtocolError(plan.status());
  // Behind one that waits for memory, or for the rest of its segments, it
  // waits too: grants go out in order.
  const bool behind = !incoming_.empty() && (!incoming_.back().granted ||
                                             incoming_.back().Blocking());
  incoming_.push_back(std::move(transfer));
  if (behind || AwaitsHeader(incoming_.back())) return;
  if (!plan->wait) Grant(incoming_.back(), *plan);
}

void RdmaConnection::GrantWaiting() {
  for (size_t i = 0; i < incoming_.size() && !torn_down_; ++i) {
    IncomingTransfer& transfer = incoming_[i];
    if (!transfer.granted) {
      if (AwaitsHeader(transfer)) return;  // Admission first.
      // Checked when it arrived; only the budget can have changed.
      StatusOr<GrantPlan> plan = PlanGrantFor(transfer, i);
      if (!plan.ok()) return ProtocolError(plan.status());
      if (plan->wait) return;
      Grant(transfer, *plan);
    }
    if (transfer.Blocking()) return;  // Its next segment comes first.
  }
}

void RdmaConnection::NoteDrop(uint64_t payload_size, DropReason reason) {
  Bump(stats_.oversized_frames_dropped);
  // A peer can send these at will: once per host and interval.
  const auto held = ThrottleLog("payload refused", peer_);
  if (!held) return;
  if (reason == DropReason::kTooLarge) {
    Log().warn(
        "{}: payload of {} bytes exceeds the receiver's maximum of {}; "
        "discarding it{}",
        peer_, payload_size, options_.max_payload_size, HeldBack(*held));
  } else {
    const std::optional<uint64_t> lockable = LockedMemoryLimit();
    Log().warn(
        "{}: payload of {} bytes would exceed the registered-memory limit "
        "(max_grant_bytes {}, {} in use{}); discarding it{}",
        peer_, payload_size, options_.max_grant_bytes, GrantedBytes(),
        lockable ? "; RLIMIT_MEMLOCK " + std::to_string(*lockable) + ", " +
                       std::to_string(LiveRegisteredBytes()) +
                       " registered: raise `ulimit -l` or give the process "
                       "CAP_IPC_LOCK"
                 : std::string(),
        HeldBack(*held));
  }
}

void RdmaConnection::Grant(IncomingTransfer& transfer, const GrantPlan& plan) {
  const ControlMessage& rts = transfer.rts;
  transfer.dropped_payload = plan.dropped_payload;
  transfer.drop_reason = plan.drop_reason;
  if (plan.drop_reason != DropReason::kNone) {
    NoteDrop(rts.payload_size, plan.drop_reason);
  }
  const size_t length = plan.length;
  if (plan.segment && !transfer.segmented) {
    // The frame's own memory, which its segments are copied into: not
    // registered, so not bounded by what may be pinned.
    transfer.assembled = FrameBlock(transfer.Total());
    if (transfer.assembled.empty() && transfer.Total() > 0) {
      return CloseNow(Status(StatusCode::kResourceExhausted,
                             "cannot allocate " +
                                 std::to_string(transfer.Total()) +
                                 " bytes for a transfer from " + peer_));
    }
    transfer.segmented = true;
    Bump(stats_.segmented_frames);
  }
  // At least one byte, so there is always something to register or bind.
  const size_t extent = std::max<size_t>(length, 1);
  const bool pooled = GrantFromPool(transfer, extent);
  if (!pooled) {
    transfer.block = ZeroedGrantBlock(extent);
    if (transfer.block.empty()) {
      return CloseNow(Status(StatusCode::kResourceExhausted,
                             "cannot allocate " + std::to_string(length) +
                                 " bytes for a transfer from " + peer_));
    }
    // Remote write into this block only, for this connection only.
    transfer.region =
        RegisterRegion(domain_->pd(), transfer.block.data(), extent,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!transfer.region) {
      const Status failed =
          RegistrationFailed("ibv_reg_mr (grant)", extent, errno);
      if (failed.code() == StatusCode::kResourceExhausted &&
          plan.drop_reason == DropReason::kNone && rts.payload_size > 0 &&
          transfer.covered == 0) {
        // Out of lockable memory after all (others registered meanwhile):
        // this payload is refused, as one over the budget is (logged and
        // counted so); the connection and its other calls go on.
        GrantPlan dropped = plan;
        dropped.length = rts.header_size;
        dropped.dropped_payload = rts.payload_size;
        dropped.drop_reason = DropReason::kMemoryLimit;
        dropped.segment = false;
        transfer.block = Buffer();
        transfer.segmented = false;
        transfer.assembled = Buffer();
        return Grant(transfer, dropped);
      }
      return CloseNow(failed);
    }
  }
  transfer.block.Truncate(length);
  transfer.charge = GrantCharge(extent);
  transfer.granted = true;
  transfer.covered += length;
  Bump(pooled ? stats_.pooled_grants : stats_.registered_grants);
  QueueGrant(transfer, plan, pooled);
}

void RdmaConnection::QueueGrant(const IncomingTransfer& transfer,
                                const GrantPlan& plan, bool pooled) {
  const ControlMessage& rts = transfer.rts;
  const size_t length = plan.length;
  ControlMessage grant;
  grant.kind = ControlKind::kGrant;
  grant.dropped = static_cast<uint8_t>(plan.drop_reason);
  grant.flags = plan.segment ? kGrantSegment : 0;
  grant.transfer = rts.transfer;
  grant.addr = reinterpret_cast<uint64_t>(transfer.block.data());
  grant.rkey = pooled ? transfer.window_rkey : transfer.region->rkey;
  grant.length = static_cast<uint32_t>(length);
  control_queue_.push_back(grant);  // A window is bound before it goes.
}

bool RdmaConnection::GrantFromPool(IncomingTransfer& transfer, size_t extent) {
  GrantPool* pool = PooledGrants();
  if (pool == nullptr || extent > tunables::kRdmaGrantPoolMaxBlock) {
    return false;
  }
  ibv_mw* window = TakeWindow();
  if (window == nullptr) return false;
  auto block = pool->Acquire(extent, options_.rdma_max_pool_bytes);
  if (!block) {
    free_windows_.push_back(window);
    return false;
  }
  transfer.block = std::move(block->buffer);
  transfer.window = window;
  transfer.pool_region = block->region;
  // A new key for each binding: an rkey of an earlier grant on this window
  // no longer opens it. (window->rkey stays the current key until the bind
  // is posted: the provider checks it then.)
  transfer.window_rkey = ibv_inc_rkey(window->rkey);
  return true;
}

ibv_mw* RdmaConnection::TakeWindow() {
  if (!free_windows_.empty()) {
    ibv_mw* window = free_windows_.back();
    free_windows_.pop_back();
    return window;
  }
  MemoryWindow window(ibv_alloc_mw(domain_->pd(), IBV_MW_TYPE_2));
  if (!window) {
    Log().warn("{}: ibv_alloc_mw: {}; registering grants instead", peer_,
               std::strerror(errno));
    return nullptr;
  }
  windows_.push_back(std::move(window));
  return windows_.back().get();
}

bool RdmaConnection::PostQueuedControl(const ControlMessage& message) {
  if (message.kind == ControlKind::kHeader) [[unlikely]] {
    return PostHeader(message);
  }
  if (message.kind == ControlKind::kGrant) {
    // A standing grant's number is not a transfer id: it is found apart.
    RingQueue<IncomingTransfer>& grants =
        (message.flags & kGrantStanding) ? standing_ : incoming_;
    IncomingTransfer* transfer = nullptr;
    for (size_t i = 0; i < grants.size() && !transfer; ++i) {
      if (grants[i].rts.transfer == message.transfer) transfer = &grants[i];
    }
    if (transfer && transfer->window && !transfer->window_bound) {
      // The bind and the GRANT: two work requests, in this order on the
      // send queue, so the window is open before the peer learns its key.
      if (posted_ + 2 - completed_ > tunables::kRdmaSendDepth) return false;
      if (!LocalOpMayGo()) return false;
      ibv_send_wr wr{};
      wr.wr_id = WrId(kSendTag, ++posted_);
      wr.opcode = IBV_WR_BIND_MW;
      wr.bind_mw.mw = transfer->window;
      wr.bind_mw.rkey = transfer->window_rkey;
      wr.bind_mw.bind_info.mr = transfer->pool_region;
      wr.bind_mw.bind_info.addr =
          reinterpret_cast<uint64_t>(transfer->block.data());
      wr.bind_mw.bind_info.length =
          std::max<uint64_t>(transfer->block.size(), 1);
      wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
      if (SignalNext()) wr.send_flags = IBV_SEND_SIGNALED;
      send_wrs_.push_back(wr);
      transfer->window_bound = true;
    }
  }
  return PostControl(message);
}

void RdmaConnection::OnWriteLanded(uint32_t imm, uint32_t bytes) {
  // `bytes` counts the last WRITE only (the grant bounds the others).
  std::optional<OpenGrant> open;
  if (!incoming_.empty() && incoming_.front().granted) {
    open = OpenGrant{incoming_.front().rts.transfer,
                     incoming_.front().block.size()};
  }
  if (Status s = CheckLanding(imm, bytes, open); !s.ok()) {
    return ProtocolError(s);
  }
  IncomingTransfer transfer = std::move(incoming_.front());
  incoming_.pop_front();
  if (transfer.window != nullptr) {
    invalidating_.push_back(std::move(transfer));
    PostInvalidates();  // This batch's Flush posts it.
    return;
  }
  transfer.region.reset();  // No remote access once the data has landed.
  Deliver(std::move(transfer));
}

void RdmaConnection::PostInvalidates() {
  for (size_t i = 0; i < invalidating_.size(); ++i) {
    IncomingTransfer& transfer = invalidating_[i];
    if (transfer.invalidate_posted) continue;
    if (!SendSlotFree()) return;  // Flush posts it once a slot is free.
    if (!LocalOpMayGo()) return;  // Flush posts it once the queue is idle.
    ibv_send_wr wr{};
    wr.wr_id = WrId(kSendTag, ++posted_);
    wr.opcode = IBV_WR_LOCAL_INV;
    wr.invalidate_rkey = transfer.window_rkey;
    wr.send_flags = IBV_SEND_SIGNALED;  // Its completion delivers the frame.
    unsignaled_ = 0;
    send_wrs_.push_back(wr);
    transfer.invalidate_posted = true;
  }
}

bool RdmaConnection::LocalOpMayGo() {
  if (!local_ops_need_idle_ || completed_ >= last_transmit_) return true;
  if (!local_op_waiting_) {
    Bump(stats_.local_op_waits);
    NoteLocalOpWait();
  }
  local_op_waiting_ = true;
  if (signaled_ < last_transmit_) SignalLastTransmit();
  return false;
}

void RdmaConnection::SignalLastTransmit() {
  // The chain being built: posted_ - send_wrs_.size() + 1 onwards.
  for (ibv_send_wr& wr : send_wrs_) {
    if ((wr.wr_id & kValueMask) == last_transmit_) {
      wr.send_flags |= IBV_SEND_SIGNALED;
      unsignaled_ = 0;
      return;
    }
  }
  if (!SendSlotFree()) return;
  ibv_send_wr wr{};
  wr.wr_id = WrId(kSendTag, ++posted_);
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.num_sge = 0;
  wr.send_flags = IBV_SEND_SIGNALED;
  unsignaled_ = 0;
  send_wrs_.push_back(wr);
  last_transmit_ = posted_;
  Bump(stats_.completion_probes);
}

void RdmaConnection::OnInvalidated() {
  // Invalidations complete in the order they were posted.
  if (invalidating_.empty() || !invalidating_.front().invalidate_posted) {
    return;
  }
  IncomingTransfer transfer = std::move(invalidating_.front());
  invalidating_.pop_front();
  transfer.window->rkey = transfer.window_rkey;  // Its key now.
  free_windows_.push_back(transfer.window);
  transfer.window = nullptr;
  if (transfer.released) {
    transfer = IncomingTransfer();  // The block goes back to the pool.
    if (!torn_down_) GrantWaiting();
  } else {
    Deliver(std::move(transfer));
  }
  ReplayHeld();
}

bool RdmaConnection::SegmentLanded(IncomingTransfer& transfer) {
  // The open segment is the last `size` bytes covered.
  const size_t size = transfer.block.size();
  if (size > 0) {
    std::memcpy(transfer.assembled.data() + (transfer.covered - size),
                transfer.block.data(), size);
  }
  transfer.block = Buffer();  // A pool block goes back (zeroed).
  Bump(stats_.segments_received);
  if (transfer.covered < transfer.Total()) {
    transfer.granted = false;  // Its next segment is granted next.
    transfer.pool_region = nullptr;
    transfer.window_bound = false;
    transfer.invalidate_posted = false;
    return true;
  }
  transfer.block = std::move(transfer.assembled);
  return false;
}

void RdmaConnection::Deliver(IncomingTransfer transfer) {
  transfer.charge.Release();
  if (transfer.segmented && SegmentLanded(transfer)) {
    // Still the oldest: nothing behind it was granted, nothing landed.
    incoming_.push_front(std::move(transfer));
    if (!torn_down_) GrantWaiting();
    return;
  }
  // Landed whole in a pool block: the peer may well send another like it.
  // Offered before the frame is delivered, so that the grants go out ahead
  // of what the application answers (a stream's window update, which lets
  // the writer send the next message).
  if (transfer.pool_region != nullptr &&
      transfer.drop_reason == DropReason::kNone && !transfer.segmented) {
    OfferStandingGrant(transfer.Total());
  }
  // A standing grant's payload over our maximum landed; it is not
  // delivered.
  if (transfer.dropped_payload != 0 &&
      transfer.block.size() > transfer.rts.header_size) {
    transfer.block.Truncate(transfer.rts.header_size);
  }
  Bump(stats_.bytes_received, transfer.block.size());
  Bump(stats_.frames_received);
  {
    InsideOnFrame guard(in_observer_);
    observer_->OnFrame(ReceivedFrame(
        FrameType::kRpc, std::move(transfer.block), transfer.rts.header_size,
        transfer.dropped_payload, transfer.drop_reason));
  }
  if (torn_down_) return;
  // Refused by admission behind it (rdma_admission.cc): its turn now.
  if (!incoming_.empty() && incoming_.front().refused) [[unlikely]] {
    DeliverRefused();
  }
  if (!torn_down_) GrantWaiting();  // Memory came free.
}

}  // namespace rdmarpc::transport::rdma
