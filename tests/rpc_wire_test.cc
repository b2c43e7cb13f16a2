// rpc_semantics_test (rpc_semantics_test.cc): what no Channel would send,
// written by a raw peer: malformed frames, stream frames for no stream,
// malformed metadata; and URIs no transport takes.
#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch_test_macros.hpp>
#include <functional>
#include <thread>
#include <vector>

#include "base/log.h"
#include "rdmarpc/tunables.h"
#include "rpc/wire/wire_codec.h"
#include "tests/support/rpc_semantics.h"
#include "tests/support/test_support.h"
#include "transport/keepalive.h"
#include "transport/uri.h"

namespace rdmarpc::testing {
namespace {

using rpc::CallOptions;
using rpc::Channel;

struct RawPeer {
  explicit RawPeer(const std::string& server_uri) {
    const auto uri = transport::ParseUri(server_uri);
    socket.connect({boost::asio::ip::make_address(uri->host), uri->port});
    // The HELLOs, each side's first frame.
    const auto hello =
        transport::TcpControlFrame(transport::KeepaliveKind::kHello);
    boost::asio::write(socket, boost::asio::buffer(hello));
    std::array<std::byte, transport::kTcpControlFrameSize> greeting;
    boost::asio::read(socket, boost::asio::buffer(greeting));
    REQUIRE(greeting == hello);
  }
  void Write(std::string_view bytes) {
    boost::asio::write(socket, boost::asio::buffer(bytes));
  }
  // The next frame's call id and status; the frame must be a RESPONSE.
  std::pair<uint64_t, Status> ReadResponse() {
    std::array<std::byte, 16> prefix_bytes;
    boost::asio::read(socket, boost::asio::buffer(prefix_bytes));
    const auto prefix = transport::DecodeFramePrefix(prefix_bytes, 1 << 20);
    REQUIRE(prefix.verdict == transport::PrefixVerdict::kAccept);
    std::string rest(prefix.prefix.header_size + prefix.prefix.payload_size,
                     '\0');
    boost::asio::read(socket, boost::asio::buffer(rest));
    const auto header = rpc::CallHeader::Decode(
        std::as_bytes(std::span(rest.data(), prefix.prefix.header_size)));
    REQUIRE(header.has_value());
    REQUIRE(header->kind() == rpc::CallHeader::kResponse);
    return {header->call_id(), rpc::StatusFromHeader(*header)};
  }
  // What reading one more byte gives: eof once the server has closed.
  boost::system::error_code ReadError() {
    char byte;
    boost::system::error_code error;
    boost::asio::read(socket, boost::asio::buffer(&byte, 1), error);
    return error;
  }

  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket{io};
};

// The bytes `frame` puts on a TCP connection: prefix, header, payload.
std::string WireBytes(const transport::OutgoingFrame& frame) {
  std::string out;
  const auto prefix = transport::EncodeFramePrefix(
      {frame.type, 0, static_cast<uint32_t>(frame.header.size()),
       static_cast<uint32_t>(frame.payload_size())});
  out.append(reinterpret_cast<const char*>(prefix.data()), prefix.size());
  out.append(frame.header.view());
  for (size_t i = 0; i < frame.payload_slices(); ++i) {
    out.append(frame.payload[i].view());
  }
  return out;
}

// A frame whose call header is `header` as set, checked by no one: for
// headers no Channel would send. `payload` is its payload, if any.
transport::OutgoingFrame RawFrame(const rpc::CallHeader& header,
                                  std::string_view payload = {}) {
  transport::OutgoingFrame frame;
  std::byte* out = frame.header.Prepare(header.MaxEncodedSize());
  frame.header.Commit(header.Encode(out) - out);
  if (!payload.empty()) frame.AddPayload(Buffer::CopyOf(payload));
  return frame;
}

// After a header large enough to be read straight into its own block, the
// oversized payload that follows is discarded, not parsed as frames: that
// call fails, the next one succeeds, and no protocol error is counted. A raw
// socket trickles the header so the server takes that path.
TEST_CASE("limits: an oversized payload after a large header is discarded") {
  if (OverRdma()) SKIP("raw bytes need a TCP socket");
  rpc::ServerOptions options;
  options.transport.max_payload_size = 64 * 1024;
  TestServer server(options);
  RawPeer peer(server.uri);
  boost::asio::ip::tcp::socket& raw = peer.socket;
  raw.set_option(boost::asio::ip::tcp::no_delay(true));

  const std::string big = WireBytes(
      rpc::MakeRequestFrame(1, "test.Test", std::string(40 * 1024, 'M'), 0, 0,
                            Buffer::CopyOf(std::string(100 * 1024, 'x'))));
  const std::string small = WireBytes(rpc::MakeRequestFrame(
      2, "test.Test", "Echo", 0, 0, Buffer::CopyOf(std::string_view("ok"))));
  boost::asio::write(raw, boost::asio::buffer(big.data(), 26));
  std::this_thread::sleep_for(100ms);  // The server reads just these bytes.
  boost::asio::write(raw,
                     boost::asio::buffer(big.data() + 26, big.size() - 26));
  boost::asio::write(raw, boost::asio::buffer(small));

  // Two responses come back, in order, on the same connection.
  std::vector<std::pair<uint64_t, Status>> responses;
  for (int i = 0; i < 2; ++i) {
    std::array<std::byte, 16> prefix_bytes;
    boost::asio::read(raw, boost::asio::buffer(prefix_bytes));
    const auto prefix = transport::DecodeFramePrefix(prefix_bytes, 1 << 20);
    REQUIRE(prefix.verdict == transport::PrefixVerdict::kAccept);
    std::string rest(prefix.prefix.header_size + prefix.prefix.payload_size,
                     '\0');
    boost::asio::read(raw, boost::asio::buffer(rest));
    const auto header = rpc::CallHeader::Decode(
        std::as_bytes(std::span(rest.data(), prefix.prefix.header_size)));
    REQUIRE(header.has_value());
    responses.emplace_back(header->call_id(), rpc::StatusFromHeader(*header));
  }
  CHECK(responses[0].first == 1);
  CHECK_FALSE(responses[0].second.ok());
  CHECK(responses[1].first == 2);
  CHECK(responses[1].second.ok());
  CHECK(server.stats().protocol_errors == 0);
}

// Frames already read when a protocol error closes the connection are not
// dispatched to handlers.
TEST_CASE("malformed: nothing after a protocol error is dispatched") {
  if (OverRdma()) SKIP("raw bytes need a TCP socket");
  TestServer server;
  RawPeer peer(server.uri);
  // A frame whose header does not parse, then a valid request, in one write.
  transport::OutgoingFrame junk;
  junk.header = Buffer::CopyOf(std::string_view("\xff\xff\xff\xff"));
  peer.Write(WireBytes(junk) + WireBytes(rpc::MakeRequestFrame(
                                   7, "test.Test", "Echo", 0, 0, Buffer())));
  CHECK(peer.ReadError() == boost::asio::error::eof);
  CHECK(server.stats().protocol_errors == 1);
  CHECK(server.calls_started() == 0);
}

TEST_CASE(
    "malformed: a request reusing a live call's id closes the connection") {
  if (OverRdma()) SKIP("raw bytes need a TCP socket");
  TestServer server;
  RawPeer peer(server.uri);
  // WaitCancel outlives its handler; the Echo after it takes the same id.
  std::string bytes;
  for (const char* method : {"WaitCancel", "Echo"}) {
    bytes += WireBytes(
        rpc::MakeRequestFrame(5, "test.Test", method, 0, 0, Buffer()));
  }
  LogCapture log;
  peer.Write(bytes);
  CHECK(peer.ReadError() == boost::asio::error::eof);
  CHECK(server.stats().protocol_errors == 1);
  CHECK(server.calls_started() == 1);  // The Echo never ran.
  CHECK(server.Logged(log, "call id 5 is already in use", spdlog::level::warn));
  // The connection's loss cancelled the first call.
  CHECK(WaitFor([&] { return server.cancels_observed() == 1; }));
}

TEST_CASE("malformed: an attachment larger than the payload") {
  if (OverRdma()) SKIP("raw bytes need a TCP socket");
  TestServer server;
  RawPeer peer(server.uri);
  rpc::CallHeader header;
  header.set_kind(rpc::CallHeader::kRequest)
      .set_call_id(4)
      .set_service("test.Test")
      .set_method("Echo")
      .set_payload_size(2)
      .set_attachment_size(3);
  LogCapture log;
  peer.Write(WireBytes(RawFrame(header, "ok")));
  CHECK(peer.ReadError() == boost::asio::error::eof);
  CHECK(server.stats().protocol_errors == 1);
  CHECK(server.calls_started() == 0);
  CHECK(server.Logged(log, "the attachment is 3 of the payload's 2 bytes",
                      spdlog::level::warn));
}

TEST_CASE("malformed: a request naming its method by id and by name") {
  if (OverRdma()) SKIP("raw bytes need a TCP socket");
  TestServer server;
  RawPeer peer(server.uri);
  LogCapture log;
  peer.Write(WireBytes(rpc::MakeRequestFrame(3, "test.Test", "Echo",
                                             rpc::MethodId("test.Test", "Echo"),
                                             0, Buffer())));
  CHECK(peer.ReadError() == boost::asio::error::eof);
  CHECK(server.stats().protocol_errors == 1);
  CHECK(server.calls_started() == 0);
  CHECK(server.Logged(log, "request names its method both by id and by name",
                      spdlog::level::warn));
}

// Stream frames (docs/protocol.md, "Streams") for a call that is no open
// stream may cross a RESPONSE legitimately: the server drops and counts
// them, and the connection serves the next call.
TEST_CASE("streams: frames for no open stream are dropped, the link kept") {
  if (OverRdma()) SKIP("raw bytes need a TCP socket");
  TestServer server;
  RawPeer peer(server.uri);
  peer.Write(
      WireBytes(
          rpc::MakeMessageFrame(9, Buffer::CopyOf(std::string_view("m")))) +
      WireBytes(rpc::MakeHalfCloseFrame(9)) +
      WireBytes(rpc::MakeWindowFrame(9, 1, 0)) +
      WireBytes(rpc::MakeRequestFrame(2, "test.Test", "Echo", 0, 0,
                                      Buffer::CopyOf(std::string_view("ok")))));
  const auto [id, status] = peer.ReadResponse();
  CHECK(id == 2);
  CHECK(status.ok());
  CHECK(server.stats().stream_frames_dropped == 3);
  CHECK(server.stats().protocol_errors == 0);
}

// A method is registered as one stream kind; a request of another is
// answered INVALID_ARGUMENT naming the method, and the connection goes on.
TEST_CASE("streams: a streaming request to a unary method is refused") {
  if (OverRdma()) SKIP("raw bytes need a TCP socket");
  TestServer server;
  RawPeer peer(server.uri);
  peer.Write(
      WireBytes(rpc::MakeStreamRequestFrame(
          4, rpc::MethodId("test.Test", "Echo"), 0,
          rpc::CallHeader::kServerStreaming, 8, 1 << 20,
          Buffer::CopyOf(std::string_view("x")))) +
      WireBytes(rpc::MakeRequestFrame(5, "test.Test", "Echo", 0, 0,
                                      Buffer::CopyOf(std::string_view("y")))));
  const auto [refused_id, refused] = peer.ReadResponse();
  CHECK(refused_id == 4);
  CHECK(refused.code() == StatusCode::kInvalidArgument);
  CHECK(refused.message() ==
        "test.Test/Echo is a unary method; the call is server-streaming");
  const auto [id, status] = peer.ReadResponse();
  CHECK(id == 5);
  CHECK(status.ok());
  CHECK(server.calls_started() == 1);
}

// The client's side: a raw server answers the first request with `before`
// (frames for the call that a server may send, or may not), then its
// RESPONSE. Returns the call's result.
CallResult CallRawServer(
    const std::function<std::string(uint64_t call_id)>& before,
    rpc::ChannelStats* stats) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(
      io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  std::thread server([&] {
    boost::asio::ip::tcp::socket socket(io);
    acceptor.accept(socket);
    // The HELLOs: this server's, then the client's.
    const auto hello =
        transport::TcpControlFrame(transport::KeepaliveKind::kHello);
    boost::asio::write(socket, boost::asio::buffer(hello));
    std::array<std::byte, transport::kTcpControlFrameSize> greeting;
    boost::asio::read(socket, boost::asio::buffer(greeting));
    std::array<std::byte, 16> prefix_bytes;
    boost::asio::read(socket, boost::asio::buffer(prefix_bytes));
    const auto prefix = transport::DecodeFramePrefix(prefix_bytes, 1 << 20);
    std::string rest(prefix.prefix.header_size + prefix.prefix.payload_size,
                     '\0');
    boost::asio::read(socket, boost::asio::buffer(rest));
    const auto header = rpc::CallHeader::Decode(
        std::as_bytes(std::span(rest.data(), prefix.prefix.header_size)));
    const uint64_t id = header ? header->call_id() : 0;
    const std::string reply =
        before(id) +
        WireBytes(rpc::MakeResponseFrame(
            id, Status(), Buffer::CopyOf(std::string_view("done"))));
    boost::system::error_code ignored;
    boost::asio::write(socket, boost::asio::buffer(reply), ignored);
    char byte;  // Until the client closes.
    boost::asio::read(socket, boost::asio::buffer(&byte, 1), ignored);
  });
  CallResult result;
  {
    Channel channel("tcp://127.0.0.1:" +
                    std::to_string(acceptor.local_endpoint().port()));
    result = CallSync(channel, "Echo", "hi", CallOptions::WithTimeout(10s));
    *stats = channel.stats();
  }
  server.join();
  return result;
}

TEST_CASE("streams: a client drops MESSAGE and WINDOW for no open stream") {
  rpc::ChannelStats stats;
  const CallResult result = CallRawServer(
      [](uint64_t id) {
        return WireBytes(rpc::MakeWindowFrame(id, 1, 0)) +
               WireBytes(rpc::MakeMessageFrame(
                   id, Buffer::CopyOf(std::string_view("stray"))));
      },
      &stats);
  CHECK(result.status.ok());
  CHECK(result.response == "done");
  CHECK(stats.stream_frames_dropped == 2);
}

TEST_CASE("malformed: a server sending HALF_CLOSE loses the connection") {
  rpc::ChannelStats stats;
  const CallResult result = CallRawServer(
      [](uint64_t id) { return WireBytes(rpc::MakeHalfCloseFrame(id)); },
      &stats);
  CHECK(result.status.code() == StatusCode::kUnavailable);
  CHECK(result.status.message().find("frame of kind 5, which only a client "
                                     "sends") != std::string::npos);
}

// A client that sends beyond the window the server gave its stream loses
// that call (RESOURCE_EXHAUSTED), not the connection: the next call on it
// is served.
TEST_CASE("streams: a message beyond the window ends that call only") {
  if (OverRdma()) SKIP("raw bytes need a TCP socket");
  TestServer server;
  RawPeer peer(server.uri);
  std::string bytes = WireBytes(rpc::MakeStreamRequestFrame(
      3, rpc::MethodId("test.Test", "Hold"), 0,
      rpc::CallHeader::kClientStreaming, 0, 0, Buffer()));
  // Hold never reads: the initial window's messages are taken, one more
  // breaks it.
  for (uint64_t i = 0; i <= tunables::kInitialStreamWindowMessages; ++i) {
    bytes += WireBytes(
        rpc::MakeMessageFrame(3, Buffer::CopyOf(std::string_view("x"))));
  }
  bytes += WireBytes(rpc::MakeRequestFrame(
      4, "test.Test", "Echo", 0, 0, Buffer::CopyOf(std::string_view("ok"))));
  LogCapture log;
  peer.Write(bytes);
  const auto [broken_id, broken] = peer.ReadResponse();
  CHECK(broken_id == 3);
  CHECK(broken.code() == StatusCode::kResourceExhausted);
  CHECK(broken.message().find("stream window exceeded") != std::string::npos);
  const auto [id, status] = peer.ReadResponse();
  CHECK(id == 4);
  CHECK(status.ok());
  CHECK(server.stats().protocol_errors == 0);
  CHECK(WaitFor([&] { return server.stats().live_calls == 0; }));
}

TEST_CASE("malformed: a WINDOW that opens nothing, a HALF_CLOSE with bytes") {
  if (OverRdma()) SKIP("raw bytes need a TCP socket");
  for (const bool window : {true, false}) {
    CAPTURE(window);
    TestServer server;
    RawPeer peer(server.uri);
    rpc::CallHeader header;
    header
        .set_kind(window ? rpc::CallHeader::kWindow
                         : rpc::CallHeader::kHalfClose)
        .set_call_id(6)
        .set_payload_size(window ? 0 : 1);
    LogCapture log;
    peer.Write(WireBytes(RawFrame(header, window ? "" : "z")));
    CHECK(peer.ReadError() == boost::asio::error::eof);
    CHECK(server.stats().protocol_errors == 1);
    CHECK(server.Logged(
        log, window ? "WINDOW that opens nothing" : "HALF_CLOSE with a payload",
        spdlog::level::warn));
  }
}

// Metadata blocks no Channel sends (include/rdmarpc/metadata.h): a block that
// does not parse, or breaks the key rules, fails that call INVALID_ARGUMENT;
// the connection serves the next call. Trailers on a REQUEST break the
// protocol.
TEST_CASE("metadata: a malformed request block fails that call only") {
  if (OverRdma()) SKIP("raw bytes need a TCP socket");
  TestServer server;
  RawPeer peer(server.uri);
  rpc::Metadata bad_key;
  bad_key.Add("Upper", "v");
  peer.Write(
      WireBytes(rpc::MakeRequestFrame(1, "test.Test", "Echo", 0, 0, Buffer(),
                                      std::string_view("\x0a\x05"
                                                       "ab",
                                                       4))) +
      WireBytes(rpc::MakeRequestFrame(2, "test.Test", "Echo", 0, 0, Buffer(),
                                      rpc::EncodeMetadata(bad_key))) +
      WireBytes(rpc::MakeRequestFrame(3, "test.Test", "Echo", 0, 0,
                                      Buffer::CopyOf(std::string_view("ok")))));
  const auto [truncated_id, truncated] = peer.ReadResponse();
  CHECK(truncated_id == 1);
  CHECK(truncated.code() == StatusCode::kInvalidArgument);
  CHECK(truncated.message() == "request metadata does not parse");
  const auto [upper_id, upper] = peer.ReadResponse();
  CHECK(upper_id == 2);
  CHECK(upper.code() == StatusCode::kInvalidArgument);
  CHECK(upper.message().find("key 'Upper'") != std::string::npos);
  const auto [id, status] = peer.ReadResponse();
  CHECK(id == 3);
  CHECK(status.ok());
  CHECK(server.calls_started() == 1);
  CHECK(server.stats().protocol_errors == 0);
}

TEST_CASE("metadata: trailers on a request close the connection") {
  if (OverRdma()) SKIP("raw bytes need a TCP socket");
  TestServer server;
  RawPeer peer(server.uri);
  rpc::CallHeader header;
  header.set_kind(rpc::CallHeader::kRequest)
      .set_call_id(4)
      .set_service("test.Test")
      .set_method("Echo")
      .set_trailers("\x0a\x00");
  LogCapture log;
  peer.Write(WireBytes(RawFrame(header)));
  CHECK(peer.ReadError() == boost::asio::error::eof);
  CHECK(server.stats().protocol_errors == 1);
  CHECK(server.Logged(log, "trailers on a frame other than a RESPONSE",
                      spdlog::level::warn));
}

TEST_CASE("metadata: a server's malformed block fails that call only") {
  rpc::ChannelStats stats;
  const CallResult result = CallRawServer(
      [](uint64_t id) {
        return WireBytes(rpc::MakeResponseFrame(
            id, Status(), Buffer::CopyOf(std::string_view("early")), {},
            std::string_view("\x0a\x09", 2)));
      },
      &stats);
  CHECK(result.status.code() == StatusCode::kInternal);
  CHECK(result.status.message() == "response trailers does not parse");
}

TEST_CASE("connect: an unsupported scheme or bad URI is a clear error") {
  Channel channel("carrier-pigeon://somewhere:1");
  const CallResult result = CallSync(channel, "Echo", "");
  CHECK(result.status.code() == StatusCode::kUnavailable);
  CHECK(result.status.message().find("unsupported transport") !=
        std::string::npos);
}

}  // namespace
}  // namespace rdmarpc::testing
