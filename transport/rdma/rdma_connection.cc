// RdmaConnection: connection setup (rdma_cm events, resources, the handshake).
#include "transport/rdma/rdma_connection.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "transport/peer_budget.h"
#include "transport/rdma/device_info.h"
#include "transport/rdma/loop_state.h"

namespace rdmarpc::transport::rdma {

namespace asio = boost::asio;
using tunables::kRdmaSendDepth;

namespace {

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

// For rdma_connect and rdma_accept alike (accept ignores retry_count: the
// connecting side's, carried in its request, governs both QPs). `local`
// travels as private data and must outlive the call. `depth` is the READ
// depth each way (ReadDepth).
rdma_conn_param ConnParam(const ConnParams& local, uint8_t retry_count,
                          ReadDepth depth) {
  rdma_conn_param param{};
  param.private_data = &local;
  param.private_data_len = sizeof(local);
  param.responder_resources = depth.responder;
  param.initiator_depth = depth.initiator;
  param.retry_count = std::min<uint8_t>(retry_count, 7);  // 3 bits.
  param.rnr_retry_count = tunables::kRdmaRnrRetry;
  return param;
}

}  // namespace

RdmaConnection::RdmaConnection(asio::io_context& context,
                               const TransportOptions& options)
    : context_(context),
      options_(options),
      close_timer_(context),
      keepalive_timer_(context),
      keepalive_(options.keepalive_interval, options.keepalive_timeout,
                 options.min_ping_interval, options.frame_timeout),
      port_down_timer_(context) {}

RdmaConnection::~RdmaConnection() {
  // Never closed (its loop ended first): what its queue still counts in the
  // peer memory budget is given back, as CloseNow would.
  if (!torn_down_) {
    ReleasePeerBytes(queued_bytes_ + queue_.size() * sizeof(OutgoingFrame));
  }
  ReleaseDevice();
}

uint64_t RdmaConnection::NextId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

asio::any_io_executor RdmaConnection::executor() const {
  return context_.get_executor();
}

Status RdmaConnection::OpenEventChannel() {
  auto channel = CmChannel::For(context_);
  if (!channel.ok()) return channel.status();
  cm_ = std::move(*channel);
  return Status();
}

std::shared_ptr<RdmaConnection> RdmaConnection::Connect(
    asio::io_context& context, const std::string& host, uint16_t port,
    const TransportOptions& options, const RailHello& rail,
    EstablishedHandler on_established) {
  auto self = std::make_shared<RdmaConnection>(context, options);
  self->on_established_ = std::move(on_established);
  LoopState::Of(context).Hold(self);
  self->rail_ = rail;
  self->host_ = host;
  self->port_ = port;
  self->peer_ = "rdma://" + host + ":" + std::to_string(port);
  asio::post(context, [self] {
    Status status = self->OpenEventChannel();
    rdma_cm_id* raw = nullptr;
    if (status.ok() &&
        rdma_create_id(self->cm_->get(), &raw, self.get(), RDMA_PS_TCP) != 0) {
      status = ErrnoStatus("rdma_create_id", errno);
    }
    self->id_.reset(raw);
    if (raw != nullptr) self->cm_->Register(raw, self, self->id_in_group_);
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
    // The device, port and GID asked for: their address is the source.
    sockaddr_in source{};
    sockaddr* from = nullptr;
    if (status.ok() && !self->options_.rdma_device.empty()) {
      StatusOr<ChosenGid> gid =
          ChooseGid(self->options_.rdma_device, self->options_.rdma_port_num,
                    self->options_.rdma_gid_index);
      if (!gid.ok()) {
        status = Status(gid.status().code(), "connect to " + self->peer_ +
                                                 ": " + gid.status().message());
      } else {
        source.sin_family = AF_INET;
        inet_pton(AF_INET, gid->address.c_str(), &source.sin_addr);
        from = reinterpret_cast<sockaddr*>(&source);
      }
    }
    if (status.ok()) status = self->SetTos();
    if (status.ok()) {
      if (rdma_resolve_addr(self->id_.get(), from, resolved->ai_dst_addr,
                            tunables::kRdmaCmTimeoutMs) != 0) {
        status = ErrnoStatus("rdma_resolve_addr " + self->peer_, errno);
      }
    }
    if (resolved != nullptr) rdma_freeaddrinfo(resolved);
    if (!status.ok()) return self->Established(status);
  });
  return self;
}

std::shared_ptr<RdmaConnection> RdmaConnection::Accept(
    asio::io_context& context, CmId id, const ConnParams& peer,
    ReadDepth requested_depth, const TransportOptions& options,
    EstablishedHandler on_established) {
  auto self = std::make_shared<RdmaConnection>(context, options);
  self->on_established_ = std::move(on_established);
  LoopState::Of(context).Hold(self);
  self->AdoptPeerParams(peer);
  self->peer_ = "rdma://" + AddressString(rdma_get_peer_addr(id.get()));
  auto shared_id = std::make_shared<CmId>(std::move(id));
  asio::post(context, [self, shared_id, requested_depth] {
    Status status = self->OpenEventChannel();
    if (status.ok() &&
        rdma_migrate_id(shared_id->get(), self->cm_->get()) != 0) {
      status = ErrnoStatus("rdma_migrate_id", errno);
    }
    self->id_ = std::move(*shared_id);
    self->may_park_ = true;
    if (status.ok()) {
      self->cm_->Register(self->id_.get(), self, self->id_in_group_);
      self->id_->context = self.get();
      status = self->CreateResources();
    }
    if (status.ok()) {
      ConnParams local = LocalConnParams(self->options_.tls.has_value());
      local.receive_buffer_size = self->group_->receive_buffer_size();
      rdma_conn_param param =
          ConnParam(local, self->options_.rdma_retry_count,
                    AcceptedReadDepth(self->id_->verbs, requested_depth));
      if (rdma_accept(self->id_.get(), &param) != 0) {
        status = ErrnoStatus("rdma_accept", errno);
      }
    } else if (status.code() == StatusCode::kResourceExhausted && self->id_) {
      // The peer learns why, not just that it was rejected.
      const ConnParams refusal = RefusalConnParams();
      rdma_reject(self->id_.get(), &refusal, sizeof(refusal));
    }
    if (!status.ok()) return self->Established(status);
  });
  return self;
}

void RdmaConnection::AdoptPeerParams(const ConnParams& params) {
  peer_params_ = params;
  credits_ = params.initial_credits;
  max_transfers_ =
      std::min(OpenGrantsAllowed(params), tunables::kRdmaMaxOpenGrants);
}

Status RdmaConnection::CreateResources() {
  ibv_context* verbs = id_->verbs;
  if (verbs == nullptr) {
    return Status(StatusCode::kUnavailable,
                  "rdma_cm id for " + peer_ + " has no device");
  }
  device_hold_ = DeviceHold(verbs);
  device_events_ = DeviceEventSubscription(
      verbs, [weak = weak_from_this(), &context = context_,
              port = id_->port_num](const DeviceEvent& event) {
        if (event.IsPortEvent() && event.port != port) return;
        // On the loop, where the connection lives (and may be gone).
        asio::post(context, [weak, event] {
          if (auto self = weak.lock()) self->OnDeviceEvent(event);
        });
      });
  // The QP's local ACK timeout (a retransmission after 4.096 us << it, and
  // retry_count of those before the QP gives up): rdma_cm's default for
  // RoCE (measured here: 9 of 13 calls OK in 15 s at 1% loss, against 25 of
  // 25 with 16) costs a lossy link about a second per lost tail packet.
  uint8_t ack_timeout = options_.rdma_ack_timeout;
  if (rdma_set_option(id_.get(), RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
                      &ack_timeout, sizeof(ack_timeout)) != 0) {
    Log().debug("{}: cannot set the ACK timeout: {}", peer_,
                std::strerror(errno));
  }
  auto domain = DeviceDomain::For(verbs);
  if (!domain.ok()) return domain.status();
  domain_ = std::move(*domain);
  // Grants from the pool and bulk loans bind and invalidate windows.
  local_ops_need_idle_ = domain_->local_ops_need_idle_send_queue();
  auto group = CompletionGroup::Join(context_, domain_, options_);
  if (!group.ok()) return group.status();
  group_ = std::move(*group);
  if (options_.poll_mode != PollMode::kEvent) {
    flush_wanted_ = group_->flush_wanted();
  }
  // The peer's initial credits: receives of the group's pool, reserved now.
  if (Status reserved = group_->Reserve(tunables::kRdmaInitialCredits);
      !reserved.ok()) {
    return Status(reserved.code(), "no receive buffers for " + peer_ + ": " +
                                       reserved.message());
  }
  lent_ = peer_holds_ = tunables::kRdmaInitialCredits;
  ibv_qp_init_attr attr{};
  attr.send_cq = group_->cq();
  attr.recv_cq = group_->cq();
  attr.srq = group_->srq();
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = kRdmaSendDepth;
  attr.cap.max_send_sge = tunables::kRdmaMaxSendSge;
  attr.cap.max_inline_data = tunables::kRdmaMaxInline;
  if (rdma_create_qp(id_.get(), domain_->pd(), &attr) != 0) {
    attr.cap.max_inline_data = 0;  // The device may not inline at all.
    if (rdma_create_qp(id_.get(), domain_->pd(), &attr) != 0) {
      return ErrnoStatus("rdma_create_qp", errno);
    }
  }
  qp_num_ = id_->qp->qp_num;
  group_->Attach(qp_num_, weak_from_this(), id_in_group_);
  attached_ = true;
  // A device may grant more than asked; the staging area holds what we asked.
  max_inline_ = std::min(attr.cap.max_inline_data, tunables::kRdmaMaxInline);
  inline_staging_.resize(size_t{kRdmaSendDepth} * max_inline_);
  send_wrs_.resize(kRdmaSendDepth);
  send_sges_.resize(size_t{kRdmaSendDepth} * tunables::kRdmaMaxSendSge);
  send_wrs_.clear();
  return torn_down_ ? close_reason_ : Status();
}

void RdmaConnection::OnCmEvent(rdma_cm_event* event) {
  Log().debug("{}: {}", peer_, rdma_event_str(event->event));
  const rdma_cm_event_type type = event->event;
  const int status = event->status;
  // The listener's parameters: with its accept, or with its reject.
  std::optional<StatusOr<ConnParams>> params;
  bool refused = false;  // For lack of resources.
  if (!host_.empty() &&
      (type == RDMA_CM_EVENT_ESTABLISHED || type == RDMA_CM_EVENT_REJECTED)) {
    const std::span private_data(
        static_cast<const std::byte*>(event->param.conn.private_data),
        event->param.conn.private_data_len);
    params = CheckConnParams(private_data);
    ConnParams raw;
    refused =
        type == RDMA_CM_EVENT_REJECTED && private_data.size() >= sizeof(raw) &&
        (std::memcpy(&raw, private_data.data(), sizeof(raw)), IsRefusal(raw));
  }
  rdma_ack_cm_event(event);
  const std::string what = rdma_event_str(type);
  // Closed: only a device removal still matters (the id holds the device).
  if (torn_down_ && type != RDMA_CM_EVENT_DEVICE_REMOVAL) return;

  switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (rdma_resolve_route(id_.get(), tunables::kRdmaCmTimeoutMs) != 0) {
        Established(ErrnoStatus("rdma_resolve_route " + peer_, errno));
      }
      return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      return OnRouteResolved();
    case RDMA_CM_EVENT_ESTABLISHED:
      return OnEstablished(params);
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      return OnDeviceRemoval();
    case RDMA_CM_EVENT_DISCONNECTED:
      if (!established_) {
        return Established(Status(StatusCode::kUnavailable,
                                  "connect to " + peer_ + ": " + what));
      }
      Log().info("{}: {}", peer_, what);
      // Frames the peer sent before it disconnected are delivered first.
      if (group_) group_->DrainNow();
      if (torn_down_) return;
      return CloseNow(
          Status(StatusCode::kUnavailable, "peer " + peer_ + " disconnected"));
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      return;
    default:  // REJECTED, UNREACHABLE, ADDR_ERROR, ROUTE_ERROR, ...
      return OnCmFailure(what, status, refused, params);
  }
}

void RdmaConnection::OnRouteResolved() {
  // A port known to be down fails the connect now, not at its timeout.
  if (const std::string down = PortDownReason(id_->verbs, id_->port_num);
      !down.empty()) {
    return Established(
        Status(StatusCode::kUnavailable, "connect to " + peer_ + ": " + down));
  }
  Status created = CreateResources();
  if (!created.ok()) return Established(created);
  ConnParams local = LocalConnParams(options_.tls.has_value());
  local.receive_buffer_size = group_->receive_buffer_size();
  local.session = rail_.session;
  if (local.is_rail()) {
    local.rail = rail_.rail;
    local.rail_flags = rail_.primary ? kRailPrimary : 0;
    local.rail_epoch = rail_.epoch;
  }
  rdma_conn_param param =
      ConnParam(local, options_.rdma_retry_count, OfferedReadDepth(id_->verbs));
  may_park_ = true;
  if (rdma_connect(id_.get(), &param) != 0) {
    return Established(ErrnoStatus("rdma_connect " + peer_, errno));
  }
  AwaitAccept();
}

void RdmaConnection::AwaitAccept() {
  // A listener that has not accepted within keepalive_timeout is taken for
  // hung, as a silent open connection is (on TCP: a server that sends no
  // HELLO): its kernel still takes the request. Never before rdma_cm has
  // had the time to resend a lost request, and connect_timeout still
  // bounds the whole connect.
  if (options_.keepalive_interval.count() == 0 ||
      options_.keepalive_timeout.count() == 0) {
    return;
  }
  const auto wait =
      std::max(options_.keepalive_timeout, tunables::kRdmaCmResendWindow);
  close_timer_.expires_after(wait);
  close_timer_.async_wait([weak = weak_from_this(),
                           wait](const boost::system::error_code& error) {
    const auto self = weak.lock();
    if (error || !self || self->established_ || self->torn_down_) return;
    self->Established(Status(
        StatusCode::kUnavailable,
        "connect to " + self->peer_ + ": the server did not accept within " +
            std::to_string(wait.count()) +
            " ms (keepalive_timeout): it is hung or not accepting"));
  });
}

void RdmaConnection::OnEstablished(
    const std::optional<StatusOr<ConnParams>>& params) {
  if (params) {  // Active side: the server's parameters.
    if (!params->ok()) {
      return Established(
          Status(params->status().code(),
                 "connect to " + peer_ + ": " + params->status().message()));
    }
    AdoptPeerParams(**params);
  }
  if (Status path = CheckPath(); !path.ok()) {
    Log().warn("{}: closing: {}", peer_, path.message());
    return Established(path);
  }
  established_ = true;
  close_timer_.cancel();                 // AwaitAccept's.
  if (options_.tls) return StartAuth();  // Handed over once authenticated.
  Established(Status());
}

void RdmaConnection::OnDeviceRemoval() {
  // The removal waits for the id: it goes now, port down or not.
  may_park_ = false;
  DeviceHold::MarkRemoved(id_->verbs);
  const std::string device = DeviceName(id_->verbs);
  Log().warn("{}: RDMA device {} is being removed: closing", peer_, device);
  // CloseNow also answers a connect still under way, and releases the
  // device's resources.
  CloseNow(Lost("RDMA device " + device + " was removed"));
}

void RdmaConnection::OnCmFailure(
    const std::string& what, int status, bool refused,
    const std::optional<StatusOr<ConnParams>>& params) {
  if (!established_ && refused) {
    return Established(
        Status(StatusCode::kResourceExhausted,
               "connect to " + peer_ +
                   " refused: the server cannot register memory for another "
                   "connection (its log names the limit)"));
  }
  const uint16_t tls = options_.tls ? kConnTls : 0;
  if (!established_ && params && params->ok() &&
      ((**params).flags & kConnTls) != tls) {
    // Rejected for TLS on one side only (the listener's flags say which).
    return Established(Status(
        StatusCode::kUnavailable,
        "connect to " + peer_ + " refused: " +
            (tls ? std::string("the server does not use TLS, and this side "
                               "requires it (TransportOptions::tls)")
                 : std::string("the server requires TLS: configure "
                               "TransportOptions::tls (--tls-ca)"))));
  }
  if (!established_ && params &&
      params->status().code() == StatusCode::kUnimplemented) {
    // Rejected by rdmarpc of another version, which sent its own.
    return Established(Status(
        StatusCode::kUnimplemented,
        "connect to " + peer_ + " refused: " + params->status().message()));
  }
  if (!established_) {
    return Established(Status(StatusCode::kUnavailable,
                              "connect to " + peer_ + " failed: " + what +
                                  " (status " + std::to_string(status) + ")"));
  }
  Log().warn("{}: unexpected rdma_cm event {}", peer_, what);
}

void RdmaConnection::Established(const Status& status) {
  // This call's reference, if the last.
  auto self = LoopState::Of(context_).Release(this);
  if (!status.ok()) CloseNow(status);
  if (auto done = std::move(on_established_)) done(status, shared_from_this());
}

void RdmaConnection::Start(std::shared_ptr<ConnectionObserver> observer) {
  asio::post(context_,
             [self = shared_from_this(), observer = std::move(observer)] {
               if (self->torn_down_) {
                 observer->OnClose(self->close_reason_);
                 return;
               }
               self->observer_ = observer;
               self->started_ = true;
               self->ArmKeepalive();
               self->ReplayHeld();  // What arrived before Start, in order.
               if (!self->torn_down_) self->Flush();
             });
}

void RdmaConnection::ArmKeepalive() {
  transport::ArmKeepalive(
      keepalive_timer_, keepalive_, stats_, peer_, shared_from_this(),
      [this] { return torn_down_; },
      [this]() -> std::optional<uint64_t> {  // The oldest transfer asked for.
        if (incoming_.empty()) return std::nullopt;
        return incoming_.front().rts.transfer;
      },
      [this] {
        GiveBackIdleCredits();
        ControlMessage ping;
        ping.kind = ControlKind::kPing;
        control_queue_.push_back(ping);
        Flush();
      },
      [this](const Status& dead) { CloseNow(dead); });
}

void RdmaConnection::GiveBackIdleCredits() {
  if (!outgoing_.empty() ||
      queued_frames_.load(std::memory_order_relaxed) > 0) {
    return;
  }
  if (!standing_grants_.empty()) {
    // The peer's blocks held for frames that did not come.
    ControlMessage release;
    release.kind = ControlKind::kRelease;
    release.transfer = standing_grants_.front().transfer;
    release.length = static_cast<uint32_t>(standing_grants_.size());
    standing_grants_.clear();
    Bump(stats_.standing_grants_released, release.length);
    control_queue_.push_back(release);
  }
  const uint32_t keep = peer_params_.initial_credits;
  if (credits_ <= keep) return;
  ControlMessage give_back;
  give_back.kind = ControlKind::kGiveBack;
  give_back.length = credits_ - keep;
  // Spent now: nothing queued later may use them. The GIVE_BACK itself, and
  // the PING after it, use two of those kept (at least two), which come back
  // as any do.
  credits_ = keep;
  Bump(stats_.credits_given_back, give_back.length);
  control_queue_.push_back(give_back);
}

Status RdmaConnection::SetTos() {
  if (options_.rdma_tos < 0 || !id_) return Status();
  auto tos = static_cast<uint8_t>(options_.rdma_tos);
  if (rdma_set_option(id_.get(), RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos,
                      sizeof(tos)) != 0) {
    return ErrnoStatus("rdma_set_option(TOS) " + peer_, errno);
  }
  return Status();
}

StatusOr<RdmaConnection::Path> RdmaConnection::QueryPath() const {
  if (!id_ || id_->qp == nullptr) {
    return Status(StatusCode::kFailedPrecondition,
                  peer_ + " has no queue pair");
  }
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  if (ibv_query_qp(id_->qp, &attr,
                   IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT |
                       IBV_QP_RETRY_CNT | IBV_QP_PORT |
                       IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC,
                   &init) != 0) {
    return ErrnoStatus("ibv_query_qp " + peer_, errno);
  }
  Path path;
  path.device = DeviceName(id_->verbs);
  path.port = id_->port_num;
  path.gid_index = attr.ah_attr.grh.sgid_index;
  path.traffic_class = attr.ah_attr.grh.traffic_class;
  path.path_mtu = 128u << attr.path_mtu;  // IBV_MTU_256 is 1.
  path.ack_timeout = attr.timeout;
  path.retry_count = attr.retry_cnt;
  path.reads_issued = attr.max_rd_atomic;
  path.reads_served = attr.max_dest_rd_atomic;
  return path;
}

Status RdmaConnection::CheckPath() const {
  if (options_.rdma_device.empty()) return Status();
  StatusOr<Path> path = QueryPath();
  if (!path.ok()) return path.status();
  const std::string asked =
      options_.rdma_device + " port " + std::to_string(options_.rdma_port_num);
  if (path->device != options_.rdma_device ||
      path->port != options_.rdma_port_num) {
    return Status(StatusCode::kUnavailable,
                  "the connection to " + peer_ + " runs on " + path->device +
                      " port " + std::to_string(path->port) + ", not " + asked +
                      " (the route to the peer leaves through it)");
  }
  if (options_.rdma_gid_index >= 0 &&
      path->gid_index != static_cast<uint32_t>(options_.rdma_gid_index)) {
    return Status(
        StatusCode::kUnavailable,
        "rdma_cm chose GID " + std::to_string(path->gid_index) + " of " +
            asked + " for the connection to " + peer_ + ", not GID " +
            std::to_string(options_.rdma_gid_index) +
            " (same address, another RoCE type: rdma_cm uses its default "
            "RoCE mode, /sys/kernel/config/rdma_cm/" +
            options_.rdma_device + "/ports/" +
            std::to_string(options_.rdma_port_num) + "/default_roce_mode)");
  }
  return Status();
}

}  // namespace rdmarpc::transport::rdma
