// A raw TCP client of an rdmarpc server, for tests that play a peer no
// Channel would be (admission_test, attack_test): it exchanges HELLOs, then
// writes frames a piece at a time and reads the server's answers.
#ifndef RDMARPC_TESTS_SUPPORT_RAW_CLIENT_H_
#define RDMARPC_TESTS_SUPPORT_RAW_CLIENT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <catch2/catch_test_macros.hpp>
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "rdmarpc/interceptor.h"
#include "rdmarpc/metadata.h"
#include "rpc/wire/call_header.h"
#include "rpc/wire/wire_codec.h"
#include "tests/support/test_support.h"
#include "transport/frame.h"
#include "transport/keepalive.h"
#include "transport/uri.h"

namespace rdmarpc::testing {

// Whether resident memory measures what the process holds: not under
// AddressSanitizer, whose quarantine keeps freed blocks resident.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kResidentIsLive = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kResidentIsLive = false;
#else
inline constexpr bool kResidentIsLive = true;
#endif
#else
inline constexpr bool kResidentIsLive = true;
#endif

// This process's resident memory now.
inline uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// A raw TCP client that has exchanged HELLOs with the server at `uri`.
class RawClient {
 public:
  // `greet` false: connected, no HELLO sent or read.
  explicit RawClient(const std::string& uri, bool greet = true)
      : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(transport::ParseUri(uri)->port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd_, reinterpret_cast<sockaddr*>(&address),
                    sizeof(address)) == 0);
    const timeval timeout{.tv_sec = 10, .tv_usec = 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    if (!greet) return;
    const auto hello =
        transport::TcpControlFrame(transport::KeepaliveKind::kHello);
    REQUIRE(Write(hello.data(), hello.size()));
    std::array<std::byte, transport::kTcpControlFrameSize> greeting;
    REQUIRE(Read(greeting.data(), greeting.size()));
    REQUIRE(greeting == hello);
  }
  ~RawClient() { close(fd_); }

  // A REQUEST for test.Test/`method` declaring `payload_size` bytes of
  // payload, with an authorization header if `token` is set: its prefix and
  // header only.
  bool WriteRequestHead(uint64_t id, std::string_view method,
                        uint64_t payload_size, std::string_view token = {}) {
    const std::string metadata = TokenMetadata(token);
    rpc::CallHeader header;
    header.set_kind(rpc::CallHeader::kRequest)
        .set_call_id(id)
        .set_service("test.Test")
        .set_method(method)
        .set_payload_size(payload_size)
        .set_metadata(metadata);
    std::vector<std::byte> bytes(header.MaxEncodedSize());
    const size_t header_size = header.Encode(bytes.data()) - bytes.data();
    const transport::EncodedPrefix prefix = transport::EncodeFramePrefix(
        {.type = transport::FrameType::kRpc,
         .header_size = static_cast<uint32_t>(header_size),
         .payload_size = static_cast<uint32_t>(payload_size)});
    return Write(prefix.data(), prefix.size()) &&
           Write(bytes.data(), header_size);
  }
  // A whole REQUEST whose payload is `request`.
  bool WriteRequest(uint64_t id, std::string_view method,
                    std::string_view request, std::string_view token = {}) {
    return WriteRequestHead(id, method, request.size(), token) &&
           Write(request.data(), request.size());
  }
  // `n` bytes of payload.
  bool WritePayload(uint64_t n) {
    static const std::vector<std::byte> zeros(1 << 20);
    for (uint64_t left = n; left > 0;) {
      const size_t take = std::min<uint64_t>(left, zeros.size());
      if (!Write(zeros.data(), take)) return false;
      left -= take;
    }
    return true;
  }
  // The next RESPONSE's status; INTERNAL "closed" once the server closed.
  // A GOAWAY on the way is counted (goaways()), never answered.
  Status ReadResponse() {
    for (;;) {
      std::array<std::byte, tunables::kFramePrefixSize> prefix_bytes;
      if (!Read(prefix_bytes.data(), prefix_bytes.size())) {
        return Status(StatusCode::kInternal, "closed");
      }
      const auto prefix = transport::DecodeFramePrefix(prefix_bytes, 1 << 30);
      std::vector<std::byte> rest(prefix.prefix.header_size +
                                  prefix.prefix.payload_size);
      if (!Read(rest.data(), rest.size())) {
        return Status(StatusCode::kInternal, "closed");
      }
      const auto header = rpc::CallHeader::Decode(
          std::span(rest).first(prefix.prefix.header_size));
      REQUIRE(header.has_value());
      if (header->kind() == rpc::CallHeader::kGoAway) {
        ++goaways_;
        continue;
      }
      REQUIRE(header->kind() == rpc::CallHeader::kResponse);
      return rpc::StatusFromHeader(*header);
    }
  }
  int goaways() const { return goaways_; }

  int fd() const { return fd_; }
  bool Write(const void* data, size_t n) {
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t sent = send(fd_, p, n, MSG_NOSIGNAL);
      if (sent <= 0) return false;
      p += sent;
      n -= static_cast<size_t>(sent);
    }
    return true;
  }
  bool Read(void* data, size_t n) {
    auto* p = static_cast<char*>(data);
    while (n > 0) {
      const ssize_t got = recv(fd_, p, n, 0);
      if (got <= 0) return false;
      p += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  }

 private:
  int fd_;
  int goaways_ = 0;
};

}  // namespace rdmarpc::testing

#endif  // RDMARPC_TESTS_SUPPORT_RAW_CLIENT_H_
