// Channels share the process's event-loop threads (rpc/client/client_loops.h):
// a Channel is a connection, not a thread. Runs over tcp:// here and over
// rdma:// in the Soft-RoCE VM (tools/softroce/suite).
#include "rpc/client/client_loops.h"

#include <boost/asio/execution/context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/query.hpp>
#include <catch2/catch_test_macros.hpp>
#include <future>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "base/process_stats.h"
#include "rdmarpc/channel.h"
#include "tests/support/test_support.h"

namespace rdmarpc::testing {
namespace {

constexpr rpc::MethodRef kEcho("test.Test", "Echo");

// Threads of this process now.
long long Threads() { return ProcessStatusField(0, "Threads"); }

// The io_context behind a channel's executor: its loop.
const void* LoopOf(const rpc::Channel& channel) {
  return &boost::asio::query(channel.executor(),
                             boost::asio::execution::context);
}

// Keeps a channel's loop busy until the promise returned is set: whatever is
// posted to the loop meanwhile waits behind it.
std::promise<void> HoldLoop(const rpc::Channel& channel) {
  std::promise<void> release;
  boost::asio::post(channel.executor(),
                    [held = release.get_future().share()] { held.wait(); });
  return release;
}

TEST_CASE("client loops: many channels to one server add no thread") {
  // Each RDMA connection still pins MiBs on both ends (one process here).
  const int count = OverRdma() ? 16 : 64;
  const int loops = static_cast<int>(rpc::ClientLoops::DefaultSize());
  TestServer server;
  const long long without_channels = Threads();
  std::vector<std::unique_ptr<rpc::Channel>> channels;
  auto add_and_call = [&] {
    channels.push_back(std::make_unique<rpc::Channel>(server.uri));
    const CallResult result = CallSync(*channels.back(), kEcho, "hi");
    INFO(result.status.ToString());
    REQUIRE(result.status.ok());
    REQUIRE(result.response == "hi");
  };
  // One channel per loop: the pool's threads, and what a loop starts on its
  // first connect (Asio's resolver thread; over rdma the device-event
  // thread), now exist.
  for (int i = 0; i < loops; ++i) add_and_call();
  const long long warm = Threads();
  for (int i = loops; i < count; ++i) add_and_call();
  CHECK(Threads() == warm);
  CHECK(server.stats().connections == static_cast<uint64_t>(count));
  // Spread round robin over every loop of the pool, and only those.
  std::set<const void*> used;
  for (const auto& channel : channels) used.insert(LoopOf(*channel));
  CHECK(used.size() == rpc::ClientLoops::DefaultSize());
  // With every channel gone the pool stops: a process holding no Channel
  // runs no client thread.
  channels.clear();
  CHECK(WaitFor([&] { return Threads() == without_channels; }));
}

TEST_CASE("client loops: a busy-polling channel gets a loop of its own") {
  TestServer server;
  rpc::Channel shared(server.uri);
  rpc::ChannelOptions options;
  options.transport.poll_mode = transport::PollMode::kBusy;
  rpc::Channel polling(server.uri, options);
  REQUIRE(CallSync(polling, kEcho, "spin").status.ok());
  std::set<const void*> pool;
  std::vector<std::unique_ptr<rpc::Channel>> more;
  for (size_t i = 0; i < rpc::ClientLoops::DefaultSize(); ++i) {
    more.push_back(std::make_unique<rpc::Channel>(server.uri));
    pool.insert(LoopOf(*more.back()));
  }
  CHECK(pool.count(LoopOf(shared)) == 1);
  CHECK(pool.count(LoopOf(polling)) == 0);
}

TEST_CASE(
    "client loops: a destroyed channel's due callbacks run before its "
    "destructor returns, though the shared loop keeps running") {
  TestServer server;
  auto channel = std::make_unique<rpc::Channel>(server.uri);
  REQUIRE(CallSync(*channel, kEcho, "warm").status.ok());
  // Hold the channel's loop, then make a call whose failure is posted
  // behind the hold (its deadline has passed already).
  std::promise<void> release = HoldLoop(*channel);
  bool completed = false;
  channel->Call(kEcho, Buffer::CopyOf("late"),
                rpc::CallOptions::WithDeadline(rpc::Clock::now() - 1s),
                [&](const Status& status, Buffer) {
                  completed = status.code() == StatusCode::kDeadlineExceeded;
                });
  std::thread releaser([&] {
    std::this_thread::sleep_for(200ms);
    release.set_value();
  });
  channel.reset();  // Waits for the loop to reach the call's failure.
  CHECK(completed);
  releaser.join();
}

TEST_CASE("client loops: the last channel destroyed in its own callback") {
  TestServer server;
  auto channel = std::make_shared<rpc::Channel>(server.uri);
  REQUIRE(CallSync(*channel, kEcho, "warm").status.ok());
  // Hold the loop until this thread has let go, so the callback's copy is
  // the last, and the pool is released on one of its own threads.
  std::promise<void> release = HoldLoop(*channel);
  std::promise<void> done;
  channel->Call(kEcho, Buffer::CopyOf("bye"), rpc::CallOptions{},
                [&, channel](const Status& status, Buffer) mutable {
                  CHECK(status.ok());
                  CHECK(channel.use_count() == 1);
                  channel.reset();
                  done.set_value();
                });
  channel.reset();
  release.set_value();
  REQUIRE(done.get_future().wait_for(30s) == std::future_status::ready);
  // A new channel starts a new pool and works.
  rpc::Channel again(server.uri);
  CHECK(CallSync(again, kEcho, "again").status.ok());
}

}  // namespace
}  // namespace rdmarpc::testing
