// RdmaConnection: close (graceful drain, teardown).
#include <boost/asio/post.hpp>

#include "transport/peer_budget.h"
#include "transport/rdma/loop_state.h"
#include "transport/rdma/rdma_connection.h"

namespace rdmarpc::transport::rdma {

namespace asio = boost::asio;

namespace {

// Says, as it goes, that a teardown held the event loop's thread longer
// than tunables::kRdmaSlowTeardown.
class SlowTeardownLog {
 public:
  explicit SlowTeardownLog(const std::string& peer) : peer_(peer) {}
  SlowTeardownLog(const SlowTeardownLog&) = delete;
  SlowTeardownLog& operator=(const SlowTeardownLog&) = delete;
  ~SlowTeardownLog() {
    const auto took = std::chrono::steady_clock::now() - started_;
    if (took > tunables::kRdmaSlowTeardown) {
      Log().warn(
          "{}: releasing the connection's device resources held its event "
          "loop {} ms",
          peer_,
          std::chrono::duration_cast<std::chrono::milliseconds>(took).count());
    }
  }

 private:
  const std::string& peer_;
  const std::chrono::steady_clock::time_point started_ =
      std::chrono::steady_clock::now();
};

}  // namespace

void RdmaConnection::Close(const Status& reason) {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  asio::post(context_, [self = shared_from_this(), reason] {
    if (self->torn_down_ || self->close_after_drain_) return;
    // Frames already queued leave first; the close completes when they
    // have, or after kCloseFlushTimeout.
    self->close_after_drain_ = reason;
    self->close_timer_.expires_after(tunables::kCloseFlushTimeout);
    self->close_timer_.async_wait(
        [self, reason](const boost::system::error_code& e) {
          if (!e) self->CloseNow(reason);
        });
    self->Flush();
    self->MaybeFinishClose();
  });
}

void RdmaConnection::Abort(const Status& reason) {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  asio::post(context_,
             [self = shared_from_this(), reason] { self->CloseNow(reason); });
}

void RdmaConnection::MaybeFinishClose() {
  if (!close_after_drain_ || torn_down_) return;
  bool queued;
  {
    std::lock_guard lock(mu_);
    queued = !queue_.empty();
  }
  if (!queued && outgoing_.empty() && completed_ == posted_) {
    CloseNow(*close_after_drain_);
  }
}

void RdmaConnection::ForceQpErrorForTesting() {
  asio::post(context_, [self = shared_from_this()] {
    if (!self->id_ || self->id_->qp == nullptr) return;
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(self->id_->qp, &attr, IBV_QP_STATE);
  });
}

void RdmaConnection::OnDeviceEvent(const DeviceEvent& event) {
  if (torn_down_) return;
  if (event.IsFatalFor(id_ ? id_->qp : nullptr,
                       group_ ? group_->cq() : nullptr)) {
    return CloseNow(Lost(event.Describe()));
  }
  if (event.type == IBV_EVENT_PORT_ACTIVE) {
    port_down_.clear();
    port_down_timer_.cancel();
    return;
  }
  if (event.type != IBV_EVENT_PORT_ERR) return;
  // A flap shorter than the grace is ridden out by the QP's retries and
  // costs nothing; a port that stays down ends the connection then, busy or
  // idle, rather than at the retries' or keepalive's end.
  port_down_ = event.Describe();
  port_down_timer_.expires_after(tunables::kRdmaPortDownGrace);
  port_down_timer_.async_wait(
      [weak = weak_from_this()](const boost::system::error_code& e) {
        auto self = weak.lock();
        if (e || !self || self->torn_down_ || !self->id_) return;
        const std::string down =
            PortDownReason(self->id_->verbs, self->id_->port_num);
        if (down.empty()) return;
        self->CloseNow(self->Lost(down));
      });
}

Status RdmaConnection::Lost(std::string_view why) const {
  return Status(StatusCode::kUnavailable,
                "connection to " + peer_ + " lost: " + std::string(why));
}

void RdmaConnection::ReleaseDevice() {
  // The kernel may hold this thread here (rxe destroying a QP or an id whose
  // peer is unreachable): every connection of the loop waits meanwhile.
  const SlowTeardownLog timed(peer_);
  // No async event may reach this connection once its QP is gone.
  device_events_.Reset();
  // No DMA may touch memory that is about to be freed: the memory windows
  // go first (a window still bound holds its QP: rxe waits 50 s for it when
  // the QP is destroyed), then the QP.
  free_windows_.clear();
  windows_.clear();
  EndLoans();  // Their windows too; the revocations run.
  if (id_ && id_->qp != nullptr) rdma_destroy_qp(id_.get());
  // Nothing more lands in a pull's memory: its caller may free it.
  EndBulk(close_reason_);
  // Then what this connection holds of the shared pools and registrations;
  // the group and the domain go when their last connection does.
  outgoing_.clear();
  incoming_.clear();
  invalidating_.clear();
  standing_.clear();
  standing_grants_.clear();
  held_.clear();
  // The group and the event channel are the loop's: they are told on the
  // loop (the last holder of a connection may let go on any thread).
  std::vector<uint32_t> staging, bounces;
  while (!staging_.empty()) {
    staging.push_back(staging_.front().second);
    staging_.pop_front();
  }
  while (!bounce_held_.empty()) {
    bounces.push_back(bounce_held_.front().second);
    bounce_held_.pop_front();
  }
  // An id whose port is down is not destroyed yet (CmChannel::PortIsDown):
  // the loop's channel keeps it until the port is back.
  CmId parked;
  if (id_ && may_park_ && cm_ && CmChannel::PortIsDown(id_.get())) {
    parked = std::move(id_);
  }
  rdma_cm_id* const id = id_ ? id_.get() : parked.get();
  auto release = [group = std::move(group_), attached = attached_,
                  qp_num = qp_num_, lent = lent_, staging = std::move(staging),
                  bounces = std::move(bounces), cm = cm_, id,
                  owner = id_in_group_, parked = std::move(parked)]() mutable {
    if (group) {
      if (attached) group->Detach(qp_num, owner);
      for (const uint32_t slot : staging) group->ReleaseSendSlot(slot);
      for (const uint32_t chunk : bounces) group->ReleaseBounceChunk(chunk);
      group->Unlend(lent);
      group->Leave();
    }
    if (cm && id != nullptr) cm->Forget(id, owner);
    if (parked) cm->Park(std::move(parked));
  };
  attached_ = false;
  lent_ = 0;
  if (context_.get_executor().running_in_this_thread()) {
    release();
  } else {
    asio::post(context_, std::move(release));
  }
  domain_.reset();
  device_hold_.Release();
  id_.reset();
}

void RdmaConnection::CloseNow(const Status& reason) {
  if (torn_down_) return;
  torn_down_ = true;
  close_reason_ = reason;
  {
    std::lock_guard lock(mu_);
    closing_ = true;
    ReleasePeerBytes(queued_bytes_ + queue_.size() * sizeof(OutgoingFrame));
    queue_.clear();
    queued_bytes_ = 0;
    queued_frames_.store(0, std::memory_order_relaxed);
  }
  close_timer_.cancel();
  keepalive_timer_.cancel();
  port_down_timer_.cancel();
  // Transfers with nothing posted yet (no grant came) let go of the callers'
  // buffers and registrations now; one under way keeps them until the QP is
  // destroyed, since its WRITEs may still be reading them.
  while (!outgoing_.empty() && outgoing_.back().next_write == 0) {
    outgoing_.pop_back();
  }
  // Not on a port that is down: see CmChannel::PortIsDown.
  if (id_ && established_ && !CmChannel::PortIsDown(id_.get())) {
    rdma_disconnect(id_.get());
  }
  // This call's reference, if the last.
  auto self = LoopState::Of(context_).Release(this);
  if (auto done = std::move(on_established_)) done(reason, shared_from_this());
  NotifyClosed(std::move(observer_), reason, in_observer_,
               context_.get_executor());
  // The device's resources go as soon as this handler is done (its callers
  // may still look at them), not when the last holder of this object lets
  // go: a device being removed waits for them.
  asio::post(context_, [self = shared_from_this()] { self->ReleaseDevice(); });
}

}  // namespace rdmarpc::transport::rdma
