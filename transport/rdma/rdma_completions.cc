// RdmaConnection: completion polling (event, busy, hybrid) and small receives.
#include <arpa/inet.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>

#include "base/buffer_pool.h"
#include "base/latency_trace.h"
#include "base/log.h"
#include "base/pooled_handler.h"
#include "transport/rdma/connection_internal.h"

namespace rdmarpc::transport::rdma {

namespace asio = boost::asio;
using tunables::kFramePrefixSize;
using tunables::kRdmaReceiveBufferSize;

void RdmaConnection::WatchCq() {
  cq_fd_.async_wait(
      asio::posix::stream_descriptor::wait_read,
      Pooled([self = shared_from_this()](const boost::system::error_code& e) {
        if (e || self->torn_down_) return;
        self->OnCqReady();
      }));
}

void RdmaConnection::OnCqReady() {
  if (torn_down_) return;
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  while (ibv_get_cq_event(completion_channel_.get(), &cq, &context) == 0) {
    ++unacked_cq_events_;
    Bump(stats_.cq_events);
  }
  if (unacked_cq_events_ >= tunables::kRdmaCqEventAckBatch) {
    ibv_ack_cq_events(cq_.get(), unacked_cq_events_);
    unacked_cq_events_ = 0;
  }
  Drain();
  if (torn_down_) return;
  if (options_.poll_mode == PollMode::kHybrid) {
    // Activity: spin for a while before waiting for the next event.
    spin_until_ = std::chrono::steady_clock::now() + options_.hybrid_spin;
    return PollLoop();
  }
  // Arm, then drain again: a completion that arrived between the first
  // drain and the arm would otherwise raise no event.
  if (ibv_req_notify_cq(cq_.get(), 0) != 0) {
    return CloseNow(ErrnoStatus("ibv_req_notify_cq", errno));
  }
  Drain();
  if (!torn_down_) WatchCq();
}

void RdmaConnection::PollLoop() {
  if (torn_down_) return;
  RDMARPC_TRACE(TraceSide(), "trip");
  // Several polls per trip through the event loop: a trip (the scheduler's
  // locks, a non-blocking epoll_wait) costs far more than an empty poll.
  // Stop at the first completions, so what they started runs next. A frame
  // queued meanwhile (by a handler that ran before this one, or by another
  // thread) is posted at once: its Flush, queued behind this loop, would
  // otherwise wait out every poll of it.
  bool any = false;
  for (uint32_t i = 0; i < tunables::kRdmaBusyPollsPerYield; ++i) {
    if (flush_pending_.load(std::memory_order_relaxed)) Flush();
    any = Drain();
    if (any || torn_down_) break;
  }
  if (torn_down_) return;
  if (options_.poll_mode == PollMode::kHybrid) {  // One clock read per trip.
    const auto now = std::chrono::steady_clock::now();
    if (any) {
      spin_until_ = now + options_.hybrid_spin;
    } else if (now >= spin_until_) {
      // Quiet for hybrid_spin: arm, drain the race, wait for an event.
      if (ibv_req_notify_cq(cq_.get(), 0) != 0) {
        return CloseNow(ErrnoStatus("ibv_req_notify_cq", errno));
      }
      Drain();
      if (!torn_down_) WatchCq();
      return;
    }
  }
  // Poll again from the loop, so timers and other handlers still run.
  asio::post(context_,
             Pooled([self = shared_from_this()] { self->PollLoop(); }));
}

bool RdmaConnection::Drain() {
  ibv_wc wcs[32];
  bool any = false;
  while (!torn_down_) {
    const int n = ibv_poll_cq(cq_.get(), 32, wcs);
    Bump(stats_.cq_polls);
    if (n < 0) {
      CloseNow(Status(StatusCode::kUnavailable, "ibv_poll_cq failed"));
      break;
    }
    if (n == 0) break;
    any = true;
#ifdef RDMARPC_LATENCY_TRACE
    for (int i = 0; i < n; ++i) {
      RDMARPC_TRACE(TraceSide(), (wcs[i].opcode & IBV_WC_RECV) != 0
                                     ? "recv_cqe"
                                     : "send_cqe");
    }
#endif
    // The last completion that can deliver a frame: send completions
    // polled after it carry none, so a reply need not wait for them.
    int last = n - 1;
    while (last > 0 && (wcs[last].status != IBV_WC_SUCCESS ||
                        (wcs[last].opcode & IBV_WC_RECV) == 0)) {
      --last;
    }
    for (int i = 0; i < n && !torn_down_; ++i) {
      // Reset even if a handler throws (the event loop logs and goes on).
      struct Last {
        explicit Last(RdmaConnection* c) { delivering_last = c; }
        ~Last() { delivering_last = nullptr; }
      } guard(i == last ? this : nullptr);
      OnCompletion(wcs[i]);
    }
  }
  if (!torn_down_ && any) {
    FlushReposts();
    Flush();
  }
  return any;
}

void RdmaConnection::OnCompletion(const ibv_wc& wc) {
  const auto tag = static_cast<WrTag>(wc.wr_id >> kTagShift);
  const uint64_t value = wc.wr_id & kValueMask;
  if (wc.status != IBV_WC_SUCCESS) {
    if (wc.status == IBV_WC_RNR_RETRY_EXC_ERR) Bump(stats_.rnr_errors);
    const std::string why = std::string("completion error: ") +
                            ibv_wc_status_str(wc.status) + " (vendor error " +
                            std::to_string(wc.vendor_err) + ")";
    if (wc.status != IBV_WC_WR_FLUSH_ERR) {
      Log().warn("{}: closing: {}", peer_, why);
    } else if (!torn_down_ && !close_after_drain_) {
      // Flushed before we closed: the QP went to error on its own. A peer's
      // RDMA access outside its grant does that (the NIC refuses it), as
      // does a fabric failure; the completion cannot tell which.
      Log().warn(
          "{}: closing: the queue pair entered the error state without a "
          "local cause (a peer's access outside its grants, or a fabric "
          "failure)",
          peer_);
    }
    // The port going down explains the failure better than the completion.
    return CloseNow(Lost(why + (port_down_.empty() ? "" : "; " + port_down_)));
  }
  switch (tag) {
    case kRecvTag:
      if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        return OnWriteLanded(static_cast<uint32_t>(value), ntohl(wc.imm_data),
                             wc.byte_len);
      }
      return OnReceive(static_cast<uint32_t>(value), wc.byte_len);
    case kSendTag:
      completed_ = std::max(completed_, value);
      ReleaseBounceChunks(completed_);
      if (close_after_drain_) MaybeFinishClose();  // Rare: no call else.
      return;
    case kWriteTag:  // The last WRITE of a transfer.
      completed_ = std::max(completed_, value);
      ReleaseBounceChunks(completed_);
      // Releases the callers' buffers and registrations.
      while (!outgoing_.empty() && outgoing_.front().last_seq != 0 &&
             outgoing_.front().last_seq <= value) {
        outgoing_.pop_front();
        Bump(stats_.rdma_writes);
        Bump(stats_.frames_sent);
      }
      if (close_after_drain_) MaybeFinishClose();  // Rare: no call else.
      return;
  }
}

void RdmaConnection::ProtocolError(const Status& error) {
  Bump(stats_.protocol_errors);
  Log().warn("{}: closing: {}", peer_, error.message());
  CloseNow(error);
}

void RdmaConnection::OnReceive(uint32_t slot, uint32_t bytes) {
  RDMARPC_TRACE(TraceSide(), "on_receive");
  const std::byte* data =
      receive_ring_->data() + size_t{slot} * kRdmaReceiveBufferSize;
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
    Repost(slot);
    return OnControl(*inbound->control);
  }
  const std::byte* header = data + kFramePrefixSize;
  const bool dropped = inbound->payload_too_large;
  const size_t keep = prefix.header_size + (dropped ? 0 : prefix.payload_size);
  Buffer block = PooledBuffer(keep);
  if (keep > 0) std::memcpy(block.data(), header, keep);
  Repost(slot);  // Copied out: the buffer can take the next message now.
  if (torn_down_) return;  // The repost failed: observer_ is gone.
  Bump(stats_.frames_received);
  InsideOnFrame guard(in_observer_);
  RDMARPC_TRACE(TraceSide(), "deliver");
  observer_->OnFrame(ReceivedFrame(FrameType::kRpc, std::move(block),
                                   prefix.header_size,
                                   dropped ? prefix.payload_size : 0));
}

void RdmaConnection::Repost(uint32_t slot) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uint64_t>(receive_ring_->data() +
                                        size_t{slot} * kRdmaReceiveBufferSize);
  sge.length = kRdmaReceiveBufferSize;
  sge.lkey = receive_ring_->lkey();
  repost_sges_.push_back(sge);
  ibv_recv_wr wr{};
  wr.wr_id = WrId(kRecvTag, slot);
  wr.num_sge = 1;
  repost_wrs_.push_back(wr);
  if (repost_wrs_.size() >= tunables::kRdmaRepostBatch && established_) {
    FlushReposts();
  }
}

void RdmaConnection::FlushReposts() {
  if (repost_wrs_.empty() || torn_down_) return;
  for (size_t i = 0; i < repost_wrs_.size(); ++i) {
    repost_wrs_[i].sg_list = &repost_sges_[i];
    repost_wrs_[i].next =
        i + 1 < repost_wrs_.size() ? &repost_wrs_[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  if (ibv_post_recv(id_->qp, repost_wrs_.data(), &bad) != 0) {
    return CloseNow(ErrnoStatus("ibv_post_recv", errno));
  }
  credits_to_return_ += static_cast<uint32_t>(repost_wrs_.size());
  repost_wrs_.clear();
  repost_sges_.clear();
}

}  // namespace rdmarpc::transport::rdma
