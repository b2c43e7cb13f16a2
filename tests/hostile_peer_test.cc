// A hostile raw-verbs peer against a real rdmarpc server, on a real RDMA
// device (run in the Soft-RoCE VM by tools/test; without RXE_IP or a device
// every case fails: there is no silent skip).
//
// Each case connects one raw librdmacm + libibverbs peer that speaks the
// RDMA transport's protocol (transport/rdma/protocol.h, transport/frame.h)
// exactly as a legitimate RdmaConnection does, then breaks it in one way.
// Afterwards the server must have:
//   (a) closed that connection on its own (the peer sees DISCONNECTED),
//   (b) logged why at warn level, naming the connection,
//   (c) kept serving a normal Channel (same connection, correct Echo),
//   (d) dropped the connection from its stats, with no call left live,
//       counted a protocol error where the close is one, and deregistered
//       every byte it had registered for the connection.
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

#include "base/tunables.h"
#include "rpc/call_header.h"
#include "rpc/channel.h"
#include "rpc/server.h"
#include "rpc/wire_codec.h"
#include "tests/test_support.h"
#include "transport/frame.h"
#include "transport/rdma/completion_group.h"
#include "transport/rdma/protocol.h"
#include "transport/rdma/verbs.h"

namespace rdmarpc {
namespace {

using namespace std::chrono_literals;
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
constexpr auto kWait = 30s;

std::string WcName(ibv_wc_status status) { return ibv_wc_status_str(status); }
const std::string kTimedOut = "no completion within the timeout";
// The server disconnected before this peer's work request completed. An RC
// responder generates the receive completion before it sends the ACK, so a
// server that closes as soon as it reads a message may destroy its queue pair
// with the ACK unsent; the SEND is then retried into a dead queue pair and
// completes (with an error) only after every retry has timed out.
const std::string kClosedFirst = "the server disconnected first";
const std::string kSuccess = ibv_wc_status_str(IBV_WC_SUCCESS);

// The peer's own memory is registered directly, not through rdmarpc's
// RegisterRegion: LiveRegisteredBytes() then counts the server's alone.
struct RawMrDeleter {
  void operator()(ibv_mr* mr) const { ibv_dereg_mr(mr); }
};
using RawMr = std::unique_ptr<ibv_mr, RawMrDeleter>;

struct LocalMemory {
  LocalMemory(ibv_pd* pd, size_t size) : bytes(size) {
    mr.reset(ibv_reg_mr(pd, bytes.data(), size, IBV_ACCESS_LOCAL_WRITE));
    REQUIRE(mr != nullptr);
  }
  uint64_t addr(size_t offset = 0) {
    return reinterpret_cast<uint64_t>(bytes.data() + offset);
  }
  Bytes bytes;
  RawMr mr;
};

// A frame's header and payload, contiguous: what a sender writes into a grant.
Bytes FrameBytes(const transport::OutgoingFrame& frame) {
  Bytes bytes(frame.header.span().begin(), frame.header.span().end());
  for (size_t i = 0; i < frame.payload_slices; ++i) {
    const auto slice = frame.payload[i].span();
    bytes.insert(bytes.end(), slice.begin(), slice.end());
  }
  return bytes;
}

Bytes Pattern(size_t size, int seed) {
  Bytes out(size);
  for (size_t i = 0; i < size; ++i) out[i] = std::byte((i * 13 + seed) % 251);
  return out;
}

template <typename T>
std::span<const std::byte> AsBytes(const T& value) {
  return std::as_bytes(std::span(&value, 1));
}

// A CREDIT control frame returning no credits, as it goes on the wire.
Bytes CreditMessage() {
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
    events_.reset(rdma_create_event_channel());
    REQUIRE(events_ != nullptr);
    REQUIRE(transport::rdma::SetNonBlocking(events_->fd).ok());
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

    ConnParams local;
    local.receive_depth = kReceiveDepth;
    local.initial_credits = kReceiveDepth;  // Every receive is posted.
    local.receive_buffer_size = kBufferSize;
    rdma_conn_param param{};
    param.private_data = &local;
    param.private_data_len = sizeof(local);
    param.responder_resources = 1;
    param.initiator_depth = 1;
    param.retry_count = 7;
    param.rnr_retry_count = tunables::kRdmaRnrRetry;
    REQUIRE(rdma_connect(id_.get(), &param) == 0);
    const rdma_cm_event_type established = WaitCmEvent();
    INFO("rdma_connect answered " << rdma_event_str(established));
    REQUIRE(established == RDMA_CM_EVENT_ESTABLISHED);
    established_ = true;
    REQUIRE(server_params_.magic == transport::rdma::kConnMagic);
    REQUIRE(server_params_.version == transport::rdma::kConnVersion);
    REQUIRE(server_params_.initial_credits >= 2);
    REQUIRE(server_params_.initial_credits <= server_params_.receive_depth);
    credits_ = server_params_.initial_credits;

    const sockaddr* self = rdma_get_local_addr(id_.get());
    REQUIRE(self->sa_family == AF_INET);
    const auto* in = reinterpret_cast<const sockaddr_in*>(self);
    char host[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    name_ = std::string("rdma://") + host + ":" +
            std::to_string(ntohs(in->sin_port));
  }

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
    const uint16_t returned = credits.value_or(ReturnCredits());
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
  static constexpr uint64_t kRecvFlag = uint64_t{1} << 63;

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
      std::this_thread::sleep_for(100us);
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
    if (wc.opcode == IBV_WC_RECV) {
      messages_.emplace_back(data, data + wc.byte_len);
    } else {
      // The server never writes to this peer: it sends nothing large.
      FAIL("unexpected completion opcode " << wc.opcode);
    }
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
  int64_t credits_ = 0;    // Receives the server has posted for this peer.
  bool overrun_ = false;   // Send beyond them (OverrunCredits).
  uint32_t reposted_ = 0;  // Receives re-posted, not yet returned as credits.
};

// A server with the test service on the device's address, a Channel already
// connected to it (the one legitimate connection), and the counters the
// checks compare against.
struct Fixture {
  Fixture() {
    const char* rxe_ip = std::getenv("RXE_IP");
    if (rxe_ip == nullptr || *rxe_ip == '\0') {
      FAIL("RXE_IP is not set: run under tools/softroce/run (tools/test does)");
    }
    ip = rxe_ip;
    const Status available = transport::rdma::CheckRdmaAvailable();
    INFO(available.ToString());
    REQUIRE(available.ok());
    server.RegisterService(&service);
    auto bound = server.Listen("rdma://" + ip + ":0");
    INFO(bound.status().ToString());
    REQUIRE(bound.ok());
    uri = *bound;
    port = static_cast<uint16_t>(std::stoi(uri.substr(uri.rfind(':') + 1)));
    channel.emplace(uri);
    ExpectEcho("before the attack");
    REQUIRE(WaitFor([&] { return server.stats().connections == 1; }, kWait));
    protocol_errors_before = server.stats().protocol_errors;
    registered_before = ConnectionBytes();
  }

  // Bytes registered now, but for the shared pools (which a connection may
  // grow, and which outlive it).
  static uint64_t ConnectionBytes() {
    return transport::rdma::LiveRegisteredBytes() -
           transport::rdma::PooledRegisteredBytes();
  }

  void ExpectEcho(const std::string& text) {
    const testing::CallResult result = testing::CallSync(
        *channel, "Echo", text, rpc::CallOptions::WithTimeout(kWait));
    INFO(result.status.ToString());
    CHECK(result.status.ok());
    CHECK(result.response == text);
  }

  // The peer is connected and the server has accepted it.
  void Connect(HostilePeer& peer) {
    peer.Connect(ip, port);
    REQUIRE(WaitFor([&] { return server.stats().connections == 2; }, kWait));
  }

  // Checks (a) to (d) of the file comment. `warn_text`, when not empty, must
  // appear in a warn-level line as well: the reason, as the server words it.
  void ExpectClosedByServer(HostilePeer& peer, const LogCapture& log,
                            bool protocol_error, const std::string& warn_text) {
    INFO("attacker " << peer.name());
    // (a) The server closed the connection; the peer has not let go of it.
    {
      const bool closed = peer.WaitClosed();
      INFO("peer state: " << peer.Describe());
      CHECK(closed);
    }
    // (b) A warn-level line about this connection, and why.
    const std::string about =
        peer.name() + (protocol_error ? ": closing: " : ": ");
    CHECK(
        WaitFor([&] { return log.Contains(spdlog::level::warn, about); }, 5s));
    if (!warn_text.empty()) {
      CHECK(log.Contains(spdlog::level::warn, warn_text));
    }
    // (d) Gone from the server, with nothing left behind.
    CHECK(WaitFor(
        [&] {
          const rpc::ServerStats stats = server.stats();
          return stats.connections == 1 && stats.live_calls == 0;
        },
        kWait));
    const rpc::ServerStats stats = server.stats();
    INFO("connections " << stats.connections << ", live calls "
                        << stats.live_calls << ", protocol errors "
                        << stats.protocol_errors
                        << " (before: " << protocol_errors_before << ")");
    if (protocol_error) {
      CHECK(stats.protocol_errors == protocol_errors_before + 1);
    }
    CHECK(
        WaitFor([&] { return ConnectionBytes() == registered_before; }, kWait));
    INFO("registered bytes " << ConnectionBytes()
                             << " (before: " << registered_before << "), pools "
                             << transport::rdma::PooledRegisteredBytes());
    CHECK(ConnectionBytes() == registered_before);
    // (c) Still serving others, on the same connection as before.
    ExpectEcho("after the attack from " + peer.name());
    CHECK(channel->stats().connects == 1);
  }

  // Declared so that the channel goes first, then the server, then the
  // service it calls.
  testing::TestService service;
  // Grants from the grant pool, behind memory windows (and, for a frame
  // over a pool block, registered for themselves).
  rpc::Server server{[] {
    rpc::ServerOptions options;
    options.transport.rdma_pooled_grants = true;
    return options;
  }()};
  std::optional<rpc::Channel> channel;
  std::string ip;
  uint16_t port = 0;
  std::string uri;
  uint64_t protocol_errors_before = 0;
  uint64_t registered_before = 0;
};

// A realistic rendezvous: an RPC frame too large for one SEND.
constexpr uint32_t kRtsHeader = 64;
constexpr uint32_t kRtsPayload = 2 * tunables::kRdmaReceiveBufferSize;

TEST_CASE("hostile: WRITE WITH IMMEDIATE with the wrong immediate") {
  Fixture fixture;
  HostilePeer peer;
  fixture.Connect(peer);
  LogCapture log;
  REQUIRE(peer.SendRts(7, kRtsHeader, kRtsPayload) == WcName(IBV_WC_SUCCESS));
  const ControlMessage grant = peer.WaitForGrant();
  REQUIRE(grant.transfer == 7);
  REQUIRE(grant.dropped == 0);
  REQUIRE(grant.length == kRtsHeader + kRtsPayload);
  // Inside the grant, so the NIC accepts it: only the immediate is wrong.
  const std::string landed =
      peer.WriteWithImm(grant.addr, grant.rkey, Pattern(grant.length, 1), 8);
  INFO("the WRITE WITH IMMEDIATE completed: " << landed);
  fixture.ExpectClosedByServer(peer, log, /*protocol_error=*/true,
                               "immediate 8");
}

TEST_CASE("hostile: more transfers under way than the server allows") {
  Fixture fixture;
  HostilePeer peer;
  fixture.Connect(peer);
  LogCapture log;
  const uint32_t allowed =
      transport::rdma::OpenGrantsAllowed(peer.server_params());
  REQUIRE(allowed == tunables::kRdmaMaxOpenGrants);
  for (uint32_t transfer = 1; transfer <= allowed; ++transfer) {
    REQUIRE(peer.SendRts(transfer, kRtsHeader, kRtsPayload) ==
            WcName(IBV_WC_SUCCESS));
    REQUIRE(peer.WaitForGrant().transfer == transfer);
  }
  const std::string sent = peer.SendRts(allowed + 1, kRtsHeader, kRtsPayload);
  INFO("the last SEND: " << sent);
  CHECK((sent == kSuccess || sent == kClosedFirst));
  fixture.ExpectClosedByServer(peer, log, /*protocol_error=*/true, "under way");
}

TEST_CASE("hostile: a later transfer landing before an earlier one") {
  Fixture fixture;
  HostilePeer peer;
  fixture.Connect(peer);
  LogCapture log;
  REQUIRE(tunables::kRdmaMaxOpenGrants >= 2);
  REQUIRE(peer.SendRts(1, kRtsHeader, kRtsPayload) == WcName(IBV_WC_SUCCESS));
  REQUIRE(peer.WaitForGrant().transfer == 1);
  REQUIRE(peer.SendRts(2, kRtsHeader, kRtsPayload) == WcName(IBV_WC_SUCCESS));
  const ControlMessage second = peer.WaitForGrant();
  REQUIRE(second.transfer == 2);
  // Its own grant and its own immediate, but transfer 1 is still open.
  const std::string landed =
      peer.WriteWithImm(second.addr, second.rkey, Pattern(second.length, 5), 2);
  INFO("the WRITE WITH IMMEDIATE completed: " << landed);
  fixture.ExpectClosedByServer(peer, log, /*protocol_error=*/true,
                               "immediate 2");
}

TEST_CASE("hostile: WRITE WITH IMMEDIATE with no grant open") {
  Fixture fixture;
  HostilePeer peer;
  fixture.Connect(peer);
  LogCapture log;
  // Zero bytes need no valid address or rkey (IBTA C9-88): the server's
  // receive completes, and its software must reject it.
  const std::string landed = peer.WriteWithImm(0, 0, {}, 12345);
  INFO("the WRITE WITH IMMEDIATE completed: " << landed);
  fixture.ExpectClosedByServer(peer, log, /*protocol_error=*/true,
                               "immediate 12345");
}

TEST_CASE("hostile: RDMA WRITE outside the granted range") {
  Fixture fixture;
  HostilePeer peer;
  fixture.Connect(peer);
  LogCapture log;
  REQUIRE(peer.SendRts(1, kRtsHeader, kRtsPayload) == WcName(IBV_WC_SUCCESS));
  const ControlMessage grant = peer.WaitForGrant();
  REQUIRE(grant.length == kRtsHeader + kRtsPayload);
  // One WRITE each, on a fresh connection each: the first one's error
  // breaks the queue pair.
  SECTION("past its end") {
    // Past the end of its grant-pool block (grant_pool.h): rxe checks a
    // window's writes against the block's region only, so a write past the
    // grant but inside the block lands in the block's unused slack there.
    // Devices that check window bounds stop it at the grant.
    const uint64_t block = std::bit_ceil(
        std::max<uint64_t>(grant.length, tunables::kRdmaGrantPoolMinBlock));
    CHECK(peer.Write(grant.addr + block - 8, grant.rkey, Pattern(64, 2)) ==
          WcName(IBV_WC_REM_ACCESS_ERR));
  }
  SECTION("before its start") {
    CHECK(peer.Write(grant.addr - 64, grant.rkey, Pattern(64, 3)) ==
          WcName(IBV_WC_REM_ACCESS_ERR));
  }
  fixture.ExpectClosedByServer(peer, log, /*protocol_error=*/false, "");
}

// An RTS for transfer `transfer` of H + P bytes; with `standing`, written
// into the standing grant of that key.
ControlMessage Rts(uint32_t transfer, uint32_t header_size,
                   uint32_t payload_size,
                   std::optional<uint32_t> standing = std::nullopt) {
  ControlMessage rts;
  rts.kind = ControlKind::kRts;
  rts.transfer = transfer;
  rts.header_size = header_size;
  rts.payload_size = payload_size;
  if (standing) {
    rts.flags = transport::rdma::kRtsStanding;
    rts.rkey = *standing;
  }
  return rts;
}

// `message` breaks the protocol: the server closes this peer, saying so.
void ExpectRefused(Fixture& fixture, HostilePeer& peer, const LogCapture& log,
                   const ControlMessage& message,
                   const std::string& warn_text) {
  const std::string sent = peer.SendControl(message);
  INFO("the SEND: " << sent);
  CHECK((sent == kSuccess || sent == kClosedFirst));
  fixture.ExpectClosedByServer(peer, log, /*protocol_error=*/true, warn_text);
}

// One legitimate rendezvous of an Echo request (call `call_id`) as
// transfer `transfer`: RTS, GRANT, the frame written into it, the response
// checked; the grant it used. With `standing`, into that standing grant
// instead, with no RTS answered first. After two of these the server offers
// standing grants (protocol.h).
ControlMessage EchoByRendezvous(HostilePeer& peer, uint64_t call_id,
                                uint32_t transfer,
                                const ControlMessage* standing = nullptr) {
  const std::string request(1000, 'q');
  const transport::OutgoingFrame frame = rpc::MakeRequestFrame(
      call_id, "test.Test", "Echo", 0, 0, Buffer::CopyOf(request));
  const Bytes block = FrameBytes(frame);
  const ControlMessage rts =
      Rts(transfer, static_cast<uint32_t>(frame.header.size()),
          static_cast<uint32_t>(frame.payload_size()),
          standing ? std::optional(standing->rkey) : std::nullopt);
  ControlMessage grant;
  if (standing != nullptr) grant = *standing;
  REQUIRE(peer.SendControl(rts) == kSuccess);
  if (standing == nullptr) {
    grant = peer.WaitForGrant();
    REQUIRE(grant.transfer == transfer);
    REQUIRE(grant.length == block.size());
  }
  REQUIRE(peer.WriteWithImm(grant.addr, grant.rkey, block, transfer) ==
          kSuccess);
  const Received response = peer.WaitForFrame();
  REQUIRE(response.prefix.type == FrameType::kRpc);
  const auto header = rpc::CallHeader::Decode(response.header);
  REQUIRE(header.has_value());
  CHECK(header->call_id() == call_id);
  CHECK(header->status_code() == 0);
  CHECK(std::string(reinterpret_cast<const char*>(response.payload.data()),
                    response.payload.size()) == request);
  return grant;
}

// Two Echo requests by rendezvous (transfers 1 and 2, frames alike), after
// which the server offers standing grants: the first of them.
ControlMessage EarnStandingGrant(HostilePeer& peer) {
  EchoByRendezvous(peer, 1, 1);
  EchoByRendezvous(peer, 2, 2);
  return peer.WaitForStandingGrant();
}

// A grant's key that must open nothing any more (its window invalidated):
// writing through it fails this peer's QP, which the server sees close.
void ExpectKeyOpensNothing(Fixture& fixture, HostilePeer& peer,
                           const ControlMessage& grant) {
  LogCapture log;
  CHECK(peer.Write(grant.addr, grant.rkey, Pattern(64, 7)) ==
        WcName(IBV_WC_REM_ACCESS_ERR));
  fixture.ExpectClosedByServer(peer, log, /*protocol_error=*/false, "");
}

TEST_CASE("hostile: RDMA WRITE to a grant already used") {
  Fixture fixture;
  HostilePeer peer;
  fixture.Connect(peer);
  // One legitimate rendezvous: an Echo request written into its grant.
  const ControlMessage grant = EchoByRendezvous(peer, 42, 1);
  // (The server counts the call done just after it sent the response.)
  REQUIRE(
      WaitFor([&] { return fixture.server.stats().live_calls == 0; }, kWait));
  // The grant was closed (window invalidated, or region deregistered) when
  // the data landed.
  ExpectKeyOpensNothing(fixture, peer, grant);
}

// Grants are memory windows bound on the granted peer's queue pair: their
// key opens nothing through any other connection, though every connection
// of the server shares one protection domain. (A region registered per
// grant, as before the grant pool, let any QP of the PD write into it.)
TEST_CASE("hostile: a grant's key opens nothing on another connection") {
  Fixture fixture;
  HostilePeer owner;
  fixture.Connect(owner);
  const std::string request(1000, 'o');
  const transport::OutgoingFrame frame = rpc::MakeRequestFrame(
      7, "test.Test", "Echo", 0, 0, Buffer::CopyOf(request));
  const Bytes block = FrameBytes(frame);
  REQUIRE(owner.SendRts(1, static_cast<uint32_t>(frame.header.size()),
                        static_cast<uint32_t>(frame.payload_size())) ==
          WcName(IBV_WC_SUCCESS));
  const ControlMessage grant = owner.WaitForGrant();
  REQUIRE(grant.length == block.size());
  HostilePeer thief;
  thief.Connect(fixture.ip, fixture.port);
  REQUIRE(
      WaitFor([&] { return fixture.server.stats().connections == 3; }, kWait));
  LogCapture log;
  CHECK(thief.Write(grant.addr, grant.rkey, Pattern(64, 6)) ==
        WcName(IBV_WC_REM_ACCESS_ERR));
  CHECK(thief.WaitClosed());
  // The owner's grant is intact and still its own.
  REQUIRE(owner.WriteWithImm(grant.addr, grant.rkey, block, 1) ==
          WcName(IBV_WC_SUCCESS));
  const Received response = owner.WaitForFrame();
  const auto header = rpc::CallHeader::Decode(response.header);
  REQUIRE(header.has_value());
  CHECK(header->call_id() == 7);
  CHECK(header->status_code() == 0);
  CHECK(std::string(reinterpret_cast<const char*>(response.payload.data()),
                    response.payload.size()) == request);
  fixture.ExpectEcho("after the attack");
}

// The wire protocol of standing grants, spoken by raw verbs: after two
// frames alike landed, the server grants the next one unasked; a frame written
// into it behind a standing RTS is served like any other, and the next standing
// grant follows. Given back, a grant's key opens nothing.
TEST_CASE("hostile: standing grants, used and given back") {
  Fixture fixture;
  HostilePeer peer;
  fixture.Connect(peer);
  const ControlMessage first = EarnStandingGrant(peer);
  CHECK(first.transfer == 0);  // The server's first standing grant.
  CHECK(first.dropped == 0);
  // The landed frame's size class: the smallest pool block.
  CHECK(first.length == tunables::kRdmaGrantPoolMinBlock);
  peer.standing_grants().pop_front();
  EchoByRendezvous(peer, 3, 3, &first);
  const ControlMessage second = peer.WaitForStandingGrant();
  CHECK(second.transfer == 1);
  CHECK(second.rkey != first.rkey);
  // The first one's window was invalidated when its frame landed.
  ExpectKeyOpensNothing(fixture, peer, first);
}

TEST_CASE("hostile: a standing grant given back, then written into") {
  Fixture fixture;
  HostilePeer peer;
  fixture.Connect(peer);
  const ControlMessage grant = EarnStandingGrant(peer);
  ControlMessage release;
  release.kind = ControlKind::kRelease;
  release.transfer = grant.transfer;
  release.length = 1;
  REQUIRE(peer.SendControl(release) == kSuccess);
  peer.standing_grants().pop_front();
  // Still served, this connection too (a RELEASE is no error), and the
  // grant after it is still this peer's.
  fixture.ExpectEcho("after the release");
  EchoByRendezvous(peer, 3, 3);
  REQUIRE(peer.WaitForStandingGrant().transfer == 1);
  // The key given back opens nothing: its window was invalidated.
  ExpectKeyOpensNothing(fixture, peer, grant);
}

TEST_CASE("hostile: a transfer into a standing grant never offered") {
  Fixture fixture;
  HostilePeer peer;
  fixture.Connect(peer);
  LogCapture log;
  ExpectRefused(fixture, peer, log, Rts(1, kRtsHeader, kRtsPayload, 0x1234),
                "into a standing grant not held");
}

TEST_CASE("hostile: a frame larger than its standing grant") {
  Fixture fixture;
  HostilePeer peer;
  fixture.Connect(peer);
  const ControlMessage grant = EarnStandingGrant(peer);
  LogCapture log;
  // With the header, more than the block.
  ExpectRefused(fixture, peer, log,
                Rts(3, kRtsHeader, grant.length, grant.rkey),
                "into a standing grant of");
}

TEST_CASE("hostile: a release of standing grants it does not hold") {
  Fixture fixture;
  HostilePeer peer;
  fixture.Connect(peer);
  REQUIRE(EarnStandingGrant(peer).transfer == 0);
  // The server offers as many as a peer may hold, and no more.
  const auto offered = [&] {
    uint64_t count = 0;
    fixture.server.ForEachConnection(
        [&](const transport::Connection& connection) {
          count += connection.stats().standing_grants;
        });
    return count;
  };
  REQUIRE(WaitFor([&] { return offered() == tunables::kRdmaStandingGrants; }));
  LogCapture log;
  ControlMessage release;
  release.kind = ControlKind::kRelease;
  release.transfer = 0;
  release.length = tunables::kRdmaStandingGrants + 1;
  ExpectRefused(fixture, peer, log, release,
                "release of " +
                    std::to_string(tunables::kRdmaStandingGrants + 1) +
                    " standing grants from 0 while " +
                    std::to_string(tunables::kRdmaStandingGrants) + " are out");
}

TEST_CASE("hostile: RDMA READ of a granted range") {
  Fixture fixture;
  HostilePeer peer;
  fixture.Connect(peer);
  LogCapture log;
  REQUIRE(peer.SendRts(1, kRtsHeader, kRtsPayload) == WcName(IBV_WC_SUCCESS));
  const ControlMessage grant = peer.WaitForGrant();
  REQUIRE(grant.length == kRtsHeader + kRtsPayload);
  // Grants allow remote write only.
  CHECK(peer.Read(grant.addr, grant.rkey, 64) == WcName(IBV_WC_REM_ACCESS_ERR));
  fixture.ExpectClosedByServer(peer, log, /*protocol_error=*/false, "");
}

TEST_CASE("hostile: more credits returned than the server ever used") {
  Fixture fixture;
  HostilePeer peer;
  fixture.Connect(peer);
  LogCapture log;
  // The server has sent nothing yet: it holds every credit it can have.
  ControlMessage credit;
  credit.kind = ControlKind::kCredit;
  const auto overflow =
      static_cast<uint16_t>(peer.server_params().receive_depth + 1);
  const std::string sent =
      peer.PostSendFrame(FrameType::kControl, AsBytes(credit), {}, overflow);
  INFO("the SEND: " << sent);
  CHECK((sent == kSuccess || sent == kClosedFirst));
  fixture.ExpectClosedByServer(peer, log, /*protocol_error=*/true, "credit");
}

TEST_CASE("hostile: more credits given back than it holds") {
  Fixture fixture;
  HostilePeer peer;
  fixture.Connect(peer);
  LogCapture log;
  // It holds the server's initial credits, less the one this SEND uses.
  ControlMessage give_back;
  give_back.kind = ControlKind::kGiveBack;
  give_back.length = tunables::kRdmaInitialCredits;
  const std::string sent =
      peer.PostSendFrame(FrameType::kControl, AsBytes(give_back), {});
  INFO("the SEND: " << sent);
  CHECK((sent == kSuccess || sent == kClosedFirst));
  fixture.ExpectClosedByServer(peer, log, /*protocol_error=*/true,
                               "gave back 3 credits while holding 2");
}

// The server's receives are a queue shared by all its peers: a peer that
// sends beyond the credits it was lent takes receives held for others. The
// server closes it at the first such message.
TEST_CASE("hostile: SENDs beyond the credits it was lent") {
  Fixture fixture;
  HostilePeer peer;
  fixture.Connect(peer);
  LogCapture log;
  // Bursts of twice the most a peer is ever lent: the server would have to
  // return credits faster than the messages arrive for one not to overrun.
  std::string last;
  for (int burst = 0; burst < 20 && !peer.disconnected(); ++burst) {
    last = peer.SendBurst(2 * tunables::kRdmaReceiveDepth);
  }
  INFO("the last burst's SEND: " << last);
  fixture.ExpectClosedByServer(peer, log, /*protocol_error=*/true,
                               "no credit left");
}

TEST_CASE("hostile: a SEND with bad magic bytes") {
  Fixture fixture;
  HostilePeer peer;
  fixture.Connect(peer);
  LogCapture log;
  Bytes message = CreditMessage();
  std::memcpy(message.data(), "EVIL", 4);
  const std::string sent = peer.PostSend(message);
  INFO("the SEND: " << sent);
  CHECK((sent == kSuccess || sent == kClosedFirst));
  fixture.ExpectClosedByServer(peer, log, /*protocol_error=*/true, "magic");
}

}  // namespace
}  // namespace rdmarpc
