// rdma_transport_test (rdma_transport_test.cc): the device, port and GID a
// URI picks, the registered pools and their caps, the shared bounce chunks,
// oversized payloads, and a QP forced into the error state.

#include <boost/asio/post.hpp>
#include <catch2/catch_test_macros.hpp>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "rpc/common/event_loop.h"
#include "tests/support/rdma_pair.h"
#include "transport/factory/factory.h"
#include "transport/rdma/device_info.h"
#include "transport/rdma/rdma_connection.h"
#include "transport/uri.h"

namespace rdmarpc::transport::testing {
namespace {

using namespace std::chrono_literals;

// Connects to `uri` on `loop`; the connection or why not.
StatusOr<std::shared_ptr<Connection>> ConnectTo(rpc::EventLoop& loop,
                                                const std::string& uri) {
  std::promise<StatusOr<std::shared_ptr<Connection>>> connected;
  Connect(loop.context(), uri, TransportOptions{},
          [&](StatusOr<std::shared_ptr<Connection>> c) {
            connected.set_value(std::move(c));
          });
  return connected.get_future().get();
}

// The QP's path, read on its loop.
rdma::RdmaConnection::Path PathOf(const std::shared_ptr<Connection>& c) {
  auto rdma = std::dynamic_pointer_cast<rdma::RdmaConnection>(c);
  REQUIRE(rdma != nullptr);
  std::promise<StatusOr<rdma::RdmaConnection::Path>> done;
  boost::asio::post(rdma->executor(),
                    [&] { done.set_value(rdma->QueryPath()); });
  auto path = done.get_future().get();
  REQUIRE(path.ok());
  return *path;
}

TEST_CASE("rdma: URI options pick the device, GID and QoS of the path") {
  auto devices = rdma::ListDevices();
  REQUIRE(devices.ok());
  REQUIRE(!devices->empty());
  const std::string device = devices->front().name;
  auto chosen = rdma::ChooseGid(device, 1, -1);
  REQUIRE(chosen.ok());
  CHECK(chosen->type == "RoCE v2");
  // A GID that is no IPv4 address: the link-local one, which every RoCE
  // port has.
  int not_ipv4 = -1;
  for (const auto& gid : devices->front().ports.front().gids) {
    if (gid.gid.rfind("::ffff:", 0) != 0 && not_ipv4 < 0) {
      not_ipv4 = int(gid.index);
    }
  }
  REQUIRE(not_ipv4 >= 0);

  rpc::EventLoop server_loop, client_loop;
  std::mutex mu;
  std::vector<std::shared_ptr<Connection>> accepted;
  const std::string options = "?device=" + device +
                              "&gid_index=" + std::to_string(chosen->index) +
                              "&tos=32";
  auto listener = Listen(
      server_loop.context(), "rdma://0.0.0.0:0" + options, TransportOptions{},
      [&]() -> boost::asio::io_context& { return server_loop.context(); },
      [&](std::shared_ptr<Connection> c) {
        std::lock_guard lock(mu);
        accepted.push_back(std::move(c));
      });
  REQUIRE(listener.ok());
  // Bound to the GID's address, not to every address.
  auto bound = ParseUri((*listener)->uri());
  REQUIRE(bound.ok());
  CHECK(bound->host == chosen->address);
  const std::string target =
      "rdma://" + chosen->address + ":" + std::to_string(bound->port);

  SECTION("chosen as asked") {
    auto c =
        ConnectTo(client_loop, target + options + "&timeout=17&retry_count=5");
    REQUIRE(c.ok());
    const auto path = PathOf(*c);
    CHECK(path.device == device);
    CHECK(path.port == 1);
    CHECK(path.gid_index == chosen->index);
    CHECK(path.traffic_class == 32);
    CHECK(path.ack_timeout == 17);
    CHECK(path.retry_count == 5);
    // READ depth, both ways: the cap (rxe allows 128), as the listener
    // accepted it.
    CHECK(path.reads_issued == tunables::kRdmaMaxReadDepth);
    CHECK(path.reads_served == tunables::kRdmaMaxReadDepth);
    std::shared_ptr<Connection> server_side;
    for (int i = 0; i < 5000 && !server_side; ++i) {
      {
        std::lock_guard lock(mu);
        if (!accepted.empty()) server_side = accepted.front();
      }
      if (!server_side) std::this_thread::sleep_for(1ms);
    }
    REQUIRE(server_side != nullptr);
    const auto served = PathOf(server_side);
    CHECK(served.reads_issued == tunables::kRdmaMaxReadDepth);
    CHECK(served.reads_served == tunables::kRdmaMaxReadDepth);
    (*c)->Close(Status(StatusCode::kCancelled, "done"));
  }
  SECTION("a device, GID or option that does not exist is refused") {
    auto none = ConnectTo(client_loop, target + "?device=nosuch0");
    REQUIRE(!none.ok());
    CHECK(none.status().message().find("no RDMA device named 'nosuch0' "
                                       "(devices: " +
                                       device) != std::string::npos);
    auto far =
        ConnectTo(client_loop, target + "?device=" + device + "&gid_index=999");
    REQUIRE(!far.ok());
    CHECK(far.status().message().find("has no valid GID 999 (its GIDs: ") !=
          std::string::npos);
    auto v6 =
        ConnectTo(client_loop, target + "?device=" + device +
                                   "&gid_index=" + std::to_string(not_ipv4));
    REQUIRE(!v6.ok());
    CHECK(v6.status().message().find("not an IPv4 address") !=
          std::string::npos);
    auto mtu = ConnectTo(client_loop, target + "?mtu=1024");
    REQUIRE(!mtu.ok());
    CHECK(mtu.status().code() == StatusCode::kInvalidArgument);
    CHECK(mtu.status().message().find("ip link set DEV mtu") !=
          std::string::npos);
  }
  {
    std::lock_guard lock(mu);
    for (auto& c : accepted) c->Close(Status(StatusCode::kCancelled, "done"));
  }
  std::this_thread::sleep_for(50ms);
}

// The pools' cap (TransportOptions::rdma_max_pool_bytes): at it they stop
// growing, and a connection that would need more is refused, saying so;
// the ones open carry on.
TEST_CASE(
    "rdma: pools stop at rdma_max_pool_bytes; the next connection fails") {
  TransportOptions options;
  // This process's pools, and each side's first chunks of receive buffers
  // and send slots (one group on each loop): room for about ten
  // connections, not forty.
  const uint64_t before = rdma::PooledRegisteredBytes();
  options.rdma_max_pool_bytes =
      before + 2 *
                   uint64_t{tunables::kRdmaPoolChunkBuffers +
                            tunables::kRdmaSendChunkBuffers} *
                   tunables::kRdmaReceiveBufferSize;
  rpc::EventLoop server_loop, client_loop;
  std::mutex mu;
  std::vector<std::shared_ptr<Connection>> accepted;
  auto listener = Listen(
      server_loop.context(), RdmaUri(), options,
      [&]() -> boost::asio::io_context& { return server_loop.context(); },
      [&](std::shared_ptr<Connection> c) {
        std::lock_guard lock(mu);
        accepted.push_back(std::move(c));
      });
  REQUIRE(listener.ok());
  std::vector<std::shared_ptr<Connection>> open;
  Status refused;
  while (open.size() < 200 && refused.ok()) {
    std::promise<StatusOr<std::shared_ptr<Connection>>> connected;
    Connect(client_loop.context(), (*listener)->uri(), options,
            [&](StatusOr<std::shared_ptr<Connection>> c) {
              connected.set_value(std::move(c));
            });
    auto c = connected.get_future().get();
    if (c.ok()) {
      open.push_back(*c);
    } else {
      refused = c.status();
    }
  }
  INFO(open.size() << " connections, then: " << refused.ToString());
  REQUIRE(!refused.ok());
  CHECK(open.size() < 40);
  CHECK(refused.message().find("rdma_max_pool_bytes") != std::string::npos);
  CHECK(rdma::PooledRegisteredBytes() <= options.rdma_max_pool_bytes);
  // The first connection still carries frames.
  auto recorder = std::make_shared<Recorder>();
  std::shared_ptr<Connection> server_side;
  {
    std::lock_guard lock(mu);
    REQUIRE(!accepted.empty());
    server_side = accepted.front();
  }
  server_side->Start(recorder);
  open.front()->Start(std::make_shared<Recorder>());
  REQUIRE(open.front()->Send(MakeFrame(16)).ok());
  CHECK(WaitUntil([&] { return recorder->count() == 1; }));
  for (auto& c : open) c->Close(Status(StatusCode::kCancelled, "done"));
  {
    std::lock_guard lock(mu);
    for (auto& c : accepted) c->Close(Status(StatusCode::kCancelled, "done"));
  }
  std::this_thread::sleep_for(50ms);
}

// A receive pool that once failed to grow tries again later: before, one
// failure (another loop's pools at the cap) stopped its growth for good.
// Pair `a` and pair `b` (a group on each of their four loops) leave no room
// under rdma_max_pool_bytes for a second chunk of receives; b's busy peer
// makes b's server group try, and fail. Once pair a is gone, a busy peer
// again makes it grow.
TEST_CASE("rdma: a receive pool that could not grow tries again later") {
  const uint64_t group_bytes = uint64_t{tunables::kRdmaPoolChunkBuffers +
                                        tunables::kRdmaSendChunkBuffers} *
                               tunables::kRdmaReceiveBufferSize;
  const uint64_t cap = rdma::PooledRegisteredBytes() + 4 * group_bytes +
                       group_bytes / 2;  // Not one more receive chunk.
  const PairOptions capped{.pooled_grants = false, .max_pool_bytes = cap};
  auto a = std::make_unique<Pair>(capped);
  Pair b(capped);
  auto busy = [&b](size_t frames) {
    const size_t before = b.recorder->count();
    for (size_t i = 0; i < frames; ++i) {
      REQUIRE(b.client->Send(MakeFrame(16)).ok());
    }
    REQUIRE(b.WaitFor(before + frames));
  };
  busy(2000);
  const uint64_t at_cap = rdma::PooledRegisteredBytes();
  INFO("pooled bytes: cap " << cap << ", with both pairs " << at_cap);
  REQUIRE(at_cap <= cap);
  a.reset();  // Its groups, and their pools, go.
  REQUIRE(WaitUntil([&] {
    return rdma::PooledRegisteredBytes() + 2 * group_bytes <= at_cap;
  }));
  const uint64_t freed = rdma::PooledRegisteredBytes();
  std::this_thread::sleep_for(tunables::kRdmaReceiveGrowthRetry + 200ms);
  busy(2000);
  INFO("pooled bytes once pair a was gone " << freed << ", after more load "
                                            << rdma::PooledRegisteredBytes());
  CHECK(rdma::PooledRegisteredBytes() > freed);
  CHECK(b.recorder->intact);
}

// A large payload in unregistered memory is copied through bounce chunks
// that the loop's connections share: eight connections sending one each
// register the loop's chunks, not a set each.
TEST_CASE("rdma: connections on a loop share their bounce chunks") {
  TransportOptions options;
  // Grants registered one by one and gone once delivered, so that what
  // stays registered is the senders' (the grant pool would keep its blocks).
  options.rdma_pooled_grants = false;
  rpc::EventLoop server_loop, client_loop;
  std::mutex mu;
  std::vector<std::shared_ptr<Connection>> accepted;
  auto recorder = std::make_shared<Recorder>();
  auto listener = Listen(
      server_loop.context(), RdmaUri(), options,
      [&]() -> boost::asio::io_context& { return server_loop.context(); },
      [&](std::shared_ptr<Connection> c) {
        c->Start(recorder);
        std::lock_guard lock(mu);
        accepted.push_back(std::move(c));
      });
  REQUIRE(listener.ok());
  constexpr int kConnections = 8;
  std::vector<std::shared_ptr<Connection>> clients;
  for (int i = 0; i < kConnections; ++i) {
    std::promise<StatusOr<std::shared_ptr<Connection>>> connected;
    Connect(client_loop.context(), (*listener)->uri(), options,
            [&](StatusOr<std::shared_ptr<Connection>> c) {
              connected.set_value(std::move(c));
            });
    auto c = connected.get_future().get();
    REQUIRE(c.ok());
    (*c)->Start(std::make_shared<Recorder>());
    clients.push_back(*c);
  }
  const uint64_t registered = rdma::LiveRegisteredBytes();
  constexpr size_t kPayload = 2 << 20;  // Two bounce chunks' worth.
  for (auto& c : clients) REQUIRE(c->Send(MakeFrame(kPayload)).ok());
  REQUIRE(WaitUntil([&] { return recorder->count() == kConnections; }));
  {
    std::lock_guard lock(recorder->mu);
    CHECK(recorder->intact);
  }
  for (auto& c : clients) {
    CHECK(WaitUntil([&] { return c->stats().rdma_writes == 1; }));
    CHECK(c->stats().staged_bytes >= kPayload);
  }
  // The grants are gone once delivered; what stays registered is the
  // loop's chunks (at most kRdmaGroupBounceChunks), and a pool chunk or two
  // of receive buffers lent to the busy peers (before: kRdmaBounceChunks
  // MiB for every connection, 33 MiB here).
  const uint64_t bounce = uint64_t{tunables::kRdmaGroupBounceChunks} *
                          tunables::kRdmaBounceChunkSize;
  INFO("registered " << rdma::LiveRegisteredBytes() - registered
                     << " bytes more");
  CHECK(rdma::LiveRegisteredBytes() - registered <= bounce + (4u << 20));
  for (auto& c : clients) c->Close(Status(StatusCode::kCancelled, "done"));
  {
    std::lock_guard lock(mu);
    for (auto& c : accepted) c->Close(Status(StatusCode::kCancelled, "done"));
  }
  std::this_thread::sleep_for(50ms);
}

// Answers every frame from inside OnFrame, and notes whether the answer had
// been posted when Send returned.
struct Answerer : ConnectionObserver {
  void OnFrame(ReceivedFrame&&) override {
    std::lock_guard lock(mu);
    auto c = connection.lock();
    if (!c) return;
    const uint64_t before = c->stats().frames_sent;
    if (c->Send(MakeFrame(16)).ok()) ++answered;
    if (c->stats().frames_sent > before) ++posted_at_once;
  }
  void OnClose(const Status&) override {}
  std::mutex mu;
  std::weak_ptr<Connection> connection;  // (It holds us.)
  int answered = 0;
  int posted_at_once = 0;
};

// A reply must not wait for the handler's bookkeeping after Send (server
// metrics, releasing the call) nor for the rest of the drain: when its
// request was the last completion polled, Send posts it.
TEST_CASE("rdma: a reply to the last completion polled is posted in Send") {
  for (const PollMode mode : {PollMode::kEvent, PollMode::kBusy}) {
    auto answerer = std::make_shared<Answerer>();
    Pair pair({.mode = mode, .server_observer = answerer});
    {
      std::lock_guard lock(answerer->mu);
      answerer->connection = pair.server;
    }
    // One exchange first: a frame that arrives before the server's Start
    // has run is kept and delivered by Start, outside any poll, so its
    // answer goes through the queue (a busy poll can get there first).
    REQUIRE(pair.client->Send(MakeFrame(16)).ok());
    REQUIRE(WaitUntil([&] { return pair.client_recorder->count() == 1; }));
    uint64_t direct = 0;
    {
      std::lock_guard lock(answerer->mu);
      answerer->answered = answerer->posted_at_once = 0;
      direct = pair.server->stats().frames_written_directly;
    }
    constexpr size_t kPings = 20;
    for (size_t i = 0; i < kPings; ++i) {  // One at a time.
      REQUIRE(pair.client->Send(MakeFrame(16)).ok());
      REQUIRE(
          WaitUntil([&] { return pair.client_recorder->count() == i + 2; }));
    }
    std::lock_guard lock(answerer->mu);
    CHECK(answerer->answered == static_cast<int>(kPings));
    CHECK(answerer->posted_at_once == static_cast<int>(kPings));
    // Posted from Send itself, without the queue and Flush.
    CHECK(pair.server->stats().frames_written_directly - direct == kPings);
  }
}

// Replies to the messages of one poll other than its last join the chain
// inside Send and leave together (frames_coalesced). The credits they return
// reach the peer only then, so the lending rule still sees a busy peer and
// lends it more: counted at once, the replies would make the peer look idle
// and hold it to its initial credits.
TEST_CASE(
    "rdma: a poll's replies leave chained, and a busy peer is lent more") {
  auto answerer = std::make_shared<Answerer>();
  Pair pair({.mode = PollMode::kEvent, .server_observer = answerer});
  {
    std::lock_guard lock(answerer->mu);
    answerer->connection = pair.server;
  }
  constexpr size_t kFrames = 2000;
  for (size_t i = 0; i < kFrames; ++i) {
    REQUIRE(pair.client->Send(MakeFrame(16)).ok());
  }
  REQUIRE(WaitUntil([&] { return pair.client_recorder->count() == kFrames; }));
  const ConnectionStats& stats = pair.server->stats();
  INFO("chained " << stats.frames_coalesced.load() << ", posted at once "
                  << stats.frames_written_directly.load() << ", posts "
                  << stats.write_calls.load() << ", lent "
                  << stats.credits_lent.load());
  CHECK(stats.frames_coalesced > 0);
  CHECK(stats.write_calls < kFrames / 2);  // Chains, not a post per reply.
  CHECK(stats.credits_lent >= 8);
  CHECK(stats.protocol_errors == 0);
  CHECK(pair.client->stats().protocol_errors == 0);
}

TEST_CASE("rdma: an oversized payload is discarded, its header delivered") {
  Pair pair(PollMode::kEvent);
  pair.options.max_payload_size = 1 << 20;
  // The server's limit applies to what it receives: set on its side.
  // (Pair's listener used the default; re-create with a small maximum.)
  TransportOptions small;
  small.max_payload_size = 64 * 1024;
  rpc::EventLoop loop;
  std::promise<std::shared_ptr<Connection>> accepted;
  auto listener = Listen(
      loop.context(), RdmaUri(), small,
      [&]() -> boost::asio::io_context& { return loop.context(); },
      [&](std::shared_ptr<Connection> c) { accepted.set_value(c); });
  REQUIRE(listener.ok());
  std::promise<StatusOr<std::shared_ptr<Connection>>> connected;
  Connect(loop.context(), (*listener)->uri(), {},
          [&](StatusOr<std::shared_ptr<Connection>> c) {
            connected.set_value(std::move(c));
          });
  auto client = connected.get_future().get();
  REQUIRE(client.ok());
  auto server = accepted.get_future().get();
  struct Dropped : ConnectionObserver {
    void OnFrame(ReceivedFrame&& frame) override {
      results.push_back({frame.dropped_payload_size(), frame.payload_size()});
      if (results.size() == 2) done.set_value();
    }
    void OnClose(const Status&) override {}
    std::vector<std::pair<uint64_t, uint64_t>> results;
    std::promise<void> done;
  };
  auto observer = std::make_shared<Dropped>();
  server->Start(observer);
  (*client)->Start(std::make_shared<Recorder>());
  REQUIRE((*client)->Send(MakeFrame(200 * 1024)).ok());
  REQUIRE((*client)->Send(MakeFrame(100)).ok());
  REQUIRE(observer->done.get_future().wait_for(60s) ==
          std::future_status::ready);
  CHECK(observer->results[0].first == 200 * 1024);  // Dropped, header kept.
  CHECK(observer->results[0].second == 0);
  CHECK(observer->results[1].first == 0);  // The next frame is intact.
  CHECK(observer->results[1].second == 100);
  (*client)->Close(Status(StatusCode::kCancelled, "done"));
  server->Close(Status(StatusCode::kCancelled, "done"));
  std::this_thread::sleep_for(50ms);
  loop.Stop();
}

// Bytes registered now, but for the shared pools (which a connection may
// grow, and which outlive it while other connections use them).
uint64_t ConnectionBytes() {
  return rdma::LiveRegisteredBytes() - rdma::PooledRegisteredBytes();
}

TEST_CASE("rdma: a QP forced into the error state is detected and recovers") {
  const uint64_t registered = ConnectionBytes();
  auto owned = std::make_unique<Pair>(PollMode::kEvent);
  Pair& pair = *owned;
  REQUIRE(pair.client->Send(MakeFrame(10)).ok());
  // A large frame too: a grant and the bounce pool are registered.
  REQUIRE(pair.client->Send(MakeFrame(1 << 20)).ok());
  REQUIRE(pair.WaitFor(2));
  auto rdma = std::dynamic_pointer_cast<rdma::RdmaConnection>(pair.client);
  REQUIRE(rdma);
  rdma->ForceQpErrorForTesting();
  rdma.reset();
  // The flushed receives report the error; the connection closes cleanly on
  // both sides, with UNAVAILABLE and without aborting.
  auto closed = pair.client_recorder->closed.get_future();
  REQUIRE(closed.wait_for(30s) == std::future_status::ready);
  CHECK(closed.get().code() == StatusCode::kUnavailable);
  auto server_closed = pair.recorder->closed.get_future();
  REQUIRE(server_closed.wait_for(30s) == std::future_status::ready);
  CHECK_FALSE(pair.client->Send(MakeFrame(10)).ok());
  // A new connection to the same listener works.
  std::promise<StatusOr<std::shared_ptr<Connection>>> again;
  Connect(pair.client_loop.context(), pair.listener->uri(), {},
          [&](StatusOr<std::shared_ptr<Connection>> c) {
            again.set_value(std::move(c));
          });
  auto fresh = again.get_future().get();
  REQUIRE(fresh.ok());
  (*fresh)->Start(std::make_shared<Recorder>());
  REQUIRE((*fresh)->Send(MakeFrame(10)).ok());
  (*fresh)->Close(Status(StatusCode::kCancelled, "done"));
  std::weak_ptr<Connection> weak_fresh = *fresh;
  std::weak_ptr<Connection> weak_client = pair.client;
  std::weak_ptr<Connection> weak_server = pair.server;
  fresh->reset();
  // Every memory region of every connection is deregistered with it.
  owned.reset();
  CHECK(weak_fresh.expired());
  CHECK(weak_client.expired());
  CHECK(weak_server.expired());
  CHECK(ConnectionBytes() == registered);
}

}  // namespace
}  // namespace rdmarpc::transport::testing
