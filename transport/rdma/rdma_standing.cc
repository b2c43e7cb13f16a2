// RdmaConnection: standing grants (protocol.h), the receiver's grants for a
// peer's next large frames before it asks, and the sender's use of them.
#include <algorithm>
#include <bit>

#include "base/log.h"
#include "transport/rdma/grant_memory.h"
#include "transport/rdma/rdma_connection.h"

namespace rdmarpc::transport::rdma {

std::optional<StandingGrant> RdmaConnection::OldestStanding() {
  // Only grants already sent (their windows bound) can be named; they go
  // in order, so if the oldest is not, none is.
  if (standing_.empty() || !standing_.front().window_bound) return std::nullopt;
  return StandingGrant{standing_.front().rts.transfer,
                       standing_.front().window_rkey,
                       standing_.front().block.size()};
}

void RdmaConnection::OnStandingRts(const ControlMessage& rts) {
  const std::optional<StandingGrant> oldest = OldestStanding();
  if (Status s = CheckStandingRts(rts, static_cast<uint32_t>(incoming_.size()),
                                  tunables::kRdmaMaxOpenGrants, oldest);
      !s.ok()) {
    return ProtocolError(s);
  }
  IncomingTransfer transfer = std::move(standing_.front());
  standing_.pop_front();
  transfer.rts = rts;
  transfer.covered = transfer.Total();
  transfer.block.Truncate(transfer.Total());
  if (rts.payload_size > options_.max_payload_size) {
    // It lands (the grant holds it); only its header is delivered.
    Log().warn(
        "{}: payload of {} bytes exceeds the receiver's maximum of {}; "
        "discarding it",
        peer_, rts.payload_size, options_.max_payload_size);
    Bump(stats_.oversized_frames_dropped);
    transfer.dropped_payload = rts.payload_size;
    transfer.drop_reason = DropReason::kTooLarge;
  }
  // Granted already, it may sit behind transfers waiting for memory: they
  // are written, and land, first.
  incoming_.push_back(std::move(transfer));
}

void RdmaConnection::OnRelease(const ControlMessage& release) {
  size_t out = 0;  // Sent: the GRANTs go in order, so these come first.
  while (out < standing_.size() && standing_[out].window_bound) ++out;
  const std::optional<StandingGrant> oldest = OldestStanding();
  if (Status s = CheckRelease(release, oldest, out); !s.ok()) {
    return ProtocolError(s);
  }
  for (uint32_t i = 0; i < release.length; ++i) {
    // Its window is invalidated before the block goes back to the pool: a
    // peer that writes into it after all reaches nothing once it is reused.
    IncomingTransfer grant = std::move(standing_.front());
    standing_.pop_front();
    grant.released = true;
    invalidating_.push_back(std::move(grant));
  }
  PostInvalidates();  // This batch's Flush posts them.
}

void RdmaConnection::OfferStandingGrant(uint64_t landed) {
  // A whole block of the landed frame's size class: the next frame of a
  // stream fits it though its header may be a few bytes longer.
  const uint64_t extent = std::bit_ceil(
      std::max<uint64_t>(landed, tunables::kRdmaGrantPoolMinBlock));
  // Only for a peer that sends frames alike, two of this class in a row
  // (a stream's): a guess for frames of mixed sizes would hold blocks that
  // the frames which do come cannot use.
  const uint64_t before = last_landed_extent_;
  last_landed_extent_ = extent;
  if (extent != before) return;
  // Transfers waiting for memory come first.
  if (!incoming_.empty() && !incoming_.back().granted) return;
  GrantPool* pool = PooledGrants();
  if (pool == nullptr || extent > tunables::kRdmaGrantPoolMaxBlock) return;
  // As many as the peer may hold: with transfers under way in the ones it
  // had, those in hand are there when the next frame is sent.
  while (standing_.size() < tunables::kRdmaStandingGrants) {
    // The pool may grow for it, as for the frame it stands for.
    if (GrantBudget(extent) < extent) return;
    IncomingTransfer grant;
    if (!GrantFromPool(grant, extent)) return;
    grant.rts.transfer = next_standing_offer_++;
    grant.granted = true;
    grant.charge = GrantCharge(extent);
    ControlMessage message;
    message.kind = ControlKind::kGrant;
    message.flags = kGrantStanding;
    message.transfer = grant.rts.transfer;
    message.addr = reinterpret_cast<uint64_t>(grant.block.data());
    message.rkey = grant.window_rkey;
    message.length = static_cast<uint32_t>(grant.block.size());
    standing_.push_back(std::move(grant));
    Bump(stats_.standing_grants);
    control_queue_.push_back(message);  // Its window is bound before it goes.
  }
}

void RdmaConnection::OnStandingGrant(const ControlMessage& grant) {
  if (Status s = CheckStandingGrant(grant, next_standing_grant_,
                                    standing_grants_.size());
      !s.ok()) {
    return ProtocolError(s);
  }
  ++next_standing_grant_;
  standing_grants_.push_back(grant);  // The batch's Flush may use it.
}

bool RdmaConnection::TakeStandingGrant(OutgoingTransfer& transfer,
                                       ControlMessage& rts) {
  const uint64_t bytes =
      transfer.frame.header.size() + transfer.frame.payload_size();
  if (standing_grants_.empty() || bytes > standing_grants_.front().length) {
    return false;
  }
  ControlMessage grant = standing_grants_.front();
  standing_grants_.pop_front();
  rts.flags = kRtsStanding;
  rts.rkey = grant.rkey;
  // Now this transfer's grant, for the frame's bytes.
  grant.flags = 0;
  grant.transfer = transfer.id;
  grant.length = static_cast<uint32_t>(bytes);
  transfer.grant = grant;
  transfer.granted = true;
  transfer.total = bytes;
  Bump(stats_.standing_transfers);
  return true;
}

}  // namespace rdmarpc::transport::rdma
