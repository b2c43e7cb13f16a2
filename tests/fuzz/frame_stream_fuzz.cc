// Fuzzes the frame decoder on the real receive path: the input is a byte
// stream a TCP peer sends (arbitrary split points come from the socket),
// read by a TcpConnection, each delivered frame's call header decoded as
// the RPC layer would. The connection must deliver only frames within the
// limits, then close exactly once (at EOF, or on the first malformed
// frame) without crashing, leaking or hanging. An input that opens with a
// control frame is read as a server reads a new connection (HELLO first).
#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "base/log.h"
#include "rpc/wire/wire_codec.h"
#include "tests/fuzz/fuzz_check.h"
#include "transport/tcp/tcp_connection.h"

namespace asio = boost::asio;
using rdmarpc::transport::ReceivedFrame;

namespace {

// Small, so the fuzzer reaches the oversized-payload path easily.
constexpr uint64_t kMaxPayload = 4096;

struct Observer : rdmarpc::transport::ConnectionObserver {
  size_t size = 0;  // Input bytes.
  uint64_t frame_bytes = 0;
  int closes = 0;
  void OnFrame(ReceivedFrame&& frame) override {
    FUZZ_CHECK(closes == 0);
    FUZZ_CHECK(frame.type() == rdmarpc::transport::FrameType::kRpc);
    FUZZ_CHECK(frame.header().size() <= rdmarpc::tunables::kMaxCallHeaderSize);
    FUZZ_CHECK(frame.payload_size() <= kMaxPayload);
    if (frame.dropped_payload_size() > 0) {
      FUZZ_CHECK(frame.payload_size() == 0);
      FUZZ_CHECK(frame.dropped_payload_size() > kMaxPayload);
    }
    // (A dropped payload is discarded after its header is delivered, as it
    // arrives: it need not have arrived yet.)
    frame_bytes += rdmarpc::tunables::kFramePrefixSize + frame.header().size() +
                   frame.payload_size();
    FUZZ_CHECK(frame_bytes <= size);  // Nothing invented.
    rdmarpc::rpc::CallHeader header;
    if (rdmarpc::rpc::DecodeCallHeader(frame, header).ok()) {
      // Its metadata, as a server or channel reads it.
      rdmarpc::rpc::Metadata metadata;
      (void)rdmarpc::rpc::ReadMetadata(
          header.metadata(), rdmarpc::tunables::kDefaultMaxMetadataSize,
          "request metadata", "server", rdmarpc::StatusCode::kInvalidArgument,
          &metadata);
      (void)rdmarpc::rpc::ReadMetadata(
          header.trailers(), rdmarpc::tunables::kDefaultMaxMetadataSize,
          "response trailers", "channel", rdmarpc::StatusCode::kInternal,
          &metadata);
    }
  }
  void OnClose(const rdmarpc::Status& reason) override {
    FUZZ_CHECK(!reason.ok());
    ++closes;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    rdmarpc::Log().set_level(spdlog::level::off);
    return true;
  }();
  (void)quiet;
  int fds[2];
  FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  asio::io_context context;
  asio::ip::tcp::socket socket(context);
  socket.assign(asio::ip::tcp::v4(), fds[0]);
  asio::local::stream_protocol::socket peer(context);
  peer.assign(asio::local::stream_protocol(), fds[1]);

  rdmarpc::transport::TransportOptions options;
  options.max_payload_size = kMaxPayload;
  // An input that opens with a control frame is read as an accepted
  // connection reads, whose first frame must be the client's HELLO; any
  // other as a client's connection after the HELLOs.
  using rdmarpc::transport::tcp::TcpConnection;
  const bool server =
      size >= 6 && std::memcmp(data, "RRPC", 4) == 0 &&
      data[5] == static_cast<uint8_t>(rdmarpc::transport::FrameType::kControl);
  auto connection = std::make_shared<TcpConnection>(
      std::move(socket), options,
      server ? TcpConnection::Role::kServer : TcpConnection::Role::kClient);
  auto observer = std::make_shared<Observer>();
  observer->size = size;
  connection->Start(observer);
  // The peer writes the input and closes: the connection reads it all, then
  // sees EOF (or stops earlier at a malformed frame).
  asio::async_write(peer, asio::buffer(data, size),
                    [&peer](const boost::system::error_code&, size_t) {
                      boost::system::error_code ignored;
                      peer.close(ignored);
                    });
  context.run();
  FUZZ_CHECK(observer->closes == 1);
  return 0;
}
