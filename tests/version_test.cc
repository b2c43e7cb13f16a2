// A peer of another rdmarpc version is refused with an error that names both
// versions, on both sides of the connection (docs/protocol.md, "Versions").
//
// TCP cases run natively ("~[rdma]"); the [rdma] cases drive rdma_cm by hand
// against a Soft-RoCE device and run in the VM (tools/softroce/suite).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/test_support.h"
#include "transport/frame.h"
#include "transport/keepalive.h"
#include "transport/rdma/peer_checks.h"
#include "transport/rdma/protocol.h"
#include "transport/uri.h"

namespace rdmarpc::testing {
namespace {

using transport::DecodeFramePrefix;
using transport::EncodedPrefix;
using transport::PrefixVerdict;
using transport::rdma::ConnParams;

constexpr uint8_t kOtherVersion = transport::kFrameVersion + 1;
constexpr rpc::MethodRef kEcho("test.Test", "Echo");

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ------------------------------------------------------------------ TCP --

// A TCP socket with a bounded wait for each read.
class RawTcp {
 public:
  explicit RawTcp(int fd) : fd_(fd) {}
  ~RawTcp() {
    if (fd_ >= 0) close(fd_);
  }
  RawTcp(const RawTcp&) = delete;
  RawTcp& operator=(const RawTcp&) = delete;

  static RawTcp Connect(uint16_t port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&address),
                    sizeof(address)) == 0);
    return RawTcp(fd);
  }
  RawTcp(RawTcp&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

  void Write(const std::vector<std::byte>& bytes) {
    REQUIRE(send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(bytes.size()));
  }
  // Everything until the peer closes (or 10 s pass).
  std::vector<std::byte> ReadToEnd() {
    std::vector<std::byte> out;
    std::byte buffer[4096];
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 10'000) != 1) break;
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      out.insert(out.end(), buffer, buffer + n);
    }
    return out;
  }
  // Exactly `size` bytes (or fewer, if the peer closes or 10 s pass).
  std::vector<std::byte> Read(size_t size) {
    std::vector<std::byte> out(size);
    size_t got = 0;
    while (got < size) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 10'000) != 1) break;
      const ssize_t n = recv(fd_, out.data() + got, size - got, 0);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    out.resize(got);
    return out;
  }

 private:
  int fd_;
};

// The prefix of a small well-formed RPC frame, then its 8 bytes, as a peer
// of version `version` would send it.
std::vector<std::byte> FrameOfVersion(uint8_t version) {
  EncodedPrefix prefix =
      transport::EncodeFramePrefix({transport::FrameType::kRpc, 0, 4, 4});
  prefix[4] = std::byte{version};
  std::vector<std::byte> bytes(prefix.begin(), prefix.end());
  bytes.resize(bytes.size() + 8, std::byte{0});
  return bytes;
}

// The 16 bytes must be this build's VersionAnnouncement().
void CheckAnnouncesThisVersion(const std::vector<std::byte>& bytes) {
  REQUIRE(bytes.size() == tunables::kFramePrefixSize);
  CHECK(std::memcmp(bytes.data(), transport::kFrameMagic.data(), 4) == 0);
  CHECK(std::to_integer<uint8_t>(bytes[4]) == transport::kFrameVersion);
  const auto decoded = DecodeFramePrefix(bytes, 1 << 20);
  CHECK(decoded.verdict == PrefixVerdict::kAccept);
  CHECK(decoded.prefix.type == transport::FrameType::kControl);
  CHECK(decoded.prefix.header_size == 0);
  CHECK(decoded.prefix.payload_size == 0);
}

TEST_CASE("version: a TCP client of another version is told ours, then closed",
          "[tcp]") {
  LogCapture log;
  TestServer server;
  RawTcp peer = RawTcp::Connect(transport::ParseUri(server.uri)->port);
  peer.Write(FrameOfVersion(kOtherVersion));
  // Our HELLO (sent on accept), our announcement, then the close: nothing
  // else.
  std::vector<std::byte> answer = peer.ReadToEnd();
  const auto hello =
      transport::TcpControlFrame(transport::KeepaliveKind::kHello);
  REQUIRE(answer.size() > hello.size());
  CHECK(std::memcmp(answer.data(), hello.data(), hello.size()) == 0);
  answer.erase(answer.begin(), answer.begin() + hello.size());
  CheckAnnouncesThisVersion(answer);
  const std::string why =
      "the peer speaks rdmarpc frame version " + std::to_string(kOtherVersion) +
      "; this build speaks version " + std::to_string(transport::kFrameVersion);
  CHECK(WaitFor([&] { return log.Contains(spdlog::level::warn, why); }));
  CHECK(WaitFor([&] { return server.server.stats().protocol_errors == 1; }));
  // The server goes on serving this version.
  rpc::Channel channel(server.uri);
  CHECK(CallSync(channel, kEcho, "still here").response == "still here");
}

TEST_CASE(
    "version: a call to a TCP server of another version fails naming both",
    "[tcp]") {
  // A listener that answers the client's HELLO with a frame of another
  // version (as a server of another version would: its own announcement),
  // then reads what comes back.
  LoopbackListener listener;
  std::vector<std::byte> request_prefix, answer;
  std::thread other([&] {
    RawTcp peer(listener.Accept());
    request_prefix = peer.Read(tunables::kFramePrefixSize);
    const auto request = DecodeFramePrefix(request_prefix, 1 << 20);
    peer.Read(request.prefix.header_size + request.prefix.payload_size);
    peer.Write(FrameOfVersion(kOtherVersion));
    answer = peer.ReadToEnd();
  });

  rpc::Channel channel(listener.uri());
  const CallResult result =
      CallSync(channel, kEcho, "hello", rpc::CallOptions::WithTimeout(20s));
  other.join();
  INFO(result.status.ToString());
  CHECK(result.status.code() == StatusCode::kUnavailable);
  CHECK(Has(result.status.message(),
            "frame version " + std::to_string(kOtherVersion)));
  CHECK(Has(
      result.status.message(),
      "this build speaks version " + std::to_string(transport::kFrameVersion)));
  // The channel's HELLO was of this version (the other server refuses it,
  // naming both, as this test's peer did); after the other version's frame
  // the channel closed without a call sent.
  REQUIRE(request_prefix.size() == tunables::kFramePrefixSize);
  CHECK(std::to_integer<uint8_t>(request_prefix[4]) ==
        transport::kFrameVersion);
  CHECK(DecodeFramePrefix(request_prefix, 1 << 20).prefix.type ==
        transport::FrameType::kControl);
  CHECK(answer.empty());
}

// ----------------------------------------------------------------- RDMA --

TEST_CASE("version: RDMA connection parameters are checked, version first",
          "[params]") {
  using transport::rdma::CheckConnParams;
  const ConnParams ours = transport::rdma::LocalConnParams();
  std::vector<std::byte> bytes(sizeof(ours));
  std::memcpy(bytes.data(), &ours, sizeof(ours));
  CHECK(CheckConnParams(bytes).ok());
  // rdma_cm pads private data with zeros: still ours.
  std::vector<std::byte> padded = bytes;
  padded.resize(56);
  CHECK(CheckConnParams(padded).ok());

  SECTION("another version, even in fewer bytes than ours") {
    ConnParams next = ours;
    next.version = transport::rdma::kConnVersion + 1;
    std::memcpy(bytes.data(), &next, sizeof(next));
    bytes.resize(6);
    const auto checked = CheckConnParams(bytes);
    CHECK(checked.status().code() == StatusCode::kUnimplemented);
    CHECK(checked.status().message() ==
          "the peer speaks rdmarpc RDMA protocol version " +
              std::to_string(next.version) + "; this build speaks version " +
              std::to_string(transport::rdma::kConnVersion));
  }
  SECTION("not rdmarpc") {
    bytes[0] = std::byte{0};
    CHECK(CheckConnParams(bytes).status().code() == StatusCode::kUnavailable);
    CHECK(CheckConnParams({}).status().code() == StatusCode::kUnavailable);
  }
  SECTION("truncated") {
    bytes.resize(sizeof(ours) - 1);
    CHECK(Has(CheckConnParams(bytes).status().message(), "truncated"));
  }
  SECTION("unusable depth") {
    ConnParams shallow = ours;
    shallow.receive_depth = 1;
    std::memcpy(bytes.data(), &shallow, sizeof(shallow));
    CHECK(Has(CheckConnParams(bytes).status().message(), "receive depth 1"));
  }
  SECTION("initial credits beyond the depth, or too few to send with") {
    for (const uint16_t initial :
         {uint16_t{1}, static_cast<uint16_t>(ours.receive_depth + 1)}) {
      ConnParams odd = ours;
      odd.initial_credits = initial;
      std::memcpy(bytes.data(), &odd, sizeof(odd));
      CHECK(Has(CheckConnParams(bytes).status().message(),
                "initial credits " + std::to_string(initial)));
    }
  }
}

struct CmChannelDeleter {
  void operator()(rdma_event_channel* c) const {
    rdma_destroy_event_channel(c);
  }
};
struct CmIdDeleter {
  void operator()(rdma_cm_id* id) const { rdma_destroy_id(id); }
};
using CmChannel = std::unique_ptr<rdma_event_channel, CmChannelDeleter>;
using CmId = std::unique_ptr<rdma_cm_id, CmIdDeleter>;

// The next CM event on `channel` within 20 s; `private_data` gets its
// private data. The event is acknowledged.
rdma_cm_event_type NextEvent(rdma_event_channel* channel,
                             std::vector<std::byte>* private_data = nullptr,
                             rdma_cm_id** id = nullptr) {
  pollfd p{channel->fd, POLLIN, 0};
  REQUIRE(poll(&p, 1, 20'000) == 1);
  rdma_cm_event* event = nullptr;
  REQUIRE(rdma_get_cm_event(channel, &event) == 0);
  const rdma_cm_event_type type = event->event;
  if (private_data) {
    const auto* data =
        static_cast<const std::byte*>(event->param.conn.private_data);
    private_data->assign(data, data + event->param.conn.private_data_len);
  }
  if (id) *id = event->id;
  rdma_ack_cm_event(event);
  return type;
}

sockaddr_in Ipv4Address(const std::string& ip, uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  REQUIRE(inet_pton(AF_INET, ip.c_str(), &address.sin_addr) == 1);
  return address;
}

sockaddr_in RxeAddress(uint16_t port) {
  return Ipv4Address(RequireEnv("RXE_IP"), port);
}

ConnParams ParamsOfVersion(uint16_t version) {
  ConnParams params = transport::rdma::LocalConnParams();
  params.version = version;
  return params;
}

TEST_CASE("version: an RDMA peer of another version is rejected with ours",
          "[rdma]") {
  LogCapture log;
  // In this process on the VM's device, or on the other host in the
  // two-host suite.
  TestServer server(
      {}, RemoteServers() ? "" : "rdma://" + RequireEnv("RXE_IP") + ":0");
  const auto uri = transport::ParseUri(server.uri);
  REQUIRE(uri.ok());
  REQUIRE(uri->scheme == "rdma");
  CmChannel events(rdma_create_event_channel());
  REQUIRE(events);
  rdma_cm_id* raw = nullptr;
  REQUIRE(rdma_create_id(events.get(), &raw, nullptr, RDMA_PS_TCP) == 0);
  CmId id(raw);
  sockaddr_in to = Ipv4Address(uri->host, uri->port);
  REQUIRE(rdma_resolve_addr(id.get(), nullptr, reinterpret_cast<sockaddr*>(&to),
                            tunables::kRdmaCmTimeoutMs) == 0);
  REQUIRE(NextEvent(events.get()) == RDMA_CM_EVENT_ADDR_RESOLVED);
  REQUIRE(rdma_resolve_route(id.get(), tunables::kRdmaCmTimeoutMs) == 0);
  REQUIRE(NextEvent(events.get()) == RDMA_CM_EVENT_ROUTE_RESOLVED);
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  REQUIRE(rdma_create_qp(id.get(), nullptr, &attr) == 0);
  const ConnParams mine = ParamsOfVersion(transport::rdma::kConnVersion + 1);
  rdma_conn_param param{};
  param.private_data = &mine;
  param.private_data_len = sizeof(mine);
  param.responder_resources = param.initiator_depth = 1;
  param.retry_count = 6;
  REQUIRE(rdma_connect(id.get(), &param) == 0);

  std::vector<std::byte> theirs;
  REQUIRE(NextEvent(events.get(), &theirs) == RDMA_CM_EVENT_REJECTED);
  // The reject carries the server's own parameters: this build's version.
  const auto params = transport::rdma::CheckConnParams(theirs);
  INFO(params.status().ToString());
  CHECK(params.ok());
  const std::string why = "the peer speaks rdmarpc RDMA protocol version " +
                          std::to_string(mine.version) +
                          "; this build speaks version " +
                          std::to_string(transport::rdma::kConnVersion);
  CHECK(WaitFor([&] { return server.Logged(log, why, spdlog::level::warn); }));
  rdma_destroy_qp(id.get());
  // The server goes on serving this version.
  rpc::Channel channel(server.uri);
  CHECK(CallSync(channel, kEcho, "still here").response == "still here");
}

TEST_CASE(
    "version: a call to an RDMA listener of another version fails "
    "naming both",
    "[rdma]") {
  // A listener of the next version: it rejects with its own parameters.
  CmChannel events(rdma_create_event_channel());
  REQUIRE(events);
  rdma_cm_id* raw = nullptr;
  REQUIRE(rdma_create_id(events.get(), &raw, nullptr, RDMA_PS_TCP) == 0);
  CmId listener(raw);
  sockaddr_in at = RxeAddress(0);
  REQUIRE(rdma_bind_addr(listener.get(), reinterpret_cast<sockaddr*>(&at)) ==
          0);
  REQUIRE(rdma_listen(listener.get(), 1) == 0);
  const uint16_t port = ntohs(rdma_get_src_port(listener.get()));
  std::vector<std::byte> request;
  std::thread other([&] {
    rdma_cm_id* child = nullptr;
    REQUIRE(NextEvent(events.get(), &request, &child) ==
            RDMA_CM_EVENT_CONNECT_REQUEST);
    const ConnParams next = ParamsOfVersion(transport::rdma::kConnVersion + 1);
    rdma_reject(child, &next, sizeof(next));
    rdma_destroy_id(child);
  });

  rpc::Channel channel("rdma://" + RequireEnv("RXE_IP") + ":" +
                       std::to_string(port));
  const CallResult result =
      CallSync(channel, kEcho, "hello", rpc::CallOptions::WithTimeout(30s));
  other.join();
  INFO(result.status.ToString());
  CHECK(result.status.code() == StatusCode::kUnavailable);
  CHECK(Has(result.status.message(),
            "RDMA protocol version " +
                std::to_string(transport::rdma::kConnVersion + 1)));
  CHECK(Has(result.status.message(),
            "this build speaks version " +
                std::to_string(transport::rdma::kConnVersion)));
  // The channel's request carried this build's parameters.
  CHECK(transport::rdma::CheckConnParams(request).ok());
}

}  // namespace
}  // namespace rdmarpc::testing
