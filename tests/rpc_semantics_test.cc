// The RPC core's semantics, over the transport under test (tcp by default).
#include <array>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch_test_macros.hpp>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "base/log.h"
#include "base/tunables.h"
#include "rpc/wire_codec.h"
#include "tests/test_support.h"
#include "transport/factory/factory.h"
#include "transport/memory.h"
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
    void OnFrame(transport::ReceivedFrame frame) override {
      auto header = rpc::DecodeCallHeader(frame);
      if (!header.ok() || header->kind() != rpc::CallHeader::kRequest) return;
      const uint64_t id = header->call_id();
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

// Starts a WaitCancel call, the server's `nth` call, and cancels it once its
// handler runs: the client gets CANCELLED, and the handler observes it.
void CancelWaitingCall(Channel& channel, TestServer& server, int nth) {
  const int cancels = server.cancels_observed();
  std::promise<Status> done;
  const Channel::CallId id = channel.Call(
      "test.Test", "WaitCancel", Buffer(), CallOptions{},
      [&](const Status& status, Buffer) { done.set_value(status); });
  REQUIRE(WaitFor([&] { return server.calls_started() == nth; }));
  channel.Cancel(id);
  CHECK(done.get_future().get().code() == StatusCode::kCancelled);
  REQUIRE(WaitFor([&] { return server.cancels_observed() == cancels + 1; }));
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
  if (transport::ParseUri(ListenUri())->scheme != "tcp") {
    SKIP("raw garbage needs a TCP socket; the RDMA suite has its own test");
  }
  TestServer server;
  LogCapture log;
  Channel healthy(server.uri);
  REQUIRE(CallSync(healthy, "Echo", "before").status.ok());

  boost::asio::io_context io;
  boost::asio::ip::tcp::socket raw(io);
  const auto uri = transport::ParseUri(server.uri);
  raw.connect({boost::asio::ip::make_address(uri->host), uri->port});
  const std::string garbage = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  boost::asio::write(raw, boost::asio::buffer(garbage));
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

TEST_CASE("shutdown: in-flight calls finish within the grace period") {
  auto server = std::make_unique<TestServer>();
  Channel channel(server->uri);
  std::promise<CallResult> in_flight;
  channel.Call("test.Test", "SleepMs", Buffer::CopyOf(std::string_view("200")),
               CallOptions{}, [&](const Status& status, Buffer response) {
                 in_flight.set_value({status, std::string(response.view())});
               });
  REQUIRE(WaitFor([&] { return server->calls_started() == 1; }));
  server->Shutdown(5s);
  const CallResult result = in_flight.get_future().get();
  CHECK(result.status.ok());
  CHECK(result.response == "slept");
  CHECK(server->stats().live_calls == 0);
}

TEST_CASE("shutdown: calls past the grace period are cancelled") {
  auto server = std::make_unique<TestServer>();
  Channel channel(server->uri);
  std::promise<Status> in_flight;
  channel.Call(
      "test.Test", "WaitCancel", Buffer(), CallOptions{},
      [&](const Status& status, Buffer) { in_flight.set_value(status); });
  REQUIRE(WaitFor([&] { return server->calls_started() == 1; }));
  server->Shutdown(50ms);
  CHECK(in_flight.get_future().get().code() == StatusCode::kUnavailable);
  CHECK(server->cancels_observed() == 1);
}

// A call its handler holds past the server's lifetime is cancelled, and
// finishing and releasing it afterwards is safe. A call that kept a socket
// whose event loop had been destroyed would fail here (heap-use-after-free
// in ASan).
// ServerOptions::handler_threads: a handler that blocks runs on the server's
// pool, so the worker goes on reading its connections. Inline (the default)
// the Echo below waits the full 3 s behind the block on the same connection,
// and the block is over first.
TEST_CASE(
    "executor: a handler that blocks on the pool holds up no other call") {
  rpc::ServerOptions options;
  options.workers = 1;
  options.handler_threads = 2;
  TestServer server(options);
  Channel channel(server.uri);
  std::atomic<bool> block_over{false};
  std::promise<Status> blocked;
  channel.Call("test.Test", "BlockMs", Buffer::CopyOf(std::string_view("3000")),
               CallOptions{}, [&](const Status& status, Buffer) {
                 block_over = true;
                 blocked.set_value(status);
               });
  REQUIRE(WaitFor([&] { return server.calls_started() == 1; }));
  const CallResult echo = CallSync(channel, "Echo", "not held up");
  CHECK(echo.status.ok());
  CHECK(echo.response == "not held up");
  CHECK_FALSE(block_over);
  CHECK(blocked.get_future().get().ok());
}

TEST_CASE("executor: a handler on the pool sees its call cancelled") {
  rpc::ServerOptions options;
  options.handler_threads = 1;
  TestServer server(options);
  Channel channel(server.uri);
  CancelWaitingCall(channel, server, 1);
  // The handler counts the cancel, then finishes the call: wait for both.
  CHECK(WaitFor([&] { return server.stats().live_calls == 0; }));
}

// ServerOptions::handler_executor: the user's executor gets every handler,
// and none runs on the server's worker thread.
TEST_CASE("executor: handlers run on the executor the user passes") {
  boost::asio::thread_pool pool(1);
  std::atomic<int> tasks{0};
  std::promise<std::thread::id> pool_thread;
  boost::asio::post(pool,
                    [&] { pool_thread.set_value(std::this_thread::get_id()); });
  const std::thread::id expected = pool_thread.get_future().get();
  std::atomic<int> elsewhere{0};
  rpc::Service service("test.Where");
  service.AddMethod("Here", [&](std::shared_ptr<rpc::ServerCall> call) {
    if (std::this_thread::get_id() != expected) elsewhere++;
    call->Finish(Status(), Buffer::CopyOf(std::string_view("here")));
  });
  rpc::ServerOptions options;
  options.handler_executor = [&](UniqueFunction<void()> task) {
    tasks++;
    boost::asio::post(pool, std::move(task));
  };
  {
    rpc::Server server(options);
    server.RegisterService(&service);
    const auto uri = server.Listen(ListenUri());
    REQUIRE(uri.ok());
    Channel channel(*uri);
    for (int i = 0; i < 20; ++i) {
      const CallResult result =
          CallSync(channel, "Here", "", CallOptions{}, "test.Where");
      REQUIRE(result.status.ok());
      CHECK(result.response == "here");
    }
  }
  pool.join();  // Every task has run before the service goes.
  CHECK(tasks == 20);
  CHECK(elsewhere == 0);
}

// ChannelOptions::callback_threads: a callback that blocks runs on the
// channel's pool, and the loop goes on completing other calls meanwhile.
// Inline (the default) the second call's response would wait for the loop.
TEST_CASE("executor: a callback that blocks holds up no other call") {
  TestServer server;
  // Declared before the channel, which waits for its callbacks as it goes.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> blocking;
  std::promise<std::string> second;
  rpc::ChannelOptions options;
  options.callback_threads = 2;
  Channel channel(server.uri, options);
  channel.Call("test.Test", "Echo", Buffer::CopyOf(std::string_view("first")),
               CallOptions{}, [&](const Status&, Buffer) {
                 blocking.set_value();
                 released.wait();
               });
  blocking.get_future().wait();
  auto second_done = second.get_future();
  channel.Call("test.Test", "Echo", Buffer::CopyOf(std::string_view("second")),
               CallOptions{}, [&](const Status& status, Buffer response) {
                 second.set_value(status.ok() ? std::string(response.view())
                                              : status.ToString());
               });
  const bool in_time = second_done.wait_for(std::chrono::seconds(5)) ==
                       std::future_status::ready;
  release.set_value();
  REQUIRE(in_time);
  CHECK(second_done.get() == "second");
}

// ChannelOptions::callback_executor: every callback goes to the user's
// executor, those of calls that fail before they start too, and none runs
// on a loop thread.
TEST_CASE("executor: callbacks run on the executor the user passes") {
  TestServer server;
  boost::asio::thread_pool pool(1);
  std::promise<std::thread::id> pool_thread;
  boost::asio::post(pool,
                    [&] { pool_thread.set_value(std::this_thread::get_id()); });
  const std::thread::id expected = pool_thread.get_future().get();
  std::atomic<int> tasks{0};
  std::atomic<int> elsewhere{0};
  rpc::ChannelOptions options;
  options.callback_executor = [&](UniqueFunction<void()> task) {
    tasks++;
    boost::asio::post(pool, std::move(task));
  };
  {
    Channel channel(server.uri, options);
    for (int i = 0; i < 10; ++i) {
      std::promise<Status> done;
      channel.Call("test.Test", "Echo", Buffer::CopyOf(std::string_view("x")),
                   CallOptions{}, [&](const Status& status, Buffer) {
                     if (std::this_thread::get_id() != expected) elsewhere++;
                     done.set_value(status);
                   });
      CHECK(done.get_future().get().ok());
    }
    // Completed inside Call: its deadline has passed.
    std::promise<Status> late;
    CallOptions past;
    past.deadline = rpc::Clock::now() - std::chrono::seconds(1);
    channel.Call("test.Test", "Echo", Buffer(), past,
                 [&](const Status& status, Buffer) {
                   if (std::this_thread::get_id() != expected) elsewhere++;
                   late.set_value(status);
                 });
    CHECK(late.get_future().get().code() == StatusCode::kDeadlineExceeded);
  }
  pool.join();
  CHECK(tasks == 11);
  CHECK(elsewhere == 0);
}

// A channel destroyed from inside one of its own pooled callbacks cannot
// wait for that callback: it must not deadlock, and the calls it still has
// complete CANCELLED.
TEST_CASE("executor: a channel may be destroyed in its own pooled callback") {
  rpc::ServerOptions server_options;
  server_options.handler_threads = 2;  // Echo is not held up by BlockMs.
  TestServer server(server_options);
  rpc::ChannelOptions options;
  options.callback_threads = 1;
  auto channel = std::make_unique<Channel>(server.uri, options);
  std::promise<Status> stuck;
  channel->Call("test.Test", "BlockMs",
                Buffer::CopyOf(std::string_view("3000")), CallOptions{},
                [&](const Status& status, Buffer) { stuck.set_value(status); });
  REQUIRE(WaitFor([&] { return server.calls_started() == 1; }));
  std::promise<void> destroyed;
  std::promise<void> call_returned;
  std::shared_future<void> returned = call_returned.get_future().share();
  channel->Call("test.Test", "Echo", Buffer::CopyOf(std::string_view("bye")),
                CallOptions{}, [&](const Status&, Buffer) {
                  returned.wait();  // Call() is done with the channel.
                  channel.reset();
                  destroyed.set_value();
                });
  call_returned.set_value();
  auto done = destroyed.get_future();
  REQUIRE(done.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(stuck.get_future().get().code() == StatusCode::kCancelled);
}

TEST_CASE("server: a call may outlive its server") {
  std::shared_ptr<rpc::ServerCall> kept;
  std::promise<void> started;
  rpc::Service service("test.Keep");
  service.AddMethod("Keep", [&](std::shared_ptr<rpc::ServerCall> call) {
    kept = std::move(call);
    started.set_value();
  });
  std::promise<Status> outcome;
  {
    rpc::Server server;
    server.RegisterService(&service);
    const auto uri = server.Listen(ListenUri());
    REQUIRE(uri.ok());
    Channel channel(*uri);
    channel.Call(
        "test.Keep", "Keep", Buffer(), CallOptions{},
        [&](const Status& status, Buffer) { outcome.set_value(status); });
    started.get_future().wait();
    server.Shutdown(0ms);
    CHECK(outcome.get_future().get().code() == StatusCode::kUnavailable);
  }
  REQUIRE(kept);
  CHECK(kept->IsCancelled());
  kept->Finish(Status(), Buffer::CopyOf(std::string_view("too late")));
  kept.reset();  // Releases the session, connection and socket.
}

TEST_CASE("channel: destroying it completes outstanding calls with CANCELLED") {
  TestServer server;
  std::promise<Status> outcome;
  {
    Channel channel(server.uri);
    channel.Call(
        "test.Test", "WaitCancel", Buffer(), CallOptions{},
        [&](const Status& status, Buffer) { outcome.set_value(status); });
    REQUIRE(WaitFor([&] { return server.calls_started() == 1; }));
  }
  CHECK(outcome.get_future().get().code() == StatusCode::kCancelled);
}

// Destroying a Channel on its own loop thread (the last Stub dropped in a
// callback) cancels its outstanding calls. A destructor that joined that
// thread from itself would fail here with std::terminate.
TEST_CASE("channel: destroying it from its own callback is safe") {
  TestServer server;
  auto channel = std::make_shared<Channel>(server.uri);
  std::promise<Status> second;
  Channel* raw = channel.get();
  raw->Call("test.Test", "Echo", Buffer(), CallOptions{},
            [&, channel = std::move(channel)](const Status&, Buffer) mutable {
              // Start one more call, then drop the last reference here.
              channel->Call("test.Test", "WaitCancel", Buffer(), CallOptions{},
                            [&](const Status& status, Buffer) {
                              second.set_value(status);
                            });
              channel.reset();
            });
  CHECK(second.get_future().get().code() == StatusCode::kCancelled);
}

// A Cancel's completion is posted to the loop; destroying the channel right
// after still runs it, so every callback runs, with CANCELLED.
TEST_CASE("channel: completions posted before destruction still run") {
  TestServer server;
  std::atomic<int> callbacks{0};
  std::atomic<int> cancelled{0};
  {
    Channel channel(server.uri);
    REQUIRE(CallSync(channel, "Echo", "warm").status.ok());
    for (int i = 0; i < 50; ++i) {
      const auto id =
          channel.Call("test.Test", "WaitCancel", Buffer(), CallOptions{},
                       [&](const Status& status, Buffer) {
                         callbacks++;
                         if (status.code() == StatusCode::kCancelled)
                           cancelled++;
                       });
      channel.Cancel(id);
    }
  }
  CHECK(callbacks == 50);
  CHECK(cancelled == 50);
}

// A response header over 64 KiB would be refused by the transport and the
// call would hang, so a long status message is truncated: the call fails with
// its own code and the message's start.
TEST_CASE("errors: a status message too long for a header is truncated") {
  TestServer server;
  Channel channel(server.uri);
  const CallResult result =
      CallSync(channel, "Fail", "5:" + std::string(100 * 1024, 'm'),
               CallOptions::WithTimeout(10s));
  CHECK(result.status.code() == StatusCode::kNotFound);
  CHECK(result.status.message().size() <= tunables::kMaxStatusMessageSize + 3);
  CHECK(result.status.message().rfind("mmm", 0) == 0);
}

TEST_CASE("errors: names too long for a header fail with INVALID_ARGUMENT") {
  TestServer server;
  Channel channel(server.uri);
  const CallResult result = CallSync(channel, std::string(70 * 1024, 'x'), "",
                                     CallOptions::WithTimeout(10s));
  CHECK(result.status.code() == StatusCode::kInvalidArgument);
}

// A status message that is not UTF-8 arrives byte for byte, on the same
// connection. Carried as a proto3 string, it would make the peer's header
// unparseable and close the connection for every call.
TEST_CASE("errors: a status message that is not UTF-8 arrives intact") {
  TestServer server;
  Channel channel(server.uri);
  const std::string message = "bad \xff\xfe bytes";
  const CallResult result = CallSync(channel, "Fail", "13:" + message);
  CHECK(result.status.code() == StatusCode::kInternal);
  CHECK(result.status.message() == message);
  CHECK(CallSync(channel, "Echo", "alive").response == "alive");
  CHECK(channel.stats().connects == 1);
}

// time_point::max() (the usual "no deadline") and duration::max() mean no
// deadline. A server whose now + timeout overflowed into the past would drop
// every reply here.
TEST_CASE("deadline: a deadline at the end of time means no deadline") {
  TestServer server;
  Channel channel(server.uri);
  const CallResult max_deadline =
      CallSync(channel, "Deadline", "",
               CallOptions::WithDeadline(rpc::Clock::time_point::max()));
  REQUIRE(max_deadline.status.ok());
  CHECK(max_deadline.response == "none");
  const CallResult max_timeout =
      CallSync(channel, "Echo", "x",
               CallOptions::WithTimeout(rpc::Clock::duration::max()));
  CHECK(max_timeout.status.ok());
}

// An exception from a completion callback does not stall the connection:
// later calls on it still complete. One that escaped into the transport's
// read loop would stall the connection for good.
TEST_CASE("errors: a callback that throws does not stall the connection") {
  TestServer server;
  Channel channel(server.uri);
  std::promise<void> threw;
  channel.Call("test.Test", "Echo", Buffer(), CallOptions{},
               [&](const Status&, Buffer) {
                 threw.set_value();
                 throw std::runtime_error("user code failed");
               });
  threw.get_future().wait();
  CHECK(CallSync(channel, "Echo", "after", CallOptions::WithTimeout(10s))
            .response == "after");
  CHECK(channel.stats().connects == 1);
}

// A peer that writes raw bytes over TCP: for input no Channel would send.
struct RawPeer {
  explicit RawPeer(const std::string& server_uri) {
    const auto uri = transport::ParseUri(server_uri);
    socket.connect({boost::asio::ip::make_address(uri->host), uri->port});
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
  for (size_t i = 0; i < frame.payload_slices; ++i) {
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
  if (transport::ParseUri(ListenUri())->scheme != "tcp") {
    SKIP("raw bytes need a TCP socket");
  }
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
  if (transport::ParseUri(ListenUri())->scheme != "tcp") {
    SKIP("raw bytes need a TCP socket");
  }
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
  if (transport::ParseUri(ListenUri())->scheme != "tcp") {
    SKIP("raw bytes need a TCP socket");
  }
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
  if (transport::ParseUri(ListenUri())->scheme != "tcp") {
    SKIP("raw bytes need a TCP socket");
  }
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
  if (transport::ParseUri(ListenUri())->scheme != "tcp") {
    SKIP("raw bytes need a TCP socket");
  }
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
  if (transport::ParseUri(ListenUri())->scheme != "tcp") {
    SKIP("raw bytes need a TCP socket");
  }
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
  if (transport::ParseUri(ListenUri())->scheme != "tcp") {
    SKIP("raw bytes need a TCP socket");
  }
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
  if (transport::ParseUri(ListenUri())->scheme != "tcp") {
    SKIP("raw bytes need a TCP socket");
  }
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
  if (transport::ParseUri(ListenUri())->scheme != "tcp") {
    SKIP("raw bytes need a TCP socket");
  }
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

// Metadata blocks no Channel sends (rpc/metadata.h): a block that does not
// parse, or breaks the key rules, fails that call INVALID_ARGUMENT; the
// connection serves the next call. Trailers on a REQUEST break the protocol.
TEST_CASE("metadata: a malformed request block fails that call only") {
  if (transport::ParseUri(ListenUri())->scheme != "tcp") {
    SKIP("raw bytes need a TCP socket");
  }
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
  if (transport::ParseUri(ListenUri())->scheme != "tcp") {
    SKIP("raw bytes need a TCP socket");
  }
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
