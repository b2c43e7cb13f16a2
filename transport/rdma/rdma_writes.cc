// RdmaConnection: the sender's side of a large transfer, its RDMA WRITEs
// into the peer's grant (planned by write_plan.h, staged where needed).
#include <arpa/inet.h>

#include <array>
#include <cstring>

#include "base/log.h"
#include "transport/rdma/completion_member.h"
#include "transport/rdma/rdma_connection.h"

namespace rdmarpc::transport::rdma {

using tunables::kRdmaReceiveBufferSize;

bool RdmaConnection::WritesPending() {
  // Transfers post their WRITEs in order: if the newest has posted all of
  // its own, so has every one before it.
  if (outgoing_.empty()) return false;
  const OutgoingTransfer& newest = outgoing_.back();
  return !newest.granted || newest.next_write < newest.plan.writes.size() ||
         newest.covered < newest.total;
}

void RdmaConnection::PostWrites() {
  for (size_t i = 0; i < outgoing_.size(); ++i) {
    OutgoingTransfer& transfer = outgoing_[i];
    if (!transfer.granted) return;
    while (transfer.next_write < transfer.plan.writes.size()) {
      if (!PostWrite(transfer)) return;
    }
    // Its next segment's grant comes before any later transfer is written.
    if (transfer.covered < transfer.total) return;
  }
}

void RdmaConnection::StartWrites(OutgoingTransfer& transfer) {
  std::array<WriteSource, 1 + tunables::kMaxPayloadSlices> sources;
  size_t count = 0;
  sources[count++] = {transfer.frame.header.span(), std::nullopt};
  RegistrationCache& registrations = domain_->registrations();
  const uint64_t registrations_before = registrations.registrations();
  const bool first = transfer.covered == 0;  // Pins are taken once.
  for (size_t i = 0;
       !transfer.grant.dropped && i < transfer.frame.payload_slices(); ++i) {
    const Buffer& slice = transfer.frame.payload[i];
    WriteSource& source = sources[count++];
    source.bytes = slice.span();
    auto registration = MemoryRegistration::Find(slice.span());
    if (!registration) {
      // A frame received into the grant pool, sent on: its block is
      // registered on this device already. Anything else is staged: copied
      // through the bounce chunks.
      if (GrantPool* pool = domain_->grant_pool()) {
        source.lkey = pool->Lkey(slice.span());
      }
      continue;
    }
    source.lkey = registrations.Lkey(*registration);
    if (!source.lkey) {
      Log().warn("{}: {}; copying its payload instead", peer_,
                 RegistrationFailed("ibv_reg_mr of a registration",
                                    registration->size(), errno)
                     .message());
      continue;
    }
    if (first) transfer.pins.push_back(std::move(registration));
  }
  Bump(stats_.registrations,
       registrations.registrations() - registrations_before);
  // The bytes this grant covers: all of the frame, or its next segment.
  const uint64_t length = transfer.grant.length;
  count =
      SliceSources(std::span(sources.data(), count), transfer.covered, length);
  transfer.covered += length;
  transfer.next_write = 0;
  transfer.remote_offset = 0;
  transfer.plan =
      PlanWrites(std::span(sources.data(), count), tunables::kRdmaMaxSendSge,
                 tunables::kRdmaBounceChunkSize, tunables::kRdmaMaxWriteSize);
}

bool RdmaConnection::PostWrite(OutgoingTransfer& transfer) {
  const PlannedWrite& write = transfer.plan.writes[transfer.next_write];
  // The last of its grant's (it carries the immediate), and of the frame.
  const bool last = transfer.next_write + 1 == transfer.plan.writes.size();
  const bool final = last && transfer.covered == transfer.total;
  if (!SendSlotFree()) return false;
  // Only the last WRITE carries an immediate and so consumes a receive; it
  // returns no credits, so it may not take the last one.
  if (last && !MaySpendCredit(/*returns_credits=*/false)) {
    Bump(stats_.credit_stalls);
    return false;
  }
  const uint64_t seq = posted_ + 1;
  std::byte* staging = nullptr;
  uint32_t staging_lkey = 0;
  bool chunk = false;
  if (write.staged_bytes > 0) {
    if (write.staged_bytes <= kRdmaReceiveBufferSize) {
      staging = AcquireStaging(seq, &staging_lkey);
      if (staging == nullptr) return false;  // Flush runs again once free.
    } else {
      staging = AcquireBounceChunk(seq, &staging_lkey);
      if (staging == nullptr) return false;  // Flush runs again once free.
      chunk = true;
    }
  }
  posted_ = seq;
  ibv_sge* sges = &send_sges_[send_wrs_.size() * tunables::kRdmaMaxSendSge];
  int count = 0;
  uint32_t staged = 0;
  for (uint32_t i = 0; i < write.segments; ++i) {
    const WriteSegment& segment =
        transfer.plan.segments[write.first_segment + i];
    if (!segment.staged) {
      sges[count++] = {reinterpret_cast<uint64_t>(segment.data), segment.size,
                       segment.lkey};
      Bump(stats_.zero_copy_bytes, segment.size);
      continue;
    }
    if (staged == 0) {
      sges[count++] = {reinterpret_cast<uint64_t>(staging), write.staged_bytes,
                       staging_lkey};
    }
    std::memcpy(staging + staged, segment.data, segment.size);
    staged += segment.size;
  }
  Bump(stats_.staged_bytes, staged);
  ibv_send_wr wr{};
  wr.num_sge = count;
  wr.wr.rdma.remote_addr = transfer.grant.addr + transfer.remote_offset;
  wr.wr.rdma.rkey = transfer.grant.rkey;
  wr.opcode = last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  if (last) {  // The immediate takes one of the peer's receives.
    wr.imm_data = htonl(transfer.id);
    --credits_;
  }
  if (final) {
    wr.wr_id = WrId(kWriteTag, seq);
    wr.send_flags = IBV_SEND_SIGNALED;  // Its completion frees the buffers.
    unsignaled_ = 0;
    transfer.last_seq = seq;
  } else {
    wr.wr_id = WrId(kSendTag, seq);
    // A chunk is free once it is done.
    if (SignalNext() || chunk) {
      wr.send_flags = IBV_SEND_SIGNALED;
      unsignaled_ = 0;
    }
    // A segment's last: the receiver copies it and grants the next.
    if (last) Bump(stats_.segments_sent);
  }
  send_wrs_.push_back(wr);
  last_transmit_ = seq;
  transfer.remote_offset += write.length;
  ++transfer.next_write;
  Bump(stats_.bytes_sent, write.length);
  return true;
}

std::byte* RdmaConnection::AcquireBounceChunk(uint64_t seq, uint32_t* lkey) {
  // Its share: the WRITEs holding them complete, and flush it again.
  if (bounce_held_.size() >= tunables::kRdmaBounceChunks) return nullptr;
  Status error;
  auto chunk = group_->AcquireBounceChunk(this, &error);
  if (!chunk) {
    if (!error.ok()) CloseNow(error);
    return nullptr;
  }
  bounce_held_.push_back({seq, chunk->index});
  *lkey = chunk->lkey;
  return chunk->data;
}

void RdmaConnection::ReleaseBounceChunks(uint64_t completed) {
  while (!bounce_held_.empty() && bounce_held_.front().first <= completed) {
    group_->ReleaseBounceChunk(bounce_held_.front().second);
    bounce_held_.pop_front();
  }
}

}  // namespace rdmarpc::transport::rdma
