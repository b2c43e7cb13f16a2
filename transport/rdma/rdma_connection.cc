#include "transport/rdma/rdma_connection.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <new>

#include "base/buffer_pool.h"
#include "base/latency_trace.h"
#include "base/log.h"
#include "base/pooled_handler.h"
#include "transport/rdma/grant_memory.h"

namespace rdmarpc::transport::rdma {

namespace asio = boost::asio;
using tunables::kFramePrefixSize;
using tunables::kRdmaReceiveBufferSize;
using tunables::kRdmaReceiveDepth;
using tunables::kRdmaSendDepth;

namespace {

// wr_id: a tag in the top two bits, a slot or sequence number below.
enum WrTag : uint64_t { kRecvTag = 1, kSendTag = 2, kWriteTag = 3 };
constexpr uint64_t kTagShift = 62;
constexpr uint64_t kValueMask = (uint64_t{1} << kTagShift) - 1;
uint64_t WrId(WrTag tag, uint64_t value) {
  return (uint64_t{tag} << kTagShift) | value;
}

std::string AddressString(const sockaddr* address) {
  if (address == nullptr) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (address->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(address);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (address->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(address);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "?";
}

ConnParams LocalParams() {
  ConnParams params;
  params.receive_depth = kRdmaReceiveDepth;
  params.receive_buffer_size = kRdmaReceiveBufferSize;
  params.max_open_grants = tunables::kRdmaMaxOpenGrants;
  return params;
}

// For rdma_connect and rdma_accept alike (accept ignores retry_count).
// `local` travels as private data and must outlive the call.
rdma_conn_param ConnParam(const ConnParams& local) {
  rdma_conn_param param{};
  param.private_data = &local;
  param.private_data_len = sizeof(local);
  param.responder_resources = 1;
  param.initiator_depth = 1;
  param.retry_count = 7;
  param.rnr_retry_count = tunables::kRdmaRnrRetry;
  return param;
}

std::atomic<uint64_t> granted_bytes{0};

}  // namespace

uint64_t GrantedBytes() {
  return granted_bytes.load(std::memory_order_relaxed);
}

GrantCharge::GrantCharge(uint64_t bytes) : bytes_(bytes) {
  granted_bytes.fetch_add(bytes, std::memory_order_relaxed);
}

GrantCharge& GrantCharge::operator=(GrantCharge&& other) noexcept {
  if (this != &other) {
    Release();
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void GrantCharge::Release() {
  granted_bytes.fetch_sub(std::exchange(bytes_, 0), std::memory_order_relaxed);
}

// ------------------------------------------------------------------ setup --

RdmaConnection::RdmaConnection(asio::io_context& context,
                               const TransportOptions& options)
    : context_(context),
      options_(options),
      cm_fd_(context),
      cq_fd_(context),
      close_timer_(context) {}

RdmaConnection::~RdmaConnection() {
  // The descriptors belong to rdma-core, not to Asio.
  if (cm_fd_.is_open()) cm_fd_.release();
  if (cq_fd_.is_open()) cq_fd_.release();
  // No DMA may touch memory that is about to be freed: the QP goes first.
  if (id_ && id_->qp != nullptr) rdma_destroy_qp(id_.get());
  // ibv_destroy_cq waits for every event taken from the channel to be acked.
  if (cq_ && unacked_cq_events_ > 0) {
    ibv_ack_cq_events(cq_.get(), unacked_cq_events_);
  }
  outgoing_.clear();
  incoming_.clear();
}

asio::any_io_executor RdmaConnection::executor() const {
  return context_.get_executor();
}

Status RdmaConnection::OpenEventChannel() {
  events_.reset(rdma_create_event_channel());
  if (!events_) return ErrnoStatus("rdma_create_event_channel", errno);
  Status status = SetNonBlocking(events_->fd);
  if (!status.ok()) return status;
  cm_fd_.assign(events_->fd);
  return Status();
}

std::shared_ptr<RdmaConnection> RdmaConnection::Connect(
    asio::io_context& context, const std::string& host, uint16_t port,
    const TransportOptions& options, EstablishedHandler on_established) {
  auto self = std::make_shared<RdmaConnection>(context, options);
  self->on_established_ = std::move(on_established);
  self->host_ = host;
  self->port_ = port;
  self->peer_ = "rdma://" + host + ":" + std::to_string(port);
  asio::post(context, [self] {
    Status status = self->OpenEventChannel();
    rdma_cm_id* raw = nullptr;
    if (status.ok() && rdma_create_id(self->events_.get(), &raw, self.get(),
                                      RDMA_PS_TCP) != 0) {
      status = ErrnoStatus("rdma_create_id", errno);
    }
    self->id_.reset(raw);
    rdma_addrinfo hints{};
    hints.ai_port_space = RDMA_PS_TCP;
    rdma_addrinfo* resolved = nullptr;
    const std::string service = std::to_string(self->port_);
    if (status.ok() && rdma_getaddrinfo(self->host_.c_str(), service.c_str(),
                                        &hints, &resolved) != 0) {
      status =
          Status(StatusCode::kUnavailable,
                 "cannot resolve " + self->peer_ + ": " + std::strerror(errno));
    }
    if (status.ok()) {
      if (rdma_resolve_addr(self->id_.get(), nullptr, resolved->ai_dst_addr,
                            tunables::kRdmaCmTimeoutMs) != 0) {
        status = ErrnoStatus("rdma_resolve_addr " + self->peer_, errno);
      }
    }
    if (resolved != nullptr) rdma_freeaddrinfo(resolved);
    if (!status.ok()) return self->Established(status);
    self->WatchCm();
  });
  return self;
}

std::shared_ptr<RdmaConnection> RdmaConnection::Accept(
    asio::io_context& context, CmId id, const ConnParams& peer,
    const TransportOptions& options, EstablishedHandler on_established) {
  auto self = std::make_shared<RdmaConnection>(context, options);
  self->on_established_ = std::move(on_established);
  self->AdoptPeerParams(peer);
  self->peer_ = "rdma://" + AddressString(rdma_get_peer_addr(id.get()));
  auto shared_id = std::make_shared<CmId>(std::move(id));
  asio::post(context, [self, shared_id] {
    Status status = self->OpenEventChannel();
    if (status.ok() &&
        rdma_migrate_id(shared_id->get(), self->events_.get()) != 0) {
      status = ErrnoStatus("rdma_migrate_id", errno);
    }
    self->id_ = std::move(*shared_id);
    if (status.ok()) {
      self->id_->context = self.get();
      status = self->CreateResources();
    }
    if (status.ok()) {
      const ConnParams local = LocalParams();
      rdma_conn_param param = ConnParam(local);
      if (rdma_accept(self->id_.get(), &param) != 0) {
        status = ErrnoStatus("rdma_accept", errno);
      }
    }
    if (!status.ok()) return self->Established(status);
    self->WatchCm();
  });
  return self;
}

void RdmaConnection::AdoptPeerParams(const ConnParams& params) {
  peer_params_ = params;
  credits_ = params.receive_depth;
  max_transfers_ =
      std::min(OpenGrantsAllowed(params), tunables::kRdmaMaxOpenGrants);
}

Status RdmaConnection::CreateResources() {
  ibv_context* verbs = id_->verbs;
  if (verbs == nullptr) {
    return Status(StatusCode::kUnavailable,
                  "rdma_cm id for " + peer_ + " has no device");
  }
  pd_.reset(ibv_alloc_pd(verbs));
  if (!pd_) return ErrnoStatus("ibv_alloc_pd", errno);
  registrations_.emplace(pd_.get());
  completion_channel_.reset(ibv_create_comp_channel(verbs));
  if (!completion_channel_)
    return ErrnoStatus("ibv_create_comp_channel", errno);
  Status status = SetNonBlocking(completion_channel_->fd);
  if (!status.ok()) return status;
  cq_.reset(ibv_create_cq(verbs, kRdmaReceiveDepth + kRdmaSendDepth + 16, this,
                          completion_channel_.get(), 0));
  if (!cq_) return ErrnoStatus("ibv_create_cq", errno);
  if (ibv_req_notify_cq(cq_.get(), 0) != 0) {
    return ErrnoStatus("ibv_req_notify_cq", errno);
  }
  ibv_qp_init_attr attr{};
  attr.send_cq = cq_.get();
  attr.recv_cq = cq_.get();
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = kRdmaSendDepth;
  attr.cap.max_recv_wr = kRdmaReceiveDepth;
  attr.cap.max_send_sge = tunables::kRdmaMaxSendSge;
  attr.cap.max_recv_sge = 1;
  attr.cap.max_inline_data = tunables::kRdmaMaxInline;
  if (rdma_create_qp(id_.get(), pd_.get(), &attr) != 0) {
    attr.cap.max_inline_data = 0;  // The device may not inline at all.
    if (rdma_create_qp(id_.get(), pd_.get(), &attr) != 0) {
      return ErrnoStatus("rdma_create_qp", errno);
    }
  }
  // A device may grant more than asked; the staging area holds what we asked.
  max_inline_ = std::min(attr.cap.max_inline_data, tunables::kRdmaMaxInline);
  inline_staging_.resize(size_t{kRdmaSendDepth} * max_inline_);

  auto receive = RegisteredMemory::Allocate(
      pd_.get(), size_t{kRdmaReceiveDepth} * kRdmaReceiveBufferSize,
      IBV_ACCESS_LOCAL_WRITE);
  if (!receive.ok()) return receive.status();
  receive_ring_ = std::move(*receive);
  auto send = RegisteredMemory::Allocate(
      pd_.get(), size_t{kRdmaSendDepth} * kRdmaReceiveBufferSize,
      IBV_ACCESS_LOCAL_WRITE);
  if (!send.ok()) return send.status();
  send_ring_ = std::move(*send);
  send_wrs_.resize(kRdmaSendDepth);
  send_sges_.resize(size_t{kRdmaSendDepth} * tunables::kRdmaMaxSendSge);
  send_wrs_.clear();

  repost_wrs_.reserve(kRdmaReceiveDepth);
  repost_sges_.reserve(kRdmaReceiveDepth);
  for (uint32_t slot = 0; slot < kRdmaReceiveDepth; ++slot) Repost(slot);
  FlushReposts();
  credits_to_return_ = 0;  // The initial receives are the peer's credits.
  cq_fd_.assign(completion_channel_->fd);
  return torn_down_ ? close_reason_ : Status();
}

void RdmaConnection::WatchCm() {
  cm_fd_.async_wait(
      asio::posix::stream_descriptor::wait_read,
      [self = shared_from_this()](const boost::system::error_code& e) {
        if (e || !self->events_) return;
        rdma_cm_event* event = nullptr;
        while (rdma_get_cm_event(self->events_.get(), &event) == 0) {
          self->OnCmEvent(event);
        }
        if (!self->torn_down_) self->WatchCm();
      });
}

void RdmaConnection::OnCmEvent(rdma_cm_event* event) {
  Log().debug("{}: {}", peer_, rdma_event_str(event->event));
  const rdma_cm_event_type type = event->event;
  const int status = event->status;
  ConnParams params;
  bool have_params = false;
  if (type == RDMA_CM_EVENT_ESTABLISHED &&
      event->param.conn.private_data_len >= sizeof(ConnParams)) {
    std::memcpy(&params, event->param.conn.private_data, sizeof(params));
    have_params = true;
  }
  rdma_ack_cm_event(event);
  const std::string what = rdma_event_str(type);

  switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (rdma_resolve_route(id_.get(), tunables::kRdmaCmTimeoutMs) != 0) {
        Established(ErrnoStatus("rdma_resolve_route " + peer_, errno));
      }
      return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
      Status created = CreateResources();
      if (!created.ok()) return Established(created);
      const ConnParams local = LocalParams();
      rdma_conn_param param = ConnParam(local);
      if (rdma_connect(id_.get(), &param) != 0) {
        Established(ErrnoStatus("rdma_connect " + peer_, errno));
      }
      return;
    }
    case RDMA_CM_EVENT_ESTABLISHED:
      if (!host_.empty()) {  // Active side: the server's parameters.
        if (!have_params || params.magic != kConnMagic ||
            params.version != kConnVersion || params.receive_depth < 2 ||
            params.receive_buffer_size < kFramePrefixSize + 64) {
          return Established(Status(StatusCode::kUnavailable,
                                    peer_ + " is not an rdmarpc server"));
        }
        AdoptPeerParams(params);
      }
      established_ = true;
      return Established(Status());
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      if (!established_) {
        return Established(Status(StatusCode::kUnavailable,
                                  "connect to " + peer_ + ": " + what));
      }
      Log().info("{}: {}", peer_, what);
      return CloseNow(
          Status(StatusCode::kUnavailable, "peer " + peer_ + " disconnected"));
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      return;
    default:  // REJECTED, UNREACHABLE, ADDR_ERROR, ROUTE_ERROR, ...
      if (!established_) {
        return Established(Status(StatusCode::kUnavailable,
                                  "connect to " + peer_ + " failed: " + what +
                                      " (status " + std::to_string(status) +
                                      ")"));
      }
      Log().warn("{}: unexpected rdma_cm event {}", peer_, what);
      return;
  }
}

void RdmaConnection::Established(const Status& status) {
  if (!status.ok()) CloseNow(status);
  if (auto done = std::move(on_established_)) done(status);
}

void RdmaConnection::Start(std::shared_ptr<ConnectionObserver> observer) {
  asio::post(
      context_, [self = shared_from_this(), observer = std::move(observer)] {
        if (self->torn_down_) {
          observer->OnClose(self->close_reason_);
          return;
        }
        self->observer_ = observer;
        if (self->options_.poll_mode == PollMode::kBusy) {
          self->PollLoop();
        } else {
          self->OnCqReady();  // Drains what arrived before Start, then waits.
        }
      });
}

// ------------------------------------------------------------ completions --

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

// The connection delivering the last received message of the batch this
// thread polled. A frame sent meanwhile (a handler's reply) is posted inside
// Send: nothing else in hand could join it, and the handler's bookkeeping
// after Send (metrics, releasing the call) need not delay it.
thread_local RdmaConnection* delivering_last = nullptr;

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
    return CloseNow(Status(StatusCode::kUnavailable,
                           "connection to " + peer_ + " lost: " + why));
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

void RdmaConnection::OnControl(const ControlMessage& message) {
  switch (message.kind) {
    case ControlKind::kCredit:
      return;
    case ControlKind::kRts:
      return OnRts(message);
    case ControlKind::kGrant: {
      // Grants answer our RTSs in order: this one is for the oldest transfer
      // still without one.
      OutgoingTransfer* oldest = nullptr;
      for (size_t i = 0; i < outgoing_.size() && !oldest; ++i) {
        if (!outgoing_[i].granted) oldest = &outgoing_[i];
      }
      std::optional<PendingTransfer> pending;
      if (oldest) {
        pending = PendingTransfer{oldest->id, oldest->frame.header.size(),
                                  oldest->frame.payload_size()};
      }
      if (Status s = CheckGrant(message, pending); !s.ok()) {
        return ProtocolError(s);
      }
      oldest->granted = true;
      oldest->grant = message;
      return StartWrites(*oldest);
    }
  }
}

StatusOr<GrantPlan> RdmaConnection::PlanGrantFor(const ControlMessage& rts,
                                                 size_t ahead) {
  const uint64_t in_use = GrantedBytes();
  const uint64_t limit = options_.max_grant_bytes;
  return PlanGrant(rts, static_cast<uint32_t>(ahead),
                   tunables::kRdmaMaxOpenGrants, options_.max_payload_size,
                   in_use < limit ? limit - in_use : 0);
}

void RdmaConnection::OnRts(const ControlMessage& rts) {
  StatusOr<GrantPlan> plan = PlanGrantFor(rts, incoming_.size());
  if (!plan.ok()) return ProtocolError(plan.status());
  // Behind one that waits for memory, it waits too: grants go out in order.
  const bool behind = !incoming_.empty() && !incoming_.back().granted;
  IncomingTransfer transfer;
  transfer.rts = rts;
  incoming_.push_back(std::move(transfer));
  if (!behind && !plan->wait) Grant(incoming_.back(), *plan);
}

void RdmaConnection::GrantWaiting() {
  for (size_t i = 0; i < incoming_.size() && !torn_down_; ++i) {
    IncomingTransfer& transfer = incoming_[i];
    if (transfer.granted) continue;
    // Checked when it arrived; only the budget can have changed.
    StatusOr<GrantPlan> plan = PlanGrantFor(transfer.rts, i);
    if (!plan.ok()) return ProtocolError(plan.status());
    if (plan->wait) return;
    Grant(transfer, *plan);
  }
}

void RdmaConnection::Grant(IncomingTransfer& transfer, const GrantPlan& plan) {
  const ControlMessage& rts = transfer.rts;
  transfer.dropped_payload = plan.dropped_payload;
  transfer.drop_reason = plan.drop_reason;
  if (plan.drop_reason == DropReason::kTooLarge) {
    Log().warn(
        "{}: payload of {} bytes exceeds the receiver's maximum of {}; "
        "discarding it",
        peer_, rts.payload_size, options_.max_payload_size);
    Bump(stats_.oversized_frames_dropped);
  } else if (plan.drop_reason == DropReason::kMemoryLimit) {
    Log().warn(
        "{}: payload of {} bytes would exceed the registered-memory limit "
        "(max_grant_bytes {}, {} in use); discarding it",
        peer_, rts.payload_size, options_.max_grant_bytes, GrantedBytes());
    Bump(stats_.oversized_frames_dropped);
  }
  const size_t length = plan.length;
  // At least one byte, so there is always something to register.
  transfer.block = ZeroedGrantBlock(std::max<size_t>(length, 1));
  if (transfer.block.empty()) {
    return CloseNow(Status(StatusCode::kResourceExhausted,
                           "cannot allocate " + std::to_string(length) +
                               " bytes for a transfer from " + peer_));
  }
  transfer.block.Truncate(length);
  // Remote write into this block only, for this connection only.
  transfer.region = RegisterRegion(
      pd_.get(), transfer.block.data(), std::max<size_t>(length, 1),
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!transfer.region) {
    return CloseNow(ErrnoStatus("ibv_reg_mr (grant)", errno));
  }
  transfer.charge = GrantCharge(transfer.region->length);
  transfer.granted = true;
  ControlMessage grant;
  grant.kind = ControlKind::kGrant;
  grant.dropped = static_cast<uint8_t>(plan.drop_reason);
  grant.transfer = rts.transfer;
  grant.addr = reinterpret_cast<uint64_t>(transfer.block.data());
  grant.rkey = transfer.region->rkey;
  grant.length = static_cast<uint32_t>(length);
  control_queue_.push_back(grant);
}

void RdmaConnection::OnWriteLanded(uint32_t slot, uint32_t imm,
                                   uint32_t bytes) {
  // `bytes` counts the last WRITE only (the grant bounds the others).
  std::optional<OpenGrant> open;
  if (!incoming_.empty() && incoming_.front().granted) {
    open = OpenGrant{incoming_.front().rts.transfer,
                     incoming_.front().block.size()};
  }
  if (Status s = CheckLanding(imm, bytes, open); !s.ok()) {
    return ProtocolError(s);
  }
  Repost(slot);
  if (torn_down_) return;  // The repost failed: observer_ is gone.
  IncomingTransfer transfer = std::move(incoming_.front());
  incoming_.pop_front();
  transfer.region.reset();  // No remote access once the data has landed.
  transfer.charge.Release();
  Bump(stats_.bytes_received, transfer.block.size());
  Bump(stats_.frames_received);
  {
    InsideOnFrame guard(in_observer_);
    observer_->OnFrame(ReceivedFrame(
        FrameType::kRpc, std::move(transfer.block), transfer.rts.header_size,
        transfer.dropped_payload, transfer.drop_reason));
  }
  if (!torn_down_) GrantWaiting();  // Memory came free.
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

// ------------------------------------------------------------------- send --

Status RdmaConnection::Send(OutgoingFrame frame) {
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
  // A reply to the last message polled (loop thread), small, with a credit
  // and a send slot to spare and nothing queued ahead of it, is posted from
  // here without passing through the queue and Flush.
  if (delivering_last == this && CanPostSmallAtOnce(bytes) &&
      queued_frames_.load(std::memory_order_acquire) == 0) {
    // No lock: only atomics and loop-thread state are read, so the reply
    // does not pay the queue lock's two atomic operations.
    if (closing_.load(std::memory_order_acquire)) return ClosedError(peer_);
    // The receives freed so far are re-posted after it, when the drain
    // ends: off the reply's path. Their credits ride on the next frame.
    PostSmall(frame, frame.type, {});
    Bump(stats_.frames_written_directly);
    Post();
    return Status();
  }
  bool post = false;
  {
    std::lock_guard lock(mu_);
    if (closing_) return ClosedError(peer_);
    if (Status room = CheckQueueRoom(queued_bytes_, bytes,
                                     options_.max_queued_bytes, peer_);
        !room.ok()) {
      return room;
    }
    queued_bytes_ += bytes;
    queue_.push_back(std::move(frame));
    queued_frames_.store(queue_.size(), std::memory_order_relaxed);
    post = !flush_pending_.exchange(true, std::memory_order_relaxed);
  }
  if (post && delivering_last == this) {
    FlushReposts();  // Their credits ride on this frame.
    Flush();
    return Status();
  }
  if (post) {
    asio::post(context_,
               Pooled([self = shared_from_this()] { self->Flush(); }));
  }
  return Status();
}

bool RdmaConnection::CanPostSmallAtOnce(uint64_t frame_bytes) const {
  // The conditions under which Flush would post it first, as its own SEND.
  return established_ && !torn_down_ && control_queue_.empty() &&
         credits_ >= 2 && SendSlotFree() && outgoing_.empty() &&
         frame_bytes <= SmallLimit();
}

void RdmaConnection::Flush() {
  {
    std::lock_guard lock(mu_);
    flush_pending_.store(false, std::memory_order_relaxed);
  }
  if (torn_down_ || !established_) return;
  // Grants first: the peer's large frame waits on them.
  while (!control_queue_.empty() && credits_ >= 1 && SendSlotFree()) {
    PostControl(control_queue_.front());
    control_queue_.pop_front();
  }
  if (!outgoing_.empty()) PostWrites();  // Large frames only: no call else.
  const size_t small_limit = SmallLimit();
  {
    std::lock_guard lock(mu_);
    while (!queue_.empty()) {
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
      queued_bytes_ -= total;  // Leaves the queue now, one way or the other.
      if (small) {
        PostSmall(frame, frame.type, {});
        queue_.pop_front();
        continue;
      }
      if (!outgoing_.empty()) Bump(stats_.pipelined_transfers);
      OutgoingTransfer transfer;
      transfer.id = next_transfer_id_++;
      transfer.frame = std::move(frame);
      // Its write plan will point into the header while outgoing_ may grow
      // and move the transfer.
      transfer.frame.header.MoveOutOfLine();
      queue_.pop_front();
      ControlMessage rts;
      rts.kind = ControlKind::kRts;
      rts.transfer = transfer.id;
      rts.header_size = static_cast<uint32_t>(transfer.frame.header.size());
      rts.payload_size = static_cast<uint32_t>(transfer.frame.payload_size());
      outgoing_.push_back(std::move(transfer));
      PostControl(rts);
    }
    queued_frames_.store(queue_.size(), std::memory_order_relaxed);
  }
  // Return credits explicitly when no traffic has carried them back.
  if (credits_to_return_ >= kRdmaReceiveDepth / 2 && credits_ >= 1 &&
      SendSlotFree()) {
    ControlMessage credit;
    credit.kind = ControlKind::kCredit;
    PostControl(credit);
    Bump(stats_.credit_messages);
  }
  Post();
}

void RdmaConnection::PostControl(const ControlMessage& message) {
  OutgoingFrame frame;
  frame.type = FrameType::kControl;
  PostSmall(frame, FrameType::kControl, std::as_bytes(std::span(&message, 1)));
}

void RdmaConnection::PostSmall(const OutgoingFrame& frame, FrameType type,
                               std::span<const std::byte> body) {
  const uint64_t seq = ++posted_;
  const size_t index = send_wrs_.size();  // In the chain.
  const uint32_t header_size =
      static_cast<uint32_t>(body.empty() ? frame.header.size() : body.size());
  const auto payload_size =
      static_cast<uint32_t>(body.empty() ? frame.payload_size() : 0);
  // The device copies an inline send into its work request when it is
  // posted, so it is staged in a dense area (entry `index`, free again once
  // the chain is posted) rather than in its ring slot. The slots lie 16 KiB
  // apart: writing to another one each time misses the TLB under emulation
  // and lands in one cache set on hardware.
  const bool inline_send =
      uint64_t{kFramePrefixSize} + header_size + payload_size <= max_inline_;
  std::byte* slot = inline_send
                        ? inline_staging_.data() + index * max_inline_
                        : send_ring_->data() + size_t(seq % kRdmaSendDepth) *
                                                   kRdmaReceiveBufferSize;
  const auto credits =
      static_cast<uint16_t>(std::min<uint32_t>(credits_to_return_, 0xffff));
  credits_to_return_ -= credits;
  const EncodedPrefix prefix =
      EncodeFramePrefix({type, credits, header_size, payload_size});
  std::byte* out = slot;
  std::memcpy(out, prefix.data(), prefix.size());
  out += prefix.size();
  if (!body.empty()) {
    std::memcpy(out, body.data(), body.size());
    out += body.size();
  } else {
    if (!frame.header.empty()) {
      std::memcpy(out, frame.header.data(), frame.header.size());
      out += frame.header.size();
    }
    for (size_t i = 0; i < frame.payload_slices; ++i) {
      std::memcpy(out, frame.payload[i].data(), frame.payload[i].size());
      out += frame.payload[i].size();
    }
  }
  const auto length = static_cast<uint32_t>(out - slot);
  ibv_sge& sge = send_sges_[index * tunables::kRdmaMaxSendSge];
  sge.addr = reinterpret_cast<uint64_t>(slot);
  sge.length = length;
  sge.lkey = send_ring_->lkey();  // Not checked for an inline send.
  ibv_send_wr wr{};
  wr.wr_id = WrId(kSendTag, seq);
  wr.opcode = IBV_WR_SEND;
  wr.num_sge = 1;
  if (inline_send) {
    wr.send_flags |= IBV_SEND_INLINE;
    Bump(stats_.inline_sends);
  }
  if (++unsignaled_ >= tunables::kRdmaSignalEvery) {
    wr.send_flags |= IBV_SEND_SIGNALED;
    unsignaled_ = 0;
  }
  send_wrs_.push_back(wr);
  --credits_;
  Bump(stats_.bytes_sent, length);
  if (type == FrameType::kRpc) Bump(stats_.frames_sent);
}

bool RdmaConnection::WritesPending() {
  // Transfers post their WRITEs in order: if the newest has posted all of
  // its own, so has every one before it.
  if (outgoing_.empty()) return false;
  const OutgoingTransfer& newest = outgoing_.back();
  return !newest.granted || newest.next_write < newest.plan.writes.size();
}

void RdmaConnection::PostWrites() {
  for (size_t i = 0; i < outgoing_.size(); ++i) {
    OutgoingTransfer& transfer = outgoing_[i];
    if (!transfer.granted) return;
    while (transfer.next_write < transfer.plan.writes.size()) {
      if (!PostWrite(transfer)) return;
    }
  }
}

void RdmaConnection::StartWrites(OutgoingTransfer& transfer) {
  std::array<WriteSource, 1 + tunables::kMaxPayloadSlices> sources;
  size_t count = 0;
  sources[count++] = {transfer.frame.header.span(), std::nullopt};
  const uint64_t registrations_before = registrations_->registrations();
  for (size_t i = 0;
       !transfer.grant.dropped && i < transfer.frame.payload_slices; ++i) {
    const Buffer& slice = transfer.frame.payload[i];
    WriteSource& source = sources[count++];
    source.bytes = slice.span();
    auto registration = MemoryRegistration::Find(slice.span());
    if (!registration) continue;  // Staged: copied through the bounce pool.
    source.lkey = registrations_->Lkey(*registration);
    if (!source.lkey) {
      Log().warn(
          "{}: ibv_reg_mr of a {}-byte registration failed ({}); "
          "copying its payload instead",
          peer_, registration->size(), std::strerror(errno));
      continue;
    }
    transfer.pins.push_back(std::move(registration));
  }
  Bump(stats_.registrations,
       registrations_->registrations() - registrations_before);
  transfer.plan =
      PlanWrites(std::span(sources.data(), count), tunables::kRdmaMaxSendSge,
                 tunables::kRdmaBounceChunkSize, tunables::kRdmaMaxWriteSize);
}

bool RdmaConnection::PostWrite(OutgoingTransfer& transfer) {
  const PlannedWrite& write = transfer.plan.writes[transfer.next_write];
  const bool last = transfer.next_write + 1 == transfer.plan.writes.size();
  if (!SendSlotFree()) return false;
  // Only the last WRITE carries an immediate and so consumes a receive.
  if (last && credits_ < 1) {
    Bump(stats_.credit_stalls);
    return false;
  }
  const uint64_t seq = posted_ + 1;
  std::byte* staging = nullptr;
  uint32_t staging_lkey = 0;
  bool chunk = false;
  if (write.staged_bytes > 0) {
    if (write.staged_bytes <= kRdmaReceiveBufferSize) {
      // This work request's own send-ring slot is free (SendSlotFree).
      staging = send_ring_->data() +
                size_t(seq % kRdmaSendDepth) * kRdmaReceiveBufferSize;
      staging_lkey = send_ring_->lkey();
    } else {
      staging = AcquireBounceChunk(seq);
      if (staging == nullptr) return false;  // Wait for a WRITE to complete.
      staging_lkey = bounce_pool_->lkey();
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
  if (last) {
    wr.wr_id = WrId(kWriteTag, seq);
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data = htonl(transfer.id);
    wr.send_flags = IBV_SEND_SIGNALED;  // Its completion frees the buffers.
    unsignaled_ = 0;
    --credits_;
    transfer.last_seq = seq;
  } else {
    wr.wr_id = WrId(kSendTag, seq);
    wr.opcode = IBV_WR_RDMA_WRITE;
    if (chunk || ++unsignaled_ >= tunables::kRdmaSignalEvery) {
      wr.send_flags = IBV_SEND_SIGNALED;  // A chunk is free once it is done.
      unsignaled_ = 0;
    }
  }
  send_wrs_.push_back(wr);
  transfer.remote_offset += write.length;
  ++transfer.next_write;
  Bump(stats_.bytes_sent, write.length);
  return true;
}

std::byte* RdmaConnection::AcquireBounceChunk(uint64_t seq) {
  if (!bounce_pool_) {
    auto pool = RegisteredMemory::Allocate(
        pd_.get(),
        size_t{tunables::kRdmaBounceChunks} * tunables::kRdmaBounceChunkSize,
        IBV_ACCESS_LOCAL_WRITE);
    if (!pool.ok()) {
      CloseNow(pool.status());
      return nullptr;
    }
    bounce_pool_ = std::move(*pool);
    bounce_chunks_.resize(tunables::kRdmaBounceChunks);
  }
  for (size_t i = 0; i < bounce_chunks_.size(); ++i) {
    if (bounce_chunks_[i].busy) continue;
    bounce_chunks_[i] = {true, seq};
    return bounce_pool_->data() + i * size_t{tunables::kRdmaBounceChunkSize};
  }
  return nullptr;
}

void RdmaConnection::ReleaseBounceChunks(uint64_t completed) {
  for (BounceChunk& chunk : bounce_chunks_) {
    if (chunk.busy && chunk.seq <= completed) chunk.busy = false;
  }
}

void RdmaConnection::Post() {
  if (send_wrs_.empty() || torn_down_) return;
  // The last request of every chain is signaled, so completed_ always
  // catches up with posted_ (a graceful close waits for exactly that).
  if (!(send_wrs_.back().send_flags & IBV_SEND_SIGNALED)) {
    send_wrs_.back().send_flags |= IBV_SEND_SIGNALED;
    unsignaled_ = 0;
  }
  for (size_t i = 0; i < send_wrs_.size(); ++i) {
    send_wrs_[i].sg_list = &send_sges_[i * tunables::kRdmaMaxSendSge];
    send_wrs_[i].next = i + 1 < send_wrs_.size() ? &send_wrs_[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  RDMARPC_TRACE(TraceSide(), "post_start");
  const int error = ibv_post_send(id_->qp, send_wrs_.data(), &bad);
  RDMARPC_TRACE(TraceSide(), "post_end");
  send_wrs_.clear();
  if (error != 0) CloseNow(ErrnoStatus("ibv_post_send", error));
}

// ------------------------------------------------------------------ close --

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

void RdmaConnection::CloseNow(const Status& reason) {
  if (torn_down_) return;
  torn_down_ = true;
  close_reason_ = reason;
  {
    std::lock_guard lock(mu_);
    closing_ = true;
    queue_.clear();
    queued_bytes_ = 0;
    queued_frames_.store(0, std::memory_order_relaxed);
  }
  close_timer_.cancel();
  // Transfers with nothing posted yet (no grant came) let go of the callers'
  // buffers and registrations now; one under way keeps them until the QP is
  // destroyed, since its WRITEs may still be reading them.
  while (!outgoing_.empty() && outgoing_.back().next_write == 0) {
    outgoing_.pop_back();
  }
  if (id_ && established_) rdma_disconnect(id_.get());
  if (auto done = std::move(on_established_)) done(reason);
  boost::system::error_code ignored;
  if (cq_fd_.is_open()) cq_fd_.cancel(ignored);
  if (cm_fd_.is_open()) cm_fd_.cancel(ignored);
  NotifyClosed(std::move(observer_), reason, in_observer_,
               context_.get_executor());
}

}  // namespace rdmarpc::transport::rdma
