// A hostile raw-verbs peer for hostile_peer_test: raw librdmacm and
// libibverbs speaking the RDMA transport's protocol
// (transport/rdma/protocol.h, transport/frame.h) exactly as a legitimate
// RdmaConnection does, with a method for each way the test breaks it.
#ifndef RDMARPC_TESTS_HOSTILE_PEER_H_
#define RDMARPC_TESTS_HOSTILE_PEER_H_

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <bit>
#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "rdmarpc/channel.h"
#include "rdmarpc/server.h"
#include "rdmarpc/tunables.h"
#include "rpc/wire/call_header.h"
#include "rpc/wire/wire_codec.h"
#include "tests/support/test_support.h"
#include "transport/frame.h"
#include "transport/rdma/completion_group.h"
#include "transport/rdma/protocol.h"
#include "transport/rdma/verbs.h"

namespace rdmarpc::hostile {

using testing::LogCapture;
using testing::WaitFor;
using transport::EncodeFramePrefix;
using transport::FrameType;
using transport::rdma::CmId;
using transport::rdma::CompletionQueue;
using transport::rdma::ConnParams;
using transport::rdma::ControlKind;
using transport::rdma::ControlMessage;
using transport::rdma::EventChannel;
using transport::rdma::ProtectionDomain;
using Bytes = std::vector<std::byte>;

// The VM is emulated and slow: every wait is generous.
constexpr auto kWait = std::chrono::seconds(30);

inline std::string WcName(ibv_wc_status status) {
  return ibv_wc_status_str(status);
}
inline const std::string kTimedOut = "no completion within the timeout";
// The server disconnected before this peer's work request completed. An RC
// responder generates the receive completion before it sends the ACK, so a
// server that closes as soon as it reads a message may destroy its queue pair
// with the ACK unsent; the SEND is then retried into a dead queue pair and
// completes (with an error) only after every retry has timed out.
inline const std::string kClosedFirst = "the server disconnected first";
inline const std::string kSuccess = ibv_wc_status_str(IBV_WC_SUCCESS);

// The peer's own memory is registered directly, not through rdmarpc's
// RegisterRegion: LiveRegisteredBytes() then counts the server's alone.
struct RawMrDeleter {
  void operator()(ibv_mr* mr) const { ibv_dereg_mr(mr); }
};
using RawMr = std::unique_ptr<ibv_mr, RawMrDeleter>;

struct LocalMemory {
  LocalMemory(ibv_pd* pd, size_t size, int access = IBV_ACCESS_LOCAL_WRITE)
      : bytes(size) {
    mr.reset(ibv_reg_mr(pd, bytes.data(), size, access));
    REQUIRE(mr != nullptr);
  }
  uint64_t addr(size_t offset = 0) {
    return reinterpret_cast<uint64_t>(bytes.data() + offset);
  }
  Bytes bytes;
  RawMr mr;
};

// A frame's header and payload, contiguous: what a sender writes into a grant.
inline Bytes FrameBytes(const transport::OutgoingFrame& frame) {
  Bytes bytes(frame.header.span().begin(), frame.header.span().end());
  for (size_t i = 0; i < frame.payload_slices(); ++i) {
    const auto slice = frame.payload[i].span();
    bytes.insert(bytes.end(), slice.begin(), slice.end());
  }
  return bytes;
}

inline Bytes Pattern(size_t size, int seed) {
  Bytes out(size);
  for (size_t i = 0; i < size; ++i) out[i] = std::byte((i * 13 + seed) % 251);
  return out;
}

template <typename T>
std::span<const std::byte> AsBytes(const T& value) {
  return std::as_bytes(std::span(&value, 1));
}

// A CREDIT control frame returning no credits, as it goes on the wire.
inline Bytes CreditMessage() {
  ControlMessage credit;
  credit.kind = ControlKind::kCredit;
  const auto prefix =
      EncodeFramePrefix({FrameType::kControl, 0, sizeof(ControlMessage), 0});
  Bytes message(prefix.begin(), prefix.end());
  const auto body = AsBytes(credit);
  message.insert(message.end(), body.begin(), body.end());
  return message;
}

// A received SEND, split by its prefix.
struct Received {
  transport::FramePrefix prefix;
  Bytes header;
  Bytes payload;
};

// A new rdma_cm event channel, polled without blocking.
inline EventChannel NonBlockingEvents() {
  EventChannel events(rdma_create_event_channel());
  REQUIRE(events != nullptr);
  REQUIRE(transport::rdma::SetNonBlocking(events->fd).ok());
  return events;
}

// A raw rdma_cm listener on `ip` (a port the system picks): rdmarpc
// clients connect to it, and HostilePeer::Accept takes each connection.
class RawListener {
 public:
  explicit RawListener(const std::string& ip) : ip_(ip) {
    events_ = NonBlockingEvents();
    rdma_cm_id* raw = nullptr;
    REQUIRE(rdma_create_id(events_.get(), &raw, nullptr, RDMA_PS_TCP) == 0);
    id_.reset(raw);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    REQUIRE(inet_pton(AF_INET, ip.c_str(), &address.sin_addr) == 1);
    REQUIRE(rdma_bind_addr(id_.get(), reinterpret_cast<sockaddr*>(&address)) ==
            0);
    REQUIRE(rdma_listen(id_.get(), 8) == 0);
    port_ = ntohs(rdma_get_src_port(id_.get()));
  }

  std::string uri() const {
    return "rdma://" + ip_ + ":" + std::to_string(port_);
  }

  // The next connect request's id (the caller owns it) and the connecting
  // side's parameters.
  rdma_cm_id* WaitRequest(ConnParams& params) {
    const auto until = std::chrono::steady_clock::now() + kWait;
    for (;;) {
      rdma_cm_event* event = nullptr;
      if (rdma_get_cm_event(events_.get(), &event) == 0) {
        const rdma_cm_event_type type = event->event;
        rdma_cm_id* id = event->id;
        if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
          REQUIRE(event->param.conn.private_data_len >= sizeof(ConnParams));
          std::memcpy(&params, event->param.conn.private_data,
                      sizeof(ConnParams));
        }
        rdma_ack_cm_event(event);
        INFO("listener event " << rdma_event_str(type));
        REQUIRE(type == RDMA_CM_EVENT_CONNECT_REQUEST);
        return id;
      }
      REQUIRE(std::chrono::steady_clock::now() < until);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

 private:
  std::string ip_;
  uint16_t port_ = 0;
  EventChannel events_;
  CmId id_;
};

// One raw RC connection to the server, driven by hand. Completions and CM
// events are polled (busy, with a deadline), never waited for on a channel.
class HostilePeer {
 public:
  static constexpr uint32_t kReceiveDepth = tunables::kRdmaReceiveDepth;
  static constexpr uint32_t kBufferSize = tunables::kRdmaReceiveBufferSize;

  HostilePeer() = default;
  HostilePeer(const HostilePeer&) = delete;
  HostilePeer& operator=(const HostilePeer&) = delete;

  ~HostilePeer() {
    if (id_ && established_ && !disconnected_) rdma_disconnect(id_.get());
    // The QP goes before the CQ and the memory it may still touch.
    if (id_ && id_->qp != nullptr) rdma_destroy_qp(id_.get());
  }

  // Connects as a legitimate RdmaConnection does (rdma_connection.cc:
  // CreateResources, ConnParam, LocalParams): the same queue depths, receive
  // buffer size and private data, initiator_depth = responder_resources = 1,
  // retry_count 7, rnr_retry_count kRdmaRnrRetry. All receives are posted
  // before connecting: they are the server's credits.
  void Connect(const std::string& ip, uint16_t port) {
    events_ = NonBlockingEvents();
    rdma_cm_id* raw = nullptr;
    REQUIRE(rdma_create_id(events_.get(), &raw, nullptr, RDMA_PS_TCP) == 0);
    id_.reset(raw);
    sockaddr_in server{};
    server.sin_family = AF_INET;
    server.sin_port = htons(port);
    REQUIRE(inet_pton(AF_INET, ip.c_str(), &server.sin_addr) == 1);
    REQUIRE(rdma_resolve_addr(id_.get(), nullptr,
                              reinterpret_cast<sockaddr*>(&server),
                              tunables::kRdmaCmTimeoutMs) == 0);
    REQUIRE(WaitCmEvent() == RDMA_CM_EVENT_ADDR_RESOLVED);
    REQUIRE(rdma_resolve_route(id_.get(), tunables::kRdmaCmTimeoutMs) == 0);
    REQUIRE(WaitCmEvent() == RDMA_CM_EVENT_ROUTE_RESOLVED);

    CreateResources();
    ConnParams local = LocalParams();
    rdma_conn_param param = ConnParam(local);
    REQUIRE(rdma_connect(id_.get(), &param) == 0);
    Established("rdma_connect");

    const sockaddr* self = rdma_get_local_addr(id_.get());
    REQUIRE(self->sa_family == AF_INET);
    const auto* in = reinterpret_cast<const sockaddr_in*>(self);
    char host[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    name_ = std::string("rdma://") + host + ":" +
            std::to_string(ntohs(in->sin_port));
  }

  // Accepts the next connection `listener` is asked for (an rdmarpc client
  // connecting, which this peer then serves as a server would), on the same
  // terms as Connect; server_params() are then the client's.
  void Accept(RawListener& listener) {
    events_ = NonBlockingEvents();
    rdma_cm_id* raw = listener.WaitRequest(server_params_);
    // Its events come to this peer's channel from now on.
    REQUIRE(rdma_migrate_id(raw, events_.get()) == 0);
    id_.reset(raw);
    CreateResources();
    ConnParams local = LocalParams();
    rdma_conn_param param = ConnParam(local);
    REQUIRE(rdma_accept(id_.get(), &param) == 0);
    Established("rdma_accept");
    name_ = "raw listener";
  }

  // ConnParams::flags this peer announces (kConnTls: it will authenticate),
  // set before Connect or Accept.
  void set_conn_flags(uint16_t flags) { conn_flags_ = flags; }

  // The server's name for this connection in its logs.
  const std::string& name() const { return name_; }
  const ConnParams& server_params() const { return server_params_; }

  // SENDs `bytes` as they are, well formed or not; the SEND's completion.
  std::string PostSend(std::span<const std::byte> bytes) {
    REQUIRE(bytes.size() <= server_params_.receive_buffer_size);
    std::memcpy(send_buffer_->bytes.data(), bytes.data(), bytes.size());
    ibv_sge sge{send_buffer_->addr(), static_cast<uint32_t>(bytes.size()),
                send_buffer_->mr->lkey};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    TakeCredit();
    return PostAndWait(wr, sge);
  }

  // SENDs a frame: its prefix carries `credits`, by default the receives
  // this peer re-posted since its last message (as PostSmall does).
  std::string PostSendFrame(FrameType type, std::span<const std::byte> header,
                            std::span<const std::byte> payload = {},
                            std::optional<uint16_t> credits = std::nullopt) {
    // (Not value_or: its argument, ReturnCredits(), would be evaluated, and
    // the receives re-posted so far forgotten, when `credits` is given.)
    const uint16_t returned = credits ? *credits : ReturnCredits();
    server_credits_ += returned;
    const auto prefix =
        EncodeFramePrefix({type, returned, static_cast<uint32_t>(header.size()),
                           static_cast<uint32_t>(payload.size())});
    Bytes message(prefix.begin(), prefix.end());
    message.insert(message.end(), header.begin(), header.end());
    message.insert(message.end(), payload.begin(), payload.end());
    return PostSend(message);
  }

  std::string SendControl(const ControlMessage& message) {
    return PostSendFrame(FrameType::kControl, AsBytes(message));
  }

  // A CREDIT returning every receive re-posted since the last message.
  std::string SendCredit() {
    ControlMessage credit;
    credit.kind = ControlKind::kCredit;
    return SendControl(credit);
  }

  // A GRANT of this peer's memory for the transfer `rts` announced, its
  // prefix returning `credits` (the server writes the frame there).
  std::string SendGrant(const ControlMessage& rts, uint16_t credits) {
    const uint64_t length = uint64_t{rts.header_size} + rts.payload_size;
    if (!grant_memory_ || grant_memory_->bytes.size() < length) {
      grant_memory_.emplace(pd_.get(), length,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    }
    ControlMessage grant;
    grant.kind = ControlKind::kGrant;
    grant.transfer = rts.transfer;
    grant.addr = grant_memory_->addr();
    grant.rkey = grant_memory_->mr->rkey;
    grant.length = static_cast<uint32_t>(length);
    return PostSendFrame(FrameType::kControl, AsBytes(grant), {}, credits);
  }

  // WRITE WITH IMMEDIATE landings into memory this peer granted.
  uint32_t landings() {
    Poll();
    return landings_;
  }

  // The credits the server holds for this peer's receives, as this peer
  // counts them: what it was lent at the start, less each message received,
  // plus what this peer's frames returned (PostSendFrame).
  int64_t server_credits() const { return server_credits_; }
  // Messages that took the server's last credit and returned none: a
  // sender must keep its last credit for a message that returns some.
  uint32_t last_credit_spent_returning_none() const {
    return last_credit_returning_none_;
  }

  std::string SendRts(uint32_t transfer, uint32_t header_size,
                      uint32_t payload_size) {
    ControlMessage rts;
    rts.kind = ControlKind::kRts;
    rts.transfer = transfer;
    rts.header_size = header_size;
    rts.payload_size = payload_size;
    return SendControl(rts);
  }

  // The next frame the server SENDs (CREDIT messages, and standing grants,
  // are taken in passing).
  Received WaitForFrame() {
    for (;;) {
      const bool got = PollUntil([this] { return !messages_.empty(); });
      INFO("peer state: " << Describe());
      REQUIRE(got);
      if (std::optional<Received> frame = TakeMessage()) return *frame;
    }
  }

  // Standing grants the server offered and this peer has not used, oldest
  // first.
  std::deque<ControlMessage>& standing_grants() { return standing_grants_; }

  // The oldest standing grant the server offered and this peer has not
  // used, waiting for one (no other frame may come meanwhile).
  ControlMessage WaitForStandingGrant() {
    while (standing_grants_.empty()) {
      const bool got = PollUntil([this] { return !messages_.empty(); });
      INFO("peer state: " << Describe());
      REQUIRE(got);
      const std::optional<Received> frame = TakeMessage();
      INFO("a frame of type " << (frame ? int(frame->prefix.type) : -1));
      REQUIRE(!frame);
    }
    return standing_grants_.front();
  }

  // The oldest message received: nullopt if taken in passing (a CREDIT, a
  // standing grant).
  std::optional<Received> TakeMessage() {
    Bytes message = std::move(messages_.front());
    messages_.pop_front();
    REQUIRE(message.size() >= tunables::kFramePrefixSize);
    const auto decoded = transport::DecodeFramePrefix(
        std::span(message).first(tunables::kFramePrefixSize),
        tunables::kDefaultMaxPayloadSize);
    INFO(decoded.error.ToString());
    REQUIRE(decoded.verdict == transport::PrefixVerdict::kAccept);
    const transport::FramePrefix& prefix = decoded.prefix;
    REQUIRE(tunables::kFramePrefixSize + prefix.header_size +
                prefix.payload_size ==
            message.size());
    credits_ += prefix.credits;
    const auto header = message.begin() + tunables::kFramePrefixSize;
    Received frame{prefix, Bytes(header, header + prefix.header_size),
                   Bytes(header + prefix.header_size, message.end())};
    if (prefix.type == FrameType::kControl) {
      const auto control = transport::rdma::DecodeControl(frame.header);
      REQUIRE(control.has_value());
      if (control->kind == ControlKind::kCredit) return std::nullopt;
      if (control->kind == ControlKind::kGrant &&
          (control->flags & transport::rdma::kGrantStanding)) {
        standing_grants_.push_back(*control);  // Offered after a landing.
        return std::nullopt;
      }
    }
    return frame;
  }

  ControlMessage WaitForGrant() {
    const Received frame = WaitForFrame();
    REQUIRE(frame.prefix.type == FrameType::kControl);
    const auto control = transport::rdma::DecodeControl(frame.header);
    REQUIRE(control.has_value());
    REQUIRE(control->kind == ControlKind::kGrant);
    return *control;
  }

  // `count` CREDIT messages (returning nothing) as one chain of SENDs,
  // whatever this peer's credits; the last one's completion.
  std::string SendBurst(uint32_t count) {
    REQUIRE(count <= kSendDepth);
    const Bytes message = CreditMessage();
    std::memcpy(send_buffer_->bytes.data(), message.data(), message.size());
    ibv_sge sge{send_buffer_->addr(), static_cast<uint32_t>(message.size()),
                send_buffer_->mr->lkey};
    std::vector<ibv_send_wr> wrs(count);
    for (uint32_t i = 0; i < count; ++i) {
      wrs[i].opcode = IBV_WR_SEND;
      wrs[i].sg_list = &sge;
      wrs[i].num_sge = 1;
      wrs[i].next = i + 1 < count ? &wrs[i + 1] : nullptr;
    }
    // Only the last is signaled and waited for.
    wrs.back().next = nullptr;
    ibv_send_wr last = wrs.back();
    wrs.pop_back();
    if (!wrs.empty()) {
      wrs.back().next = nullptr;
      ibv_send_wr* bad = nullptr;
      const int error = ibv_post_send(id_->qp, wrs.data(), &bad);
      if (error != 0) return std::string("ibv_post_send: ") + strerror(error);
    }
    return PostAndWait(last, sge);
  }

  bool disconnected() {
    Poll();
    return disconnected_;
  }

  // Takes every message received so far (CREDITs counted, the rest
  // dropped: a peer that never grants a transfer or reads a frame); how
  // many frames were dropped.
  size_t DropAll() {
    Poll();
    size_t frames = 0;
    while (!messages_.empty()) {
      if (TakeMessage()) ++frames;
    }
    return frames;
  }
  int64_t credits() const { return credits_; }
  // Every message received so far but CREDITs and standing grants.
  std::vector<Received> TakeAll() {
    Poll();
    std::vector<Received> out;
    while (!messages_.empty()) {
      if (std::optional<Received> message = TakeMessage()) {
        out.push_back(std::move(*message));
      }
    }
    return out;
  }

  // RDMA WRITE of `data` to the server's addr/rkey; its completion.
  std::string Write(uint64_t addr, uint32_t rkey,
                    std::span<const std::byte> data) {
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_WRITE;
    return PostRdma(wr, addr, rkey, data);
  }

  // RDMA WRITE WITH IMMEDIATE: `imm` in network byte order, as PostWrite
  // does (the receiver reads ntohl(wc.imm_data)). Consumes a credit.
  std::string WriteWithImm(uint64_t addr, uint32_t rkey,
                           std::span<const std::byte> data, uint32_t imm) {
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data = htonl(imm);
    TakeCredit();
    return PostRdma(wr, addr, rkey, data);
  }

  // RDMA READ of `length` bytes at the server's addr/rkey; its completion.
  std::string Read(uint64_t addr, uint32_t rkey, uint32_t length) {
    REQUIRE(length <= read_buffer_->bytes.size());
    ibv_sge sge{read_buffer_->addr(), length, read_buffer_->mr->lkey};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_READ;
    wr.wr.rdma.remote_addr = addr;
    wr.wr.rdma.rkey = rkey;
    return PostAndWait(wr, sge);
  }

  // True once the server has disconnected (RDMA_CM_EVENT_DISCONNECTED).
  bool WaitClosed() {
    return PollUntil([this] { return disconnected_; });
  }

  // What this peer has seen, for failure messages.
  std::string Describe() const {
    std::string out = "cm events:";
    for (const std::string& event : cm_log_) out += " " + event;
    out += "; receive errors: " + std::to_string(receive_errors_);
    if (!first_receive_error_.empty()) {
      out += " (first: " + first_receive_error_ + ")";
    }
    out += "; messages pending: " + std::to_string(messages_.size());
    return out;
  }

 private:
  static constexpr uint32_t kSendDepth = 128;
  uint16_t conn_flags_ = 0;
  static constexpr uint64_t kRecvFlag = uint64_t{1} << 63;

  // Once rdma_connect or rdma_accept (`call`) is answered: the connection
  // is up, and the other side's parameters are a legitimate peer's.
  void Established(const char* call) {
    const rdma_cm_event_type established = WaitCmEvent();
    INFO(call << " answered " << rdma_event_str(established));
    REQUIRE(established == RDMA_CM_EVENT_ESTABLISHED);
    established_ = true;
    REQUIRE(server_params_.magic == transport::rdma::kConnMagic);
    REQUIRE(server_params_.version == transport::rdma::kConnVersion);
    REQUIRE(server_params_.initial_credits >= 2);
    REQUIRE(server_params_.initial_credits <= server_params_.receive_depth);
    credits_ = server_params_.initial_credits;
  }

  // The queue pair and what it uses (Connect's and Accept's), every
  // receive posted: they are the other side's credits.
  void CreateResources() {
    pd_.reset(ibv_alloc_pd(id_->verbs));
    REQUIRE(pd_ != nullptr);
    cq_.reset(ibv_create_cq(id_->verbs, kReceiveDepth + kSendDepth + 16,
                            nullptr, nullptr, 0));
    REQUIRE(cq_ != nullptr);
    ibv_qp_init_attr attr{};
    attr.send_cq = cq_.get();
    attr.recv_cq = cq_.get();
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = kSendDepth;
    attr.cap.max_recv_wr = kReceiveDepth;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    REQUIRE(rdma_create_qp(id_.get(), pd_.get(), &attr) == 0);

    receive_ring_.emplace(pd_.get(), size_t{kReceiveDepth} * kBufferSize);
    // Sources of SENDs and WRITEs (a whole grant of a few KiB fits), and the
    // destination of READs.
    send_buffer_.emplace(pd_.get(), 4 * kBufferSize);
    read_buffer_.emplace(pd_.get(), 4 * kBufferSize);
    for (uint32_t slot = 0; slot < kReceiveDepth; ++slot) PostReceive(slot);
  }

  ConnParams LocalParams() const {
    ConnParams local;
    local.flags = conn_flags_;
    local.receive_depth = kReceiveDepth;
    local.initial_credits = kReceiveDepth;  // Every receive is posted.
    local.receive_buffer_size = kBufferSize;
    return local;
  }

  static rdma_conn_param ConnParam(ConnParams& local) {
    rdma_conn_param param{};
    param.private_data = &local;
    param.private_data_len = sizeof(local);
    param.responder_resources = 1;
    param.initiator_depth = 1;
    param.retry_count = 7;
    param.rnr_retry_count = tunables::kRdmaRnrRetry;
    return param;
  }

  // Every attack but one stays within its credits: the server always has a
  // receive posted for what this peer sends, so nothing here is an RNR. The
  // one (OverrunCredits) sends beyond them, into receives the server's
  // shared queue holds for its other peers.
  void TakeCredit() {
    if (overrun_) return;
    REQUIRE(credits_ >= 1);
    --credits_;
  }

  uint16_t ReturnCredits() {
    const auto returned = static_cast<uint16_t>(reposted_);
    reposted_ = 0;
    return returned;
  }

  void PostReceive(uint32_t slot) {
    ibv_sge sge{receive_ring_->addr(size_t{slot} * kBufferSize), kBufferSize,
                receive_ring_->mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = kRecvFlag | slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    REQUIRE(ibv_post_recv(id_->qp, &wr, &bad) == 0);
  }

  std::string PostRdma(ibv_send_wr& wr, uint64_t addr, uint32_t rkey,
                       std::span<const std::byte> data) {
    REQUIRE(data.size() <= send_buffer_->bytes.size());
    if (!data.empty()) {
      std::memcpy(send_buffer_->bytes.data(), data.data(), data.size());
    }
    ibv_sge sge{send_buffer_->addr(), static_cast<uint32_t>(data.size()),
                send_buffer_->mr->lkey};
    wr.wr.rdma.remote_addr = addr;
    wr.wr.rdma.rkey = rkey;
    return PostAndWait(wr, sge);
  }

  // Posts one signaled work request and waits for its completion, or for the
  // server to disconnect, whichever comes first.
  std::string PostAndWait(ibv_send_wr& wr, ibv_sge& sge) {
    const uint64_t id = ++next_wr_id_;
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = sge.length > 0 ? 1 : 0;
    wr.send_flags |= IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    const int error = ibv_post_send(id_->qp, &wr, &bad);
    if (error != 0) return std::string("ibv_post_send: ") + strerror(error);
    if (!PollUntil(
            [&] { return completions_.count(id) > 0 || disconnected_; })) {
      return kTimedOut;
    }
    // Both may be seen in one poll: the completion says more.
    if (completions_.count(id) > 0) return WcName(completions_[id]);
    return kClosedFirst;
  }

  template <typename F>
  bool PollUntil(F done) {
    const auto until = std::chrono::steady_clock::now() + kWait;
    for (;;) {
      Poll();
      if (done()) return true;
      if (std::chrono::steady_clock::now() > until) return false;
      // Leave the (two, emulated) CPUs to the server between polls.
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  void Poll() {
    if (cq_) {  // None yet while the address and route resolve.
      ibv_wc wcs[16];
      int n;
      while ((n = ibv_poll_cq(cq_.get(), 16, wcs)) > 0) {
        for (int i = 0; i < n; ++i) OnCompletion(wcs[i]);
      }
      if (n < 0) FAIL("ibv_poll_cq failed");
    }
    rdma_cm_event* event = nullptr;
    while (rdma_get_cm_event(events_.get(), &event) == 0) {
      OnCmEvent(*event);
      rdma_ack_cm_event(event);
    }
  }

  void OnCompletion(const ibv_wc& wc) {
    if ((wc.wr_id & kRecvFlag) == 0) {
      completions_[wc.wr_id] = wc.status;
      return;
    }
    if (wc.status != IBV_WC_SUCCESS) {
      if (receive_errors_++ == 0) first_receive_error_ = WcName(wc.status);
      return;
    }
    const auto slot = static_cast<uint32_t>(wc.wr_id & ~kRecvFlag);
    const std::byte* data =
        receive_ring_->bytes.data() + size_t{slot} * kBufferSize;
    --server_credits_;
    uint16_t returned = 0;
    if (wc.opcode == IBV_WC_RECV) {
      messages_.emplace_back(data, data + wc.byte_len);
      if (wc.byte_len >= tunables::kFramePrefixSize) {
        returned = transport::DecodeFramePrefix(
                       std::span(data, tunables::kFramePrefixSize),
                       tunables::kDefaultMaxPayloadSize)
                       .prefix.credits;
      }
    } else if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && grant_memory_) {
      ++landings_;  // Into the memory SendGrant lent.
    } else {
      // The server writes to this peer only where it granted.
      FAIL("unexpected completion opcode " << wc.opcode);
    }
    if (server_credits_ == 0 && returned == 0) ++last_credit_returning_none_;
    PostReceive(slot);
    ++reposted_;
  }

  void OnCmEvent(const rdma_cm_event& event) {
    cm_log_.push_back(rdma_event_str(event.event));
    if (event.event == RDMA_CM_EVENT_ESTABLISHED &&
        event.param.conn.private_data_len >= sizeof(ConnParams)) {
      std::memcpy(&server_params_, event.param.conn.private_data,
                  sizeof(ConnParams));
    }
    if (event.event == RDMA_CM_EVENT_DISCONNECTED) disconnected_ = true;
    cm_events_.push_back(event.event);
  }

  rdma_cm_event_type WaitCmEvent() {
    const bool got = PollUntil([this] { return !cm_events_.empty(); });
    INFO("peer state: " << Describe());
    REQUIRE(got);
    const rdma_cm_event_type type = cm_events_.front();
    cm_events_.pop_front();
    return type;
  }

  // Destroyed bottom-up: memory regions, CQ, PD, id, event channel (the QP
  // is destroyed first, by hand).
  EventChannel events_;
  CmId id_;
  ProtectionDomain pd_;
  CompletionQueue cq_;
  std::optional<LocalMemory> receive_ring_;
  std::optional<LocalMemory> send_buffer_;
  std::optional<LocalMemory> read_buffer_;
  std::optional<LocalMemory> grant_memory_;  // SendGrant's.

  std::string name_ = "rdma://?";
  ConnParams server_params_{.magic = 0};
  bool established_ = false;
  bool disconnected_ = false;
  std::deque<rdma_cm_event_type> cm_events_;
  std::vector<std::string> cm_log_;
  std::deque<Bytes> messages_;
  std::deque<ControlMessage> standing_grants_;
  std::map<uint64_t, ibv_wc_status> completions_;
  uint64_t next_wr_id_ = 0;
  uint32_t receive_errors_ = 0;
  std::string first_receive_error_;
  int64_t credits_ = 0;  // Receives the server has posted for this peer.
  // The server's credits for this peer's receives: all of them at first
  // (LocalParams).
  int64_t server_credits_ = kReceiveDepth;
  uint32_t landings_ = 0;
  uint32_t last_credit_returning_none_ = 0;
  bool overrun_ = false;   // Send beyond them (OverrunCredits).
  uint32_t reposted_ = 0;  // Receives re-posted, not yet returned as credits.
};

}  // namespace rdmarpc::hostile

#endif  // RDMARPC_TESTS_HOSTILE_PEER_H_
