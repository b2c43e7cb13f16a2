// RdmaConnection: admission (protocol.h). A server whose interceptors admit
// calls lends a peer none of whose calls has passed them nothing beyond its
// initial credits' receive buffers: an RTS is answered by asking for its
// header, which is admitted or refused before any grant.
#include <cstring>

#include "base/buffer_pool.h"
#include "base/log.h"
#include "base/log_throttle.h"
#include "transport/rdma/rdma_connection.h"

namespace rdmarpc::transport::rdma {

void RdmaConnection::RequireAdmission(uint64_t max_payload) {
  (void)max_payload;  // What the receive buffers hold: protocol.h.
  admitted_ = false;
}

bool RdmaConnection::AwaitsHeader(IncomingTransfer& transfer) {
  if (transfer.header_asked) return !transfer.header_arrived;
  if (admitted_) return false;
  if (transfer.rts.header_size > kMaxHeaderFirst) {
    // It cannot be admitted without a grant: the connection ends.
    const Status refused(
        StatusCode::kResourceExhausted,
        "a call header of " + std::to_string(transfer.rts.header_size) +
            " bytes from a peer not yet admitted (at most " +
            std::to_string(kMaxHeaderFirst) + " before admission)");
    if (const auto held = ThrottleLog("header too large to admit", peer_)) {
      Log().warn("{}: closing: {}{}", peer_, refused.message(),
                 HeldBack(*held));
    }
    // The peer learns why, if it gives a credit back within
    // kCloseFlushTimeout (as for TOO_MANY_PINGS).
    ControlMessage told;
    told.kind = ControlKind::kHeaderTooLarge;
    told.length = transfer.rts.header_size;
    control_queue_.push_back(told);
    Close(refused);
    return true;
  }
  transfer.header_asked = true;
  ControlMessage ask;
  ask.kind = ControlKind::kGrant;
  ask.flags = kGrantHeaderFirst;
  ask.transfer = transfer.rts.transfer;
  ask.length = transfer.rts.header_size;
  control_queue_.push_back(ask);
  return true;
}

void RdmaConnection::OnHeader(const ControlMessage& message,
                              std::span<const std::byte> bytes) {
  IncomingTransfer* awaited = nullptr;
  for (size_t i = 0; i < incoming_.size() && !awaited; ++i) {
    if (incoming_[i].header_asked && !incoming_[i].header_arrived) {
      awaited = &incoming_[i];
    }
  }
  std::optional<AwaitedHeader> expected;
  if (awaited) {
    expected = AwaitedHeader{awaited->rts.transfer, awaited->rts.header_size};
  }
  if (Status s = CheckHeader(message, bytes, expected); !s.ok()) {
    return ProtocolError(s);
  }
  awaited->header_arrived = true;
  if (!admitted_ && !observer_->AdmitHeader(bytes)) {
    Bump(stats_.payloads_refused);
    awaited->refused = true;
    awaited->granted = true;
    awaited->dropped_payload = awaited->rts.payload_size;
    awaited->drop_reason = DropReason::kTooLarge;
    awaited->block = PooledBuffer(bytes.size());
    if (!bytes.empty()) {
      std::memcpy(awaited->block.data(), bytes.data(), bytes.size());
    }
    ControlMessage refusal;
    refusal.kind = ControlKind::kGrant;
    refusal.flags = kGrantRefused;
    refusal.dropped = static_cast<uint8_t>(DropReason::kTooLarge);
    refusal.transfer = awaited->rts.transfer;
    control_queue_.push_back(refusal);
    DeliverRefused();
  }
  if (!torn_down_) GrantWaiting();
}

void RdmaConnection::DeliverRefused() {
  // Transfers are delivered in order: a refused one waits for those ahead
  // of it to land.
  while (!incoming_.empty() && incoming_.front().refused && !torn_down_) {
    IncomingTransfer transfer = std::move(incoming_.front());
    incoming_.pop_front();
    Deliver(std::move(transfer));
  }
}

void RdmaConnection::OnAdmissionGrant(OutgoingTransfer& transfer,
                                      const ControlMessage& grant) {
  if (grant.flags == kGrantHeaderFirst) {
    transfer.header_sent = true;
    ControlMessage header;
    header.kind = ControlKind::kHeader;
    header.transfer = transfer.id;
    header.length = static_cast<uint32_t>(transfer.frame.header.size());
    control_queue_.push_back(header);  // Flush posts it (PostHeader).
    return;
  }
  // Refused: nothing is written, and the frame is done with once those
  // ahead of it are (OnCompletion).
  transfer.refused = true;
  transfer.granted = true;
  while (!outgoing_.empty() && outgoing_.front().refused) {
    outgoing_.pop_front();
  }
}

bool RdmaConnection::PostHeader(const ControlMessage& message) {
  // A frame's worth: the reserve credit stays for CREDIT messages.
  if (credits_ < 2) return false;
  const OutgoingTransfer* transfer = nullptr;
  for (size_t i = 0; i < outgoing_.size() && !transfer; ++i) {
    if (outgoing_[i].id == message.transfer) transfer = &outgoing_[i];
  }
  if (transfer == nullptr) return true;  // Closed meanwhile: nothing to send.
  OutgoingFrame frame;
  frame.type = FrameType::kControl;
  // Borrowed: PostSmall copies them into the send.
  frame.header = Buffer::Borrow(std::as_bytes(std::span(&message, 1)));
  frame.AddPayload(Buffer::Borrow(transfer->frame.header.span()));
  return PostSmall(frame, FrameType::kControl, {});
}

}  // namespace rdmarpc::transport::rdma
