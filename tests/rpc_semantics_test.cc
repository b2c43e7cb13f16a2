// The RPC core's semantics, over the transport under test (tcp by default):
// calls, deadlines, cancellation, errors, limits, payloads, load. With
// rpc_lifecycle_test.cc and rpc_wire_test.cc it makes one binary,
// rpc_semantics_test.
#include "tests/support/rpc_semantics.h"

#include <array>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch_test_macros.hpp>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "base/log.h"
#include "rdmarpc/memory.h"
#include "rpc/wire/wire_codec.h"
#include "tests/support/test_support.h"
#include "transport/factory/factory.h"
#include "transport/keepalive.h"
#include "transport/uri.h"

namespace rdmarpc::testing {
namespace {

using rpc::CallOptions;
using rpc::Channel;

TEST_CASE("echo: a call round-trips its payload") {
  TestServer server;
  Channel channel(server.uri);
  const CallResult result = CallSync(channel, "Echo", "hello rdmarpc");
  REQUIRE(result.status.ok());
  CHECK(result.response == "hello rdmarpc");
  CHECK(channel.state() == rpc::ChannelState::kReady);
}

TEST_CASE("deadline: a call past its deadline gets DEADLINE_EXCEEDED") {
  TestServer server;
  Channel channel(server.uri);
  const auto start = rpc::Clock::now();
  const CallResult result =
      CallSync(channel, "SleepMs", "2000", CallOptions::WithTimeout(50ms));
  CHECK(result.status.code() == StatusCode::kDeadlineExceeded);
  // Generous bound: the call must not have waited for the handler.
  CHECK(rpc::Clock::now() - start < 1500ms);
}

TEST_CASE("deadline: the handler reads the deadline the client set") {
  TestServer server;
  Channel channel(server.uri);
  const CallResult with =
      CallSync(channel, "Deadline", "", CallOptions::WithTimeout(30s));
  REQUIRE(with.status.ok());
  const int remaining_ms = std::stoi(with.response);
  CHECK(remaining_ms > 20000);
  CHECK(remaining_ms <= 30000);
  const CallResult without = CallSync(channel, "Deadline", "");
  REQUIRE(without.status.ok());
  CHECK(without.response == "none");
}

TEST_CASE("deadline: an already expired deadline fails without sending") {
  TestServer server;
  Channel channel(server.uri);
  const CallResult result = CallSync(
      channel, "Echo", "x", CallOptions::WithDeadline(rpc::Clock::now() - 1ms));
  CHECK(result.status.code() == StatusCode::kDeadlineExceeded);
  CHECK(server.calls_started() == 0);
}

// A bare server on the transport API that answers every request `delay`
// late, so the client sees a reply to a call it has already given up on.
class LateServer {
 public:
  explicit LateServer(std::chrono::milliseconds delay) : delay_(delay) {
    auto listener = transport::Listen(
        loop_.context(), ListenUri(), {},
        [this]() -> boost::asio::io_context& { return loop_.context(); },
        [this](std::shared_ptr<transport::Connection> connection) {
          auto observer = std::make_shared<Observer>(this, connection);
          connection->Start(observer);
        });
    REQUIRE(listener.ok());
    listener_ = std::move(*listener);
  }
  ~LateServer() { loop_.Stop(); }
  const std::string& uri() const { return listener_->uri(); }
  int requests() const { return requests_; }

 private:
  struct Observer : transport::ConnectionObserver {
    Observer(LateServer* server, std::shared_ptr<transport::Connection> c)
        : server(server), connection(std::move(c)) {}
    void OnFrame(transport::ReceivedFrame&& frame) override {
      rpc::CallHeader header;
      if (!rpc::DecodeCallHeader(frame, header).ok() ||
          header.kind() != rpc::CallHeader::kRequest) {
        return;
      }
      const uint64_t id = header.call_id();
      ++server->requests_;
      std::this_thread::sleep_for(server->delay_);
      if (auto c = connection.lock()) {
        c->Send(rpc::MakeResponseFrame(
                    id, Status(), Buffer::CopyOf(std::string_view("late"))))
            .IgnoreError();
      }
    }
    void OnClose(const Status&) override {}
    LateServer* server;
    // Weak: the connection holds its observer, and its close may not be
    // seen before the loop stops (LeakSanitizer found the cycle).
    std::weak_ptr<transport::Connection> connection;
  };

  std::chrono::milliseconds delay_;
  std::atomic<int> requests_{0};
  rpc::EventLoop loop_;
  std::unique_ptr<transport::Listener> listener_;
};

TEST_CASE("deadline: a late reply is dropped and the callback runs once") {
  LateServer server(300ms);
  Channel channel(server.uri());
  // Connect first. A call whose deadline passes while the channel is still
  // connecting is never sent (so no reply could come late), and in the
  // emulated Soft-RoCE VM a connect can take longer than the 50 ms below.
  REQUIRE(CallSync(channel, "Echo", "warm-up").status.ok());
  REQUIRE(channel.state() == rpc::ChannelState::kReady);
  std::atomic<int> callbacks{0};
  std::promise<Status> first;
  channel.Call("test.Test", "Echo", Buffer::CopyOf(std::string_view("x")),
               CallOptions::WithTimeout(50ms),
               [&](const Status& status, Buffer) {
                 if (callbacks++ == 0) first.set_value(status);
               });
  CHECK(first.get_future().get().code() == StatusCode::kDeadlineExceeded);
  REQUIRE(WaitFor([&] { return server.requests() == 2; }));
  REQUIRE(WaitFor([&] { return channel.stats().late_responses_dropped == 1; }));
  CHECK(callbacks == 1);
}

TEST_CASE("cancel: the client gets CANCELLED and the handler observes it") {
  TestServer server;
  Channel channel(server.uri);
  CancelWaitingCall(channel, server, 1);
  CHECK(server.cancels_observed() == 1);
  // The handler's reply to a cancelled call is not sent.
  REQUIRE(WaitFor([&] { return server.stats().responses_dropped == 1; }));
  CHECK(channel.stats().late_responses_dropped == 0);
}

// Busy and hybrid connections read in turns on the event loop: calls,
// the deadline timer and a cancellation must all still get their turn.
TEST_CASE("polling: busy and hybrid connections keep every call semantic") {
  for (const transport::PollMode mode :
       {transport::PollMode::kBusy, transport::PollMode::kHybrid}) {
    CAPTURE(static_cast<int>(mode));
    rpc::ServerOptions server_options;
    server_options.transport.poll_mode = mode;
    TestServer server(server_options);
    rpc::ChannelOptions channel_options;
    channel_options.transport.poll_mode = mode;
    Channel channel(server.uri, channel_options);
    const CallResult echo = CallSync(channel, "Echo", "polled");
    REQUIRE(echo.status.ok());
    CHECK(echo.response == "polled");
    const CallResult late =
        CallSync(channel, "SleepMs", "300", CallOptions::WithTimeout(50ms));
    CHECK(late.status.code() == StatusCode::kDeadlineExceeded);
    CancelWaitingCall(channel, server, 3);
    CHECK(server.cancels_observed() == 1);
  }
}

TEST_CASE("unimplemented: unknown service or method gives UNIMPLEMENTED") {
  TestServer server;
  Channel channel(server.uri);
  const CallResult no_method = CallSync(channel, "Nope", "");
  CHECK(no_method.status.code() == StatusCode::kUnimplemented);
  CHECK(no_method.status.message().find("Nope") != std::string::npos);
  const CallResult no_service =
      CallSync(channel, "Echo", "", {}, "test.Missing");
  CHECK(no_service.status.code() == StatusCode::kUnimplemented);
  CHECK(no_service.status.message().find("test.Missing") != std::string::npos);
  // The connection is still good.
  CHECK(CallSync(channel, "Echo", "still here").response == "still here");
}

TEST_CASE("method id: calls by id and by name reach the same methods") {
  TestServer server;
  Channel channel(server.uri);
  constexpr rpc::MethodRef kEcho("test.Test", "Echo");
  constexpr rpc::MethodRef kFail("test.Test", "Fail");
  // Alternating the method and how it is named: each request is resolved
  // anew or from the session's last method, never the wrong one.
  for (int round = 0; round < 2; ++round) {
    CHECK(CallSync(channel, kEcho, "by id").response == "by id");
    const CallResult failed = CallSync(channel, "Fail", "5:by name");
    CHECK(failed.status.code() == StatusCode::kNotFound);
    CHECK(failed.status.message() == "by name");
    CHECK(CallSync(channel, kEcho, "again").response == "again");
    CHECK(CallSync(channel, "Echo", "by name").response == "by name");
    const CallResult failed_by_id = CallSync(channel, kFail, "10:by id");
    CHECK(failed_by_id.status.code() == StatusCode::kAborted);
    CHECK(failed_by_id.status.message() == "by id");
  }
  CHECK(server.calls_started() == 10);
  CHECK(server.stats().unknown_method_calls == 0);
}

TEST_CASE("method id: an unknown id gives UNIMPLEMENTED naming the id") {
  TestServer server;
  Channel channel(server.uri);
  constexpr rpc::MethodRef kNope("test.Test", "Nope");
  // After a call by id, so the session has a last method to compare with.
  CHECK(CallSync(channel, rpc::MethodRef("test.Test", "Echo"), "x").response ==
        "x");
  const CallResult result = CallSync(channel, kNope, "");
  CHECK(result.status.code() == StatusCode::kUnimplemented);
  CHECK(result.status.message() ==
        fmt::format("unknown method id {:#018x}: no method of this server "
                    "has it",
                    kNope.id()));
  CHECK(server.stats().unknown_method_calls == 1);
  CHECK(CallSync(channel, "Echo", "still here").response == "still here");
}

// Registering a service again under its name replaces its methods. Their
// ids must follow: an id left pointing at the old entry would dispatch to a
// freed method.
TEST_CASE("method id: a service registered again takes over its ids") {
  rpc::Server server;
  rpc::Service first("test.Again");
  first.AddMethod("Old", [](std::shared_ptr<rpc::ServerCall> call) {
    call->Finish(Status(), Buffer::CopyOf(std::string_view("old")));
  });
  first.AddMethod("Same", [](std::shared_ptr<rpc::ServerCall> call) {
    call->Finish(Status(), Buffer::CopyOf(std::string_view("first")));
  });
  rpc::Service second("test.Again");
  second.AddMethod("Same", [](std::shared_ptr<rpc::ServerCall> call) {
    call->Finish(Status(), Buffer::CopyOf(std::string_view("second")));
  });
  server.RegisterService(&first);
  server.RegisterService(&second);
  const auto uri = server.Listen(ListenUri());
  REQUIRE(uri.ok());
  Channel channel(*uri);
  CHECK(CallSync(channel, rpc::MethodRef("test.Again", "Same"), "").response ==
        "second");
  CHECK(CallSync(channel, rpc::MethodRef("test.Again", "Old"), "")
            .status.code() == StatusCode::kUnimplemented);
  CHECK(CallSync(channel, "Old", "", {}, "test.Again").status.code() ==
        StatusCode::kUnimplemented);
}

TEST_CASE("errors: a handler's status and message reach the caller") {
  TestServer server;
  Channel channel(server.uri);
  const CallResult result =
      CallSync(channel, "Fail", "5:key 'k' does not exist");
  CHECK(result.status.code() == StatusCode::kNotFound);
  CHECK(result.status.message() == "key 'k' does not exist");
  CHECK(result.response.empty());
}

TEST_CASE("errors: a call the handler drops completes INTERNAL") {
  TestServer server;
  Channel channel(server.uri);
  const CallResult result = CallSync(channel, "Drop", "");
  CHECK(result.status.code() == StatusCode::kInternal);
}

TEST_CASE("peer loss: every pending call completes UNAVAILABLE exactly once") {
  auto server = std::make_unique<TestServer>();
  Channel channel(server->uri);
  constexpr int kCalls = 200;
  std::atomic<int> callbacks{0};
  std::atomic<int> unavailable{0};
  for (int i = 0; i < kCalls; ++i) {
    channel.Call("test.Test", "WaitCancel", Buffer(), CallOptions{},
                 [&](const Status& status, Buffer) {
                   callbacks++;
                   if (status.code() == StatusCode::kUnavailable) unavailable++;
                 });
  }
  REQUIRE(WaitFor([&] { return server->calls_started() == kCalls; }));
  server.reset();  // The server goes away with every call in flight.
  REQUIRE(WaitFor([&] { return callbacks == kCalls; }));
  std::this_thread::sleep_for(100ms);  // Nothing completes twice.
  CHECK(callbacks == kCalls);
  CHECK(unavailable == kCalls);
  CHECK(channel.stats().outstanding_calls == 0);
}

TEST_CASE("reconnect: the channel reconnects after the server returns") {
  rpc::ChannelOptions options;
  options.initial_backoff = 50ms;
  auto server = std::make_unique<TestServer>();
  const std::string uri = server->uri;
  Channel channel(uri, options);
  REQUIRE(CallSync(channel, "Echo", "one").status.ok());
  server.reset();
  REQUIRE(WaitFor([&] { return channel.state() == rpc::ChannelState::kIdle; }));

  // Nobody listens: the connect fails, and calls in backoff fail fast.
  const CallResult down = CallSync(channel, "Echo", "two");
  CHECK(down.status.code() == StatusCode::kUnavailable);
  CHECK(channel.state() == rpc::ChannelState::kTransientFailure);
  const CallResult fast = CallSync(channel, "Echo", "three");
  CHECK(fast.status.code() == StatusCode::kUnavailable);
  CHECK(fast.status.message().find("next attempt") != std::string::npos);

  // The server comes back on the same address.
  TestServer again({}, uri);
  REQUIRE(
      WaitFor([&] { return CallSync(channel, "Echo", "four").status.ok(); }));
  CHECK(channel.stats().connects == 2);
  CHECK(channel.stats().connect_failures >= 1);
}

TEST_CASE("limits: an oversized request gets RESOURCE_EXHAUSTED, then works") {
  rpc::ServerOptions options;
  options.transport.max_payload_size = 64 * 1024;
  TestServer server(options);
  LogCapture log;
  Channel channel(server.uri);
  const CallResult big =
      CallSync(channel, "Echo", std::string(100 * 1024, 'x'));
  CHECK(big.status.code() == StatusCode::kResourceExhausted);
  CHECK(big.status.message().find("exceeds") != std::string::npos);
  CHECK(server.Logged(log, "exceeds the receiver's maximum"));
  // The oversized payload was skipped: the stream is still in sync.
  CHECK(CallSync(channel, "Echo", "small").response == "small");
}

TEST_CASE("limits: an oversized response gets RESOURCE_EXHAUSTED") {
  TestServer server;
  rpc::ChannelOptions options;
  options.transport.max_payload_size = 1024;
  Channel channel(server.uri, options);
  const CallResult big = CallSync(channel, "Bytes", "4096");
  CHECK(big.status.code() == StatusCode::kResourceExhausted);
  CHECK(CallSync(channel, "Bytes", "512").response.size() == 512);
}

TEST_CASE("limits: the channel refuses a request over its own maximum") {
  TestServer server;
  rpc::ChannelOptions options;
  options.max_request_size = 10;
  Channel channel(server.uri, options);
  CHECK(CallSync(channel, "Echo", std::string(11, 'x')).status.code() ==
        StatusCode::kResourceExhausted);
  CHECK(server.calls_started() == 0);
}

TEST_CASE("malformed: a bad frame closes that connection, others are served") {
  if (OverRdma())
    SKIP("raw garbage needs a TCP socket; the RDMA suite has its own test");
  TestServer server;
  LogCapture log;
  Channel healthy(server.uri);
  REQUIRE(CallSync(healthy, "Echo", "before").status.ok());

  boost::asio::io_context io;
  boost::asio::ip::tcp::socket raw(io);
  const auto uri = transport::ParseUri(server.uri);
  raw.connect({boost::asio::ip::make_address(uri->host), uri->port});
  // A HELLO, as any client's first frame, then garbage.
  const auto hello =
      transport::TcpControlFrame(transport::KeepaliveKind::kHello);
  boost::asio::write(raw, boost::asio::buffer(hello));
  const std::string garbage = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  boost::asio::write(raw, boost::asio::buffer(garbage));
  // The server's HELLO, then nothing: it closed the connection.
  std::array<std::byte, transport::kTcpControlFrameSize> greeting;
  boost::asio::read(raw, boost::asio::buffer(greeting));
  CHECK(greeting == hello);
  char byte;
  boost::system::error_code error;
  boost::asio::read(raw, boost::asio::buffer(&byte, 1), error);
  CHECK(error == boost::asio::error::eof);  // The server closed it.
  CHECK(WaitFor(
      [&] { return server.Logged(log, "malformed frame: bad magic"); }));
  // Counted, though the transport (not the RPC layer) found it.
  CHECK(WaitFor([&] { return server.stats().protocol_errors == 1; }));
  CHECK(WaitFor([&] { return server.stats().connections == 1; }));

  CHECK(CallSync(healthy, "Echo", "after").response == "after");
}

TEST_CASE("load: 10,000 concurrent outstanding calls on one connection") {
  TestServer server;
  Channel channel(server.uri);
  constexpr int kCalls = 10000;
  std::atomic<int> ok{0};
  std::atomic<int> done{0};
  for (int i = 0; i < kCalls; ++i) {
    // Each call sleeps, so all of them are outstanding at once.
    channel.Call("test.Test", "SleepMs",
                 Buffer::CopyOf(std::string_view("300")),
                 CallOptions::WithTimeout(60s),
                 [&](const Status& status, Buffer response) {
                   if (status.ok() && response.view() == "slept") ok++;
                   done++;
                 });
  }
  CHECK(channel.stats().outstanding_calls > kCalls / 2);
  REQUIRE(WaitFor([&] { return done == kCalls; }, 60s));
  CHECK(ok == kCalls);
}

TEST_CASE("payloads: 0 B to 64 MiB round-trip intact") {
  TestServer server;
  Channel channel(server.uri);
  for (size_t size :
       {size_t{0}, size_t{1}, size_t{15}, size_t{4096}, size_t{16 * 1024 + 3},
        size_t{1 << 20}, size_t{64} << 20}) {
    Buffer request = Buffer::Allocate(size);
    for (size_t i = 0; i < size; ++i)
      request.data()[i] = std::byte(i * 131 + size);
    std::promise<std::pair<Status, Buffer>> result;
    channel.Call("test.Test", "Echo", Buffer::CopyOf(request.span()),
                 CallOptions::WithTimeout(60s),
                 [&](const Status& status, Buffer response) {
                   result.set_value({status, std::move(response)});
                 });
    auto [status, response] = result.get_future().get();
    INFO("size " << size);
    REQUIRE(status.ok());
    REQUIRE(response.size() == size);
    CHECK(std::equal(request.span().begin(), request.span().end(),
                     response.span().begin()));
  }
}

TEST_CASE("payloads: requests straight from registered memory arrive intact") {
  TestServer server;
  Channel channel(server.uri);
  auto arena = transport::MemoryRegistration::Allocate(9 << 20);
  REQUIRE(arena.ok());
  for (size_t i = 0; i < (9 << 20); ++i) {
    (*arena)->data()[i] = std::byte(i * 13 + 1);
  }
  // Overlapping slices of one registration, all in flight at once.
  const std::vector<std::pair<size_t, size_t>> slices = {
      {0, 1 << 20}, {12345, 8 << 20}, {100, 20000}, {0, 9 << 20}};
  std::vector<std::promise<std::pair<Status, Buffer>>> results(slices.size());
  for (size_t k = 0; k < slices.size(); ++k) {
    channel.Call("test.Test", "Echo",
                 (*arena)->Slice(slices[k].first, slices[k].second),
                 CallOptions::WithTimeout(120s),
                 [&, k](const Status& status, Buffer response) {
                   results[k].set_value({status, std::move(response)});
                 });
  }
  for (size_t k = 0; k < slices.size(); ++k) {
    auto [status, response] = results[k].get_future().get();
    INFO("slice " << k);
    REQUIRE(status.ok());
    REQUIRE(response.size() == slices[k].second);
    CHECK(std::memcmp(response.data(), (*arena)->data() + slices[k].first,
                      slices[k].second) == 0);
  }
}

TEST_CASE("load: 100 connections to one server") {
  TestServer server;
  constexpr int kChannels = 100;
  // The server sets connections up one after another on its event loop. In
  // the emulated Soft-RoCE VM each RDMA setup (QP, registered rings) takes
  // tens of milliseconds, so the last of 100 simultaneous connects can take
  // longer than the default 5 s: allow for that, since this test is about
  // serving 100 connections, not about how fast they connect.
  rpc::ChannelOptions options;
  if (OverRdma()) options.transport.connect_timeout = 60s;
  std::vector<std::unique_ptr<Channel>> channels;
  for (int i = 0; i < kChannels; ++i) {
    channels.push_back(std::make_unique<Channel>(server.uri, options));
  }
  std::atomic<int> ok{0};
  std::atomic<int> done{0};
  for (int i = 0; i < kChannels; ++i) {
    const std::string text = "channel " + std::to_string(i);
    channels[i]->Call("test.Test", "Echo", Buffer::CopyOf(text),
                      CallOptions::WithTimeout(30s),
                      [&, text](const Status& status, Buffer response) {
                        if (status.ok() && response.view() == text) ok++;
                        done++;
                      });
  }
  REQUIRE(WaitFor([&] { return done == kChannels; }, 30s));
  CHECK(ok == kChannels);
  CHECK(server.stats().connections == kChannels);
}

}  // namespace
}  // namespace rdmarpc::testing
