// rpc_semantics_test (rpc_semantics_test.cc): shutdown, the executors
// handlers and callbacks run on, servers, channels and calls outliving one
// another, and statuses at the header's limits.
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <catch2/catch_test_macros.hpp>
#include <future>
#include <thread>

#include "rdmarpc/tunables.h"
#include "tests/support/rpc_semantics.h"
#include "tests/support/test_support.h"
#include "transport/factory/factory.h"

namespace rdmarpc::testing {
namespace {

using rpc::CallOptions;
using rpc::Channel;

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

// A handler that drops a live call is a bug in it: the client gets INTERNAL
// (never a call that hangs), and the server says so. A cancelled call may be
// dropped quietly (stream_test).
TEST_CASE("errors: a handler that drops a live call") {
  LogCapture log;
  rpc::Service service("test.Drop");
  service.AddMethod("Drop", [](std::shared_ptr<rpc::ServerCall>) {});
  rpc::Server server;
  server.RegisterService(&service);
  const StatusOr<std::string> bound = server.Listen(ListenUri());
  REQUIRE(bound.ok());
  Channel channel(*bound);
  std::promise<Status> done;
  channel.Call("test.Drop", "Drop", Buffer(), CallOptions::WithTimeout(10s),
               [&](const Status& status, Buffer) { done.set_value(status); });
  const Status status = done.get_future().get();
  CHECK(status.code() == StatusCode::kInternal);
  CHECK(log.Contains(spdlog::level::warn, "without finishing"));
}

// This binary links the server's core without the admin endpoint
// (//rpc/builtin:admin): asking for one is a clear error, not a silent no-op.
TEST_CASE("errors: admin_listen without the admin endpoint linked in") {
  REQUIRE(internal::admin_from_options == nullptr);
  rpc::ServerOptions options;
  options.admin_listen = "http://127.0.0.1:0";
  rpc::Server server(options);
  const StatusOr<std::string> bound = server.Listen(ListenUri());
  REQUIRE(!bound.ok());
  CHECK(bound.status().code() == StatusCode::kFailedPrecondition);
  CHECK(bound.status().message().find("//rpc/builtin:admin") !=
        std::string::npos);
  CHECK(server.admin_uri().empty());
}

}  // namespace
}  // namespace rdmarpc::testing
