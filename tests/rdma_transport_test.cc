// The RDMA transport on its own, on a real device (run in the Soft-RoCE VM by
// tools/test; without a device every case fails: there is no silent skip).
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "rpc/event_loop.h"
#include "transport/factory/factory.h"
#include "transport/memory.h"
#include "transport/rdma/completion_group.h"
#include "transport/rdma/device_info.h"
#include "transport/rdma/grant_memory.h"
#include "transport/rdma/loop_state.h"
#include "transport/rdma/rdma_connection.h"
#include "transport/uri.h"

namespace rdmarpc::transport {
namespace {

using namespace std::chrono_literals;

std::string RdmaUri() {
  const char* ip = std::getenv("RXE_IP");
  if (ip == nullptr) {
    FAIL("RXE_IP is not set: run under tools/softroce/run (tools/test does)");
  }
  return std::string("rdma://") + ip + ":0";
}

struct Recorder : ConnectionObserver {
  void OnFrame(ReceivedFrame frame) override {
    std::lock_guard lock(mu);
    sizes.push_back(frame.payload_size());
    Buffer payload = std::move(frame).TakePayload();
    for (size_t i = 0; i < payload.size(); ++i) {
      if (payload.data()[i] != std::byte(i % 251)) intact = false;
    }
  }
  // A recorder shared by several connections keeps the first close.
  void OnClose(const Status& reason) override {
    std::lock_guard lock(mu);
    if (closes++ == 0) closed.set_value(reason);
  }
  size_t count() {
    std::lock_guard lock(mu);
    return sizes.size();
  }
  std::mutex mu;
  std::vector<uint64_t> sizes;
  bool intact = true;
  int closes = 0;
  std::promise<Status> closed;
};

OutgoingFrame MakeFrame(size_t payload) {
  OutgoingFrame frame;
  frame.header = Buffer::CopyOf(std::string_view("hdr"));
  Buffer body = Buffer::Allocate(payload);
  for (size_t i = 0; i < payload; ++i) body.data()[i] = std::byte(i % 251);
  frame.AddPayload(std::move(body));
  return frame;
}

// A connected pair on two loops; the server side records what arrives.
struct Pair {
  explicit Pair(PollMode mode,
                uint64_t max_grant_bytes = tunables::kDefaultMaxGrantBytes,
                std::shared_ptr<ConnectionObserver> server_observer = nullptr,
                bool pooled_grants = true,
                std::chrono::milliseconds keepalive_interval =
                    tunables::kKeepaliveInterval,
                uint64_t max_pool_bytes = tunables::kDefaultRdmaMaxPoolBytes,
                std::chrono::milliseconds client_keepalive_interval = {}) {
    options.poll_mode = mode;
    options.rdma_max_pool_bytes = max_pool_bytes;
    options.keepalive_interval = keepalive_interval;
    options.max_grant_bytes = max_grant_bytes;
    options.rdma_pooled_grants = pooled_grants;
    // (Members: see the note on the loops below.)
    auto bound = Listen(
        server_loop.context(), RdmaUri(), options,
        [this]() -> boost::asio::io_context& { return server_loop.context(); },
        [this](std::shared_ptr<Connection> c) {
          std::lock_guard lock(accepted_mu);
          accepted.push_back(std::move(c));
        });
    REQUIRE(bound.ok());
    listener = std::move(*bound);
    std::promise<StatusOr<std::shared_ptr<Connection>>> connected;
    TransportOptions client_options = options;
    if (client_keepalive_interval.count() > 0) {
      client_options.keepalive_interval = client_keepalive_interval;
    }
    Connect(client_loop.context(), listener->uri(), client_options,
            [&](StatusOr<std::shared_ptr<Connection>> c) {
              connected.set_value(std::move(c));
            });
    auto c = connected.get_future().get();
    REQUIRE(c.ok());
    client = *c;
    const auto until = std::chrono::steady_clock::now() + 30s;
    for (;;) {
      {
        std::lock_guard lock(accepted_mu);
        if (!accepted.empty()) {
          server = accepted.front();
          break;
        }
      }
      REQUIRE(std::chrono::steady_clock::now() < until);
      std::this_thread::sleep_for(1ms);
    }
    if (server_observer) {
      server->Start(std::move(server_observer));
    } else {
      server->Start(recorder);
    }
    client->Start(client_recorder);
  }
  ~Pair() {
    client->Close(Status(StatusCode::kCancelled, "test over"));
    {
      std::lock_guard lock(accepted_mu);
      for (auto& c : accepted)
        c->Close(Status(StatusCode::kCancelled, "test over"));
    }
    std::this_thread::sleep_for(50ms);
    client_loop.Stop();
    server_loop.Stop();
  }
  bool WaitFor(size_t frames, std::chrono::seconds timeout = 60s) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (recorder->count() < frames) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }

  // The loops come first so they are destroyed last: every connection (and
  // its descriptors) must be gone before the io_context it lives on.
  rpc::EventLoop server_loop;
  rpc::EventLoop client_loop;
  TransportOptions options;
  std::mutex accepted_mu;
  std::vector<std::shared_ptr<Connection>> accepted;  // Every accepted one.
  std::unique_ptr<Listener> listener;
  std::shared_ptr<Connection> client;
  std::shared_ptr<Connection> server;
  std::shared_ptr<Recorder> recorder = std::make_shared<Recorder>();
  std::shared_ptr<Recorder> client_recorder = std::make_shared<Recorder>();
};

bool WaitUntil(const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// Sends a frame of each size at once; all arrive intact, in order.
void SendAllInOrder(Pair& pair, const std::vector<size_t>& sizes) {
  for (size_t size : sizes) REQUIRE(pair.client->Send(MakeFrame(size)).ok());
  REQUIRE(pair.WaitFor(sizes.size()));
  std::lock_guard lock(pair.recorder->mu);
  CHECK(pair.recorder->intact);
  CHECK(pair.recorder->sizes ==
        std::vector<uint64_t>(sizes.begin(), sizes.end()));
}

void ExchangeMix(Pair& pair) {
  // Far more small frames than the peer has receives posted: credits must
  // flow back (explicitly: the receiver sends nothing else), and no send may
  // ever meet a missing receive (RNR).
  constexpr int kSmall = 1000;
  for (int i = 0; i < kSmall; ++i) {
    REQUIRE(pair.client->Send(MakeFrame(i % 100)).ok());
  }
  // Large frames go by rendezvous and RDMA WRITE WITH IMMEDIATE.
  const std::vector<size_t> large = {64 * 1024, 1 << 20, 5 << 20};
  for (size_t size : large) REQUIRE(pair.client->Send(MakeFrame(size)).ok());
  REQUIRE(pair.WaitFor(kSmall + large.size()));
  {
    std::lock_guard lock(pair.recorder->mu);
    CHECK(pair.recorder->intact);
    for (size_t i = 0; i < large.size(); ++i) {
      CHECK(pair.recorder->sizes[kSmall + i] == large[i]);
    }
  }
  const ConnectionStats& sent = pair.client->stats();
  const ConnectionStats& received = pair.server->stats();
  // The sender counts a transfer when its own completion arrives, which may
  // be after the receiver has the data.
  CHECK(WaitUntil([&] { return sent.rdma_writes == large.size(); }));
  // Heap payloads are not registered: copied through the bounce pool.
  CHECK(sent.zero_copy_bytes == 0);
  CHECK(sent.staged_bytes == (64 * 1024 + (1 << 20) + (5 << 20)) + 3 * 3);
  CHECK(sent.registrations == 0);
  CHECK(sent.inline_sends > 0);
  CHECK(sent.rnr_errors == 0);
  CHECK(received.rnr_errors == 0);
  CHECK(received.credit_messages > 0);
  CHECK(received.frames_received == kSmall + large.size());
}

TEST_CASE("rdma: small frames of any size arrive intact, inline or not") {
  // Frames up to kRdmaMaxInline bytes are staged for an inline send, one
  // staging entry per request of a chain; larger ones go from their send
  // ring slot. Sizes on both sides of that boundary, queued at once so they
  // leave in chains, up to the largest that travels as one SEND (and the
  // first that does not).
  Pair pair(PollMode::kBusy);
  constexpr size_t kOverhead = tunables::kFramePrefixSize + 3;  // "hdr"
  constexpr size_t kInline = tunables::kRdmaMaxInline - kOverhead;
  constexpr size_t kLargestSend = tunables::kRdmaReceiveBufferSize - kOverhead;
  std::vector<size_t> sizes;
  for (int round = 0; round < 3; ++round) {
    for (size_t size : {size_t{0}, kInline - 1, kInline, kInline + 1,
                        size_t{1000}, size_t{4096}, kLargestSend}) {
      sizes.push_back(size);
    }
  }
  sizes.push_back(kLargestSend + 1);
  SendAllInOrder(pair, sizes);
  // All but the last went as one SEND each, the small ones inline.
  CHECK(WaitUntil([&] { return pair.client->stats().rdma_writes == 1; }));
  CHECK(pair.client->stats().inline_sends >= 6);
}

TEST_CASE("rdma: event mode: inline, WRITE WITH IMM, credits, no RNR") {
  Pair pair(PollMode::kEvent);
  ExchangeMix(pair);
  CHECK(pair.server->stats().cq_events > 0);  // It waited on the channel.
}

TEST_CASE("rdma: busy-poll mode carries the same traffic") {
  Pair pair(PollMode::kBusy);
  ExchangeMix(pair);
  CHECK(pair.server->stats().cq_events == 0);  // It never waited.
}

TEST_CASE("rdma: hybrid mode carries the same traffic") {
  Pair pair(PollMode::kHybrid);
  ExchangeMix(pair);
}

// A handler on a busy loop sends (as an RPC completion or a server method
// may): the frame is posted before the loop's next handler runs, not left to
// the Flush that Send queues, which waits behind the busy loop's next turn of
// kRdmaBusyPollsPerYield polls. Each of 20 rounds checks this afresh, so a
// frame that went out at once only when the handler happened to run at a
// particular point of the busy loop's turn would still be caught.
TEST_CASE("rdma: busy poll posts a frame sent from a handler at once") {
  Pair pair(PollMode::kBusy);
  const ConnectionStats& stats = pair.server->stats();
  constexpr int kRounds = 20;
  struct Seen {
    uint64_t frames_at_send = 0, frames_next = 0;
    bool sent = false;
  };
  std::vector<Seen> seen(kRounds);
  for (int round = 0; round < kRounds; ++round) {
    std::promise<void> done;
    Seen& s = seen[round];
    // The busy loop's next turn is already queued when this handler runs;
    // the check is queued behind it, and the Flush that Send queues behind
    // the check.
    boost::asio::post(pair.server_loop.context(), [&] {
      s.frames_at_send = stats.frames_sent;
      boost::asio::post(pair.server_loop.context(), [&] {
        s.frames_next = stats.frames_sent;
        done.set_value();
      });
      s.sent = pair.server->Send(MakeFrame(16)).ok();
    });
    done.get_future().wait();
    // The client returns the credit before the next round: a peer starts
    // with few (kRdmaInitialCredits), and a round that waited for one
    // would test the credits, not the loop.
    REQUIRE(WaitUntil(
        [&] { return pair.client_recorder->count() == size_t(round) + 1; }));
    std::this_thread::sleep_for(10ms);
  }
  for (const Seen& s : seen) {
    CHECK(s.sent);
    CHECK(s.frames_next == s.frames_at_send + 1);
  }
}

// A peer starts with kRdmaInitialCredits receives; one that keeps them busy
// is lent more, up to kRdmaReceiveDepth, so a stream is not held to a window
// of two frames (one credit is held back for CREDIT).
TEST_CASE("rdma: a busy peer is lent more credits") {
  Pair pair(PollMode::kEvent);
  constexpr int kFrames = 2000;
  for (int i = 0; i < kFrames; ++i) {
    REQUIRE(pair.client->Send(MakeFrame(16)).ok());
  }
  REQUIRE(pair.WaitFor(kFrames));
  const uint64_t lent = pair.server->stats().credits_lent;
  INFO("the server lent " << lent << " credits beyond the initial "
                          << tunables::kRdmaInitialCredits);
  CHECK(lent >= 8);
  CHECK(lent <= tunables::kRdmaReceiveDepth - tunables::kRdmaInitialCredits);
  CHECK(pair.server->stats().credits_withheld == 0);  // The pool had room.
}

// What a busy peer was lent beyond its initial credits it gives back once
// keepalive finds the connection idle, so an idle connection keeps no more
// of the shared receive queue than it started with; a new burst is lent
// more again.
// A burst of `frames` small frames from the client; the credits the server
// has lent it so far (at least 8: the burst kept it busy).
uint64_t LendByBurst(Pair& pair, int frames) {
  const size_t before = pair.recorder->count();
  for (int i = 0; i < frames; ++i) {
    REQUIRE(pair.client->Send(MakeFrame(16)).ok());
  }
  REQUIRE(pair.WaitFor(before + frames));
  const uint64_t lent = pair.server->stats().credits_lent;
  REQUIRE(lent >= 8);
  return lent;
}

TEST_CASE("rdma: an idle peer gives back the credits it was lent") {
  Pair pair(PollMode::kEvent, tunables::kDefaultMaxGrantBytes, nullptr, true,
            /*keepalive_interval=*/100ms);
  const uint64_t lent = LendByBurst(pair, 2000);
  REQUIRE(pair.server->stats().credits_withheld == 0);
  // Credits still on their way back ride on the PONGs, and are given back
  // at the next idle tick.
  CHECK(WaitUntil(
      [&] { return pair.server->stats().credits_taken_back == lent; }));
  CHECK(pair.client->stats().credits_given_back == lent);
  CHECK(pair.client->stats().protocol_errors == 0);
  CHECK(pair.server->stats().protocol_errors == 0);

  CHECK(LendByBurst(pair, 2000) >= lent + 8);
}

// The same when the peer is never silent for a whole keepalive interval of
// its own, because the other side's shorter keepalive PINGs it: a PING
// received is keepalive traffic too, and lent credits go back with it.
// (Before, only a silent interval gave back, so such a peer kept them.)
TEST_CASE("rdma: a peer kept busy by keepalive PINGs gives back its credits") {
  Pair pair(PollMode::kEvent, tunables::kDefaultMaxGrantBytes, nullptr, true,
            /*keepalive_interval=*/100ms, tunables::kDefaultRdmaMaxPoolBytes,
            /*client_keepalive_interval=*/2000ms);
  const uint64_t lent = LendByBurst(pair, 2000);
  CHECK(WaitUntil(
      [&] { return pair.server->stats().credits_taken_back == lent; }));
  CHECK(pair.server->stats().keepalive_pings > 0);
  CHECK(pair.client->stats().protocol_errors == 0);
  CHECK(pair.server->stats().protocol_errors == 0);
}

// Small sends are signaled one in kRdmaSignalEvery, so a lone message costs
// its receiver's completion only, not a send completion (and its wake-up)
// as well; and a graceful close, which waits for every send to complete,
// still ends at once: it signals a CREDIT after them rather than waiting
// out kCloseFlushTimeout.
TEST_CASE("rdma: lone small sends are unsignaled; a close still drains") {
  // With grants from the pool (windows) too: on rxe, where their binds wait
  // for an idle send queue, small sends stay unsignaled all the same.
  const bool pooled = GENERATE(true, false);
  INFO("pooled grants " << pooled);
  Pair pair(PollMode::kEvent, tunables::kDefaultMaxGrantBytes, nullptr, pooled);
  constexpr size_t kFrames = 5;
  static_assert(kFrames < tunables::kRdmaSignalEvery);
  const uint64_t polled = rdma::CompletionsPolled();
  const uint64_t credits0 = pair.client->stats().credit_messages +
                            pair.server->stats().credit_messages;
  for (size_t i = 0; i < kFrames; ++i) {  // One chain each.
    REQUIRE(pair.client->Send(MakeFrame(16)).ok());
    REQUIRE(pair.WaitFor(i + 1));
  }
  std::this_thread::sleep_for(50ms);
  // Both ends are in this process: a receive completion for each frame and
  // each CREDIT (the server answers none), and not one send completion.
  const uint64_t credits = pair.client->stats().credit_messages +
                           pair.server->stats().credit_messages - credits0;
  CHECK(rdma::CompletionsPolled() - polled == kFrames + credits);

  const uint64_t sent = pair.client->stats().credit_messages;
  const auto start = std::chrono::steady_clock::now();
  pair.client->Close(Status(StatusCode::kCancelled, "closing now"));
  auto closed = pair.client_recorder->closed.get_future();
  REQUIRE(closed.wait_for(30s) == std::future_status::ready);
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(closed.get().message() == "closing now");
  CHECK(pair.client->stats().credit_messages == sent + 1);  // The marker.
  INFO("the close took "
       << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
       << " ms");
  CHECK(took < tunables::kCloseFlushTimeout);
}

// On rxe a window's bind waits until every request on the wire before it
// has completed (rdma_connection.h, LocalOpMayGo). After small sends posted
// unsignaled, no completion would ever say so: the connection asks for one
// with a signaled zero-length WRITE, and the large frame that needs the
// window lands. Without it, the frame would wait for 32 more sends.
TEST_CASE("rdma: a window bound after unsignaled sends still opens") {
  Pair pair(PollMode::kEvent);
  constexpr size_t kSmall = 5;
  static_assert(kSmall < tunables::kRdmaSignalEvery);
  for (size_t i = 0; i < kSmall; ++i) {  // The server's: one chain each.
    REQUIRE(pair.server->Send(MakeFrame(16)).ok());
    REQUIRE(WaitUntil([&] { return pair.client_recorder->count() == i + 1; }));
  }
  // The server grants this from its pool: a window bound on its queue.
  REQUIRE(pair.client->Send(MakeFrame(1 << 20)).ok());
  REQUIRE(pair.WaitFor(1, 10s));
  {
    std::lock_guard lock(pair.recorder->mu);
    CHECK(pair.recorder->intact);
    CHECK(pair.recorder->sizes == std::vector<uint64_t>{1 << 20});
  }
  const ConnectionStats& server = pair.server->stats();
  CHECK(server.pooled_grants == 1);
  auto devices = rdma::ListDevices();
  REQUIRE(devices.ok());
  // The suites' devices: rxe0, or another driver's on real hardware.
  const bool rxe =
      !devices->empty() && devices->front().name.rfind("rxe", 0) == 0;
  // One before the bind, one before the invalidation (the GRANT between
  // them went unsignaled too).
  CHECK(server.completion_probes == (rxe ? 2 : 0));
}

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
  auto a = std::make_unique<Pair>(
      PollMode::kEvent, tunables::kDefaultMaxGrantBytes, nullptr,
      /*pooled_grants=*/false, tunables::kKeepaliveInterval, cap);
  Pair b(PollMode::kEvent, tunables::kDefaultMaxGrantBytes, nullptr,
         /*pooled_grants=*/false, tunables::kKeepaliveInterval, cap);
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
  void OnFrame(ReceivedFrame) override {
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
    Pair pair(mode, tunables::kDefaultMaxGrantBytes, answerer);
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
    void OnFrame(ReceivedFrame frame) override {
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

// The byte pattern Recorder checks, written at `offset` of the payload.
void Fill(std::byte* data, size_t size, size_t offset) {
  for (size_t i = 0; i < size; ++i) data[i] = std::byte((offset + i) % 251);
}

// Large frames pipeline: the next one's RTS and grant overlap the WRITEs of
// the one before. Frames still arrive in the order they were sent, small
// ones behind large ones included.
TEST_CASE("rdma: large frames pipeline and keep their order") {
  Pair pair(PollMode::kEvent);
  const std::vector<size_t> sizes = {64 << 10, 1 << 20, 10, 300 << 10,
                                     2 << 20,  20,      30, (100 << 10) + 1,
                                     40,       64 << 10};
  SendAllInOrder(pair, sizes);
  const ConnectionStats& sent = pair.client->stats();
  CHECK(WaitUntil([&] { return sent.rdma_writes == 6; }));
  // The second frame's RTS went out while the first was under way (both
  // leave in the first flush; the first cannot complete before its grant).
  CHECK(sent.pipelined_transfers >= 1);
  CHECK(pair.server->stats().oversized_frames_dropped == 0);
}

// With grant memory for one frame only, a second RTS that arrives while the
// first frame's grant is open waits for it to land: the payload is not
// dropped for the memory limit, as it would be with no grant of this
// connection to wait for.
TEST_CASE("rdma: a pipelined frame over the grant budget waits, not dropped") {
  constexpr size_t kFrame = 2 << 20;
  Pair pair(PollMode::kEvent, /*max_grant_bytes=*/3 << 20);
  for (int i = 0; i < 4; ++i) {
    REQUIRE(pair.client->Send(MakeFrame(kFrame)).ok());
  }
  REQUIRE(pair.WaitFor(4));
  {
    std::lock_guard lock(pair.recorder->mu);
    CHECK(pair.recorder->intact);
    CHECK(pair.recorder->sizes == std::vector<uint64_t>(4, kFrame));
  }
  CHECK(pair.server->stats().oversized_frames_dropped == 0);
  CHECK(pair.client->stats().pipelined_transfers >= 1);
}

// A stream of large frames, each sent once the one before has landed: from
// the second landing on, the receiver grants the next before it is asked
// (a standing grant). The third may be sent before the first of them
// arrives, but then the client holds it and the next one too, so from the
// fourth on every frame goes with its RTS and WRITEs at once, no round
// trip.
// Idle for a keepalive interval, the sender gives back the grants it holds,
// and the receiver's blocks are free again.
TEST_CASE("rdma: a stream of large frames goes into standing grants") {
  Pair pair(PollMode::kEvent, tunables::kDefaultMaxGrantBytes, nullptr,
            /*pooled_grants=*/true, /*keepalive_interval=*/300ms);
  const uint64_t granted_before = rdma::GrantedBytes();
  constexpr size_t kFrame = 256 << 10;
  constexpr int kFrames = 8;
  for (int i = 0; i < kFrames; ++i) {
    REQUIRE(pair.client->Send(MakeFrame(kFrame)).ok());
    REQUIRE(pair.WaitFor(i + 1));
  }
  {
    std::lock_guard lock(pair.recorder->mu);
    CHECK(pair.recorder->intact);
  }
  const ConnectionStats& sent = pair.client->stats();
  const ConnectionStats& received = pair.server->stats();
  INFO("standing grants offered " << received.standing_grants
                                  << ", transfers into them "
                                  << sent.standing_transfers);
  CHECK(sent.standing_transfers >= kFrames - 3);
  CHECK(sent.standing_transfers < kFrames);  // Never the first.
  CHECK(received.standing_grants >= sent.standing_transfers);
  CHECK(received.protocol_errors == 0);
  // Idle: what the client still holds goes back, and the server's grants
  // with it.
  CHECK(WaitUntil([&] { return sent.standing_grants_released >= 1; }));
  CHECK(WaitUntil([&] { return rdma::GrantedBytes() == granted_before; }));
  CHECK(sent.standing_transfers + sent.standing_grants_released ==
        received.standing_grants);
  // And the stream goes on as before.
  for (int i = 0; i < 2; ++i) {
    REQUIRE(pair.client->Send(MakeFrame(kFrame)).ok());
  }
  REQUIRE(pair.WaitFor(kFrames + 2));
  std::lock_guard lock(pair.recorder->mu);
  CHECK(pair.recorder->intact);
}

// Frames that do not fit the standing grant held (larger, or small enough
// for a SEND) take their own way, and everything still arrives in order.
TEST_CASE("rdma: standing grants keep the order of mixed frames") {
  Pair pair(PollMode::kEvent);
  constexpr size_t kFrame = 200 << 10;
  // The fourth goes into a standing grant (see the test above).
  for (int i = 0; i < 4; ++i) {
    REQUIRE(pair.client->Send(MakeFrame(kFrame)).ok());
    REQUIRE(pair.WaitFor(i + 1));
  }
  const uint64_t standing = pair.client->stats().standing_transfers;
  REQUIRE(standing >= 1);
  const std::vector<size_t> burst = {
      kFrame, 3 << 20, 10, kFrame, kFrame, 20, (1 << 20) + 3, kFrame, 64 << 10};
  for (size_t size : burst) REQUIRE(pair.client->Send(MakeFrame(size)).ok());
  REQUIRE(pair.WaitFor(4 + burst.size()));
  {
    std::lock_guard lock(pair.recorder->mu);
    CHECK(pair.recorder->intact);
    const std::vector<uint64_t> tail(pair.recorder->sizes.begin() + 4,
                                     pair.recorder->sizes.end());
    CHECK(tail == std::vector<uint64_t>(burst.begin(), burst.end()));
  }
  CHECK(pair.client->stats().standing_transfers > standing);
  CHECK(pair.server->stats().protocol_errors == 0);
}

// A frame larger than the receiver may pin at once goes in segments: each
// granted, written and copied into the frame in turn, so it arrives whole
// and in order with the frames around it, and nothing is dropped.
TEST_CASE("rdma: a frame over the grant budget arrives in segments") {
  const bool pooled = GENERATE(true, false);
  INFO("pooled grants " << pooled);
  Pair pair(PollMode::kEvent, /*max_grant_bytes=*/1 << 20, nullptr, pooled);
  SendAllInOrder(pair, {(3 << 20) + 7, 100 << 10, 20, (5 << 19) + 1, 10});
  const ConnectionStats& received = pair.server->stats();
  CHECK(received.oversized_frames_dropped == 0);
  CHECK(received.segmented_frames == 2);
  // 1 MiB segments: 3 MiB + 10 bytes in 4, 2.5 MiB + 4 bytes in 3.
  CHECK(received.segments_received == 7);
  CHECK(pair.client->stats().segments_sent == 5);  // All but each last.
}

// With the pool, a frame larger than its largest block goes in segments its
// blocks take: after warm-up, no registration at all.
TEST_CASE("rdma: a frame over a pool block goes in pooled segments") {
  Pair pair(PollMode::kEvent);
  constexpr size_t kFrame = (6 << 20) + 5;
  REQUIRE(pair.client->Send(MakeFrame(kFrame)).ok());  // Warm-up.
  REQUIRE(pair.WaitFor(1));
  const uint64_t registrations = rdma::RegistrationCalls();
  REQUIRE(pair.client->Send(MakeFrame(kFrame)).ok());
  REQUIRE(pair.WaitFor(2));
  {
    std::lock_guard lock(pair.recorder->mu);
    CHECK(pair.recorder->intact);
    CHECK(pair.recorder->sizes == std::vector<uint64_t>(2, kFrame));
  }
  CHECK(rdma::RegistrationCalls() == registrations);
  const ConnectionStats& received = pair.server->stats();
  CHECK(received.segmented_frames == 2);
  CHECK(received.segments_received == 2 * 7);  // 6 MiB + 8 bytes.
  CHECK(received.registered_grants == 0);
}

// Large frames land in blocks of the device's grant pool, each behind a
// memory window bound for it: after the pool has grown, no frame costs an
// ibv_reg_mr. With pooled grants off, every frame costs one (what this
// replaced), so the count below could not stay still.
//
// Payloads are borrowed from buffers filled once, and the receiver checks
// every 997th byte: touching every byte of 100 MiB takes minutes in the
// emulated VM.
struct SampledRecorder : Recorder {
  void OnFrame(ReceivedFrame frame) override {
    std::lock_guard lock(mu);
    sizes.push_back(frame.payload_size());
    Buffer payload = std::move(frame).TakePayload();
    for (size_t i = 0; i < payload.size(); i += 997) {
      if (payload.data()[i] != std::byte(i % 251)) intact = false;
    }
  }
};

void ExchangeLarge(Pair& pair, Recorder& recorder, int rounds) {
  static const std::vector<std::byte> pattern = [] {
    std::vector<std::byte> bytes(3 << 20);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(i % 251);
    return bytes;
  }();
  const std::vector<size_t> sizes = {64 << 10,      20, 300 << 10,
                                     (1 << 20) + 7, 10, 3 << 20};
  std::vector<uint64_t> expected;
  // Counted before the first Send: frames arrive while later ones are sent.
  const size_t before = recorder.count();
  for (int i = 0; i < rounds; ++i) {
    for (size_t size : sizes) {
      OutgoingFrame frame;
      frame.header = Buffer::CopyOf(std::string_view("hdr"));
      frame.AddPayload(Buffer::Borrow(std::span(pattern.data(), size)));
      REQUIRE(pair.client->Send(std::move(frame)).ok());
      expected.push_back(size);
    }
  }
  bool arrived =
      WaitUntil([&] { return recorder.count() == before + expected.size(); });
  INFO(recorder.count() - before << " of " << expected.size()
                                 << " frames arrived");
  REQUIRE(arrived);
  std::lock_guard lock(recorder.mu);
  CHECK(recorder.intact);
  CHECK(std::vector<uint64_t>(recorder.sizes.begin() + before,
                              recorder.sizes.end()) == expected);
}

TEST_CASE(
    "rdma: large frames land in the grant pool and register nothing each") {
  const bool pooled = GENERATE(true, false);
  INFO("pooled grants " << pooled);
  auto recorder = std::make_shared<SampledRecorder>();
  Pair pair(PollMode::kEvent, tunables::kDefaultMaxGrantBytes, recorder,
            pooled);
  // Warm-up: the pools grow to what a burst of 4 rounds needs (grant-pool
  // blocks, the loop's bounce chunks, receives lent to a busy peer), until
  // two bursts in a row register nothing more (at most seven; without the
  // grant pool every grant registers, so one). The measured bursts are half
  // as large: how much a pool must hold depends on how many transfers
  // overlap, which timing decides, so the measured bursts seldom outgrow
  // the warm-up's.
  uint64_t warmup_rounds = 0;
  int quiet = 0;
  for (int i = 0; i < (pooled ? 7 : 1) && quiet < 2; ++i) {
    const uint64_t before = rdma::RegistrationCalls();
    ExchangeLarge(pair, *recorder, 4);
    warmup_rounds += 4;
    quiet = rdma::RegistrationCalls() == before ? quiet + 1 : 0;
  }
  INFO(warmup_rounds << " warm-up rounds");
  // Registrations from here on that are not a pool growing are frames'
  // own: none with the pool, one or more per frame without it.
  const uint64_t registrations =
      rdma::RegistrationCalls() - rdma::PoolGrowthRegistrations();
  const uint64_t growths = rdma::PoolGrowths();
  constexpr int kBursts = 12, kRoundsPerBurst = 2;  // 4 large frames a round.
  constexpr int kRounds = kBursts * kRoundsPerBurst;
  for (int i = 0; i < kBursts; ++i) {
    ExchangeLarge(pair, *recorder, kRoundsPerBurst);
  }
  const uint64_t frames_registered = rdma::RegistrationCalls() -
                                     rdma::PoolGrowthRegistrations() -
                                     registrations;
  const uint64_t grown = rdma::PoolGrowths() - growths;
  INFO("sender cache misses "
       << pair.client->stats().registrations.load() << ", receives lent "
       << pair.server->stats().credits_lent.load() << "/"
       << pair.client->stats().credits_lent.load() << ", pool chunks added "
       << grown);
  const ConnectionStats& received = pair.server->stats();
  if (pooled) {
    CHECK(frames_registered == 0);
    // Nor do pools grow per frame. They may still add a chunk after the
    // warm-up (a burst whose transfers happen to overlap more than any
    // before: once in many runs of this suite), never one per few frames.
    CHECK(grown * 8 < 4 * kRounds);
    // Each frame's grant answered its RTS, or was a standing grant (from
    // the pool too) that it was written into.
    CHECK(received.pooled_grants + pair.client->stats().standing_transfers ==
          4 * (kRounds + warmup_rounds));
    CHECK(received.registered_grants == 0);
  } else {
    CHECK(frames_registered >= 4 * kRounds);
    CHECK(received.pooled_grants == 0);
  }
}

// A frame received into a grant-pool block and sent on (an echo of its
// payload) is written from the block, already registered: no copy through
// the bounce chunks. A block registered for its own transfer is
// deregistered on landing, so it is copied.
OutgoingFrame FrameOf(Buffer payload) {
  OutgoingFrame frame;
  frame.header = Buffer::CopyOf(std::string_view("hdr"));
  frame.AddPayload(std::move(payload));
  return frame;
}

struct Echoer : ConnectionObserver {
  void OnFrame(ReceivedFrame frame) override {
    auto c = connection.lock();
    if (!c) return;
    const Status sent = c->Send(FrameOf(std::move(frame).TakePayload()));
    CHECK(sent.ok());
  }
  void OnClose(const Status&) override {}
  std::weak_ptr<Connection> connection;
};

TEST_CASE("rdma: a received large frame is sent on without a copy") {
  const bool pooled = GENERATE(true, false);
  INFO("pooled grants " << pooled);
  auto echoer = std::make_shared<Echoer>();
  Pair pair(PollMode::kEvent, tunables::kDefaultMaxGrantBytes, echoer, pooled);
  echoer->connection = pair.server;
  constexpr size_t kPayload = 1 << 20;
  REQUIRE(pair.client->Send(MakeFrame(kPayload)).ok());
  REQUIRE(WaitUntil([&] { return pair.client_recorder->count() == 1; }));
  {
    std::lock_guard lock(pair.client_recorder->mu);
    CHECK(pair.client_recorder->intact);
    CHECK(pair.client_recorder->sizes == std::vector<uint64_t>{kPayload});
  }
  const ConnectionStats& echoed = pair.server->stats();
  CHECK(WaitUntil([&] { return echoed.rdma_writes == 1; }));
  CHECK(echoed.zero_copy_bytes == (pooled ? kPayload : 0));
  CHECK(echoed.staged_bytes == (pooled ? 3 : kPayload + 3));  // + "hdr".
}

// A block comes back from the application zeroed (a later peer that writes
// less than its grant must not read an earlier frame), and is reused.
TEST_CASE("rdma: grant-pool blocks are zeroed when released and reused") {
  int count = 0;
  ibv_device** devices = ibv_get_device_list(&count);
  REQUIRE(devices != nullptr);
  REQUIRE(count > 0);
  ibv_context* verbs = ibv_open_device(devices[0]);
  ibv_free_device_list(devices);
  REQUIRE(verbs != nullptr);
  {
    auto domain = rdma::DeviceDomain::For(verbs);
    REQUIRE(domain.ok());
    rdma::GrantPool* pool = (*domain)->grant_pool();
    REQUIRE(pool != nullptr);  // rxe binds type 2 windows.
    constexpr size_t kSize = 100 << 10;
    auto first = pool->Acquire(kSize, tunables::kDefaultRdmaMaxPoolBytes);
    REQUIRE(first.has_value());
    REQUIRE(first->buffer.size() == kSize);
    std::byte* const address = first->buffer.data();
    CHECK(std::all_of(address, address + kSize,
                      [](std::byte b) { return b == std::byte{0}; }));
    std::memset(address, 0x5a, kSize);
    CHECK(pool->blocks_out() == 1);
    const uint64_t registrations = rdma::RegistrationCalls();
    first->buffer.Reset();
    CHECK(pool->blocks_out() == 0);
    auto second = pool->Acquire(kSize, tunables::kDefaultRdmaMaxPoolBytes);
    REQUIRE(second.has_value());
    CHECK(second->buffer.data() == address);
    CHECK(std::all_of(address, address + kSize,
                      [](std::byte b) { return b == std::byte{0}; }));
    CHECK(rdma::RegistrationCalls() == registrations);
    CHECK(pool->Lkey(second->buffer.span()) == second->region->lkey);
    // Out of the pool's range: the caller registers for itself.
    CHECK(!pool->Acquire(tunables::kRdmaGrantPoolMaxBlock + 1,
                         tunables::kDefaultRdmaMaxPoolBytes));
    // A block may outlive the domain (an application holds a frame after
    // its connections closed): it is plain memory then.
    Buffer kept = std::move(second->buffer);
    domain->reset();
    kept.data()[0] = std::byte{1};
  }
  ibv_close_device(verbs);
}

TEST_CASE("rdma: registered payloads are written without a copy") {
  Pair pair(PollMode::kEvent);
  auto client = std::dynamic_pointer_cast<rdma::RdmaConnection>(pair.client);
  REQUIRE(client);
  constexpr size_t kArena = 8 << 20;
  auto arena = MemoryRegistration::Allocate(kArena);
  REQUIRE(arena.ok());
  Fill((*arena)->data(), kArena, 0);

  // 5 MiB straight from the arena: only the 3-byte header is copied.
  OutgoingFrame frame;
  frame.header = Buffer::CopyOf(std::string_view("hdr"));
  frame.AddPayload((*arena)->Slice(0, 5 << 20));
  REQUIRE(pair.client->Send(std::move(frame)).ok());
  REQUIRE(pair.WaitFor(1));
  const ConnectionStats& sent = pair.client->stats();
  CHECK(sent.zero_copy_bytes == (5 << 20));
  CHECK(sent.staged_bytes == 3);
  CHECK(sent.registrations == 1);

  // The same memory again: the connection's cached region, no ibv_reg_mr.
  // Mixed with an unregistered 2.5 MiB slice in the middle (staged through
  // the bounce pool in several chunks) and a 16-byte registered one.
  const size_t a = 100000, b = (5 << 20) / 2, c = 300000;
  Buffer middle = Buffer::Allocate(b);
  Fill(middle.data(), b, a);
  OutgoingFrame mixed;
  mixed.header = Buffer::CopyOf(std::string_view("hdr"));
  mixed.AddPayload((*arena)->Slice(0, a));
  mixed.AddPayload(std::move(middle));
  mixed.AddPayload((*arena)->Slice(a + b, c));
  mixed.AddPayload(Buffer::Borrow(std::span((*arena)->data() + a + b + c, 16)));
  REQUIRE(pair.client->Send(std::move(mixed)).ok());
  REQUIRE(pair.WaitFor(2));
  CHECK(sent.registrations == 1);
  CHECK(sent.zero_copy_bytes == (5 << 20) + a + c + 16);
  CHECK(sent.staged_bytes == 3 + 3 + b);
  CHECK(WaitUntil([&] { return sent.rdma_writes == 2; }));
  {
    std::lock_guard lock(pair.recorder->mu);
    CHECK(pair.recorder->intact);
    CHECK(pair.recorder->sizes ==
          std::vector<uint64_t>{5 << 20, a + b + c + 16});
  }
  CHECK(client->cached_registrations() == 1);
  // The registration ends: the connection deregisters its region at once.
  arena->reset();
  CHECK(WaitUntil([&] { return client->cached_registrations() == 0; }));
}

// A connection being set up has no owner but its loop (LoopState). When the
// loop is destroyed first, the connection must go with it: it used to hold
// itself until established, so it leaked (QP, memory, and its loop's
// CmChannel and CompletionGroup, which a later loop built at the same
// address was then handed: its connections' calls hung until keepalive
// closed them).
TEST_CASE("rdma: a loop destroyed under a connect lets go of the connection") {
  // A listener whose loop never runs: nobody answers, so the connect stays
  // under way.
  boost::asio::io_context unanswered;
  auto listener = Listen(
      unanswered, RdmaUri(), {},
      [&]() -> boost::asio::io_context& { return unanswered; },
      [](std::shared_ptr<Connection>) {});
  REQUIRE(listener.ok());
  auto uri = ParseUri((*listener)->uri());
  REQUIRE(uri.ok());
  std::atomic<int> established{0};
  std::weak_ptr<rdma::RdmaConnection> under_way;
  std::weak_ptr<rdma::RdmaConnection> never_run;
  std::weak_ptr<int> handler_state;
  uint64_t first_loop = 0;
  {
    auto loop = std::make_unique<rpc::EventLoop>();
    first_loop = rdma::LoopState::Of(loop->context()).loop_id();
    under_way = rdma::RdmaConnection::Connect(
        loop->context(), uri->host, uri->port, TransportOptions{},
        [&](const Status&, std::shared_ptr<rdma::RdmaConnection>) {
          ++established;
        });
    // Address and route resolved, the request sent: waiting for the reply.
    std::this_thread::sleep_for(300ms);
    CHECK(rdma::LoopState::Of(loop->context()).held() == 1);
    loop->Stop();
    loop.reset();
    // The same through the transport's Connect, which a Channel uses: its
    // handler (here holding `token`, in a Channel the channel's state) is
    // let go of with the connection.
    auto other = std::make_unique<rpc::EventLoop>();
    auto token = std::make_shared<int>(0);
    handler_state = token;
    Connect(
        other->context(), (*listener)->uri(), TransportOptions{},
        [&, token](StatusOr<std::shared_ptr<Connection>>) { ++established; });
    token.reset();
    std::this_thread::sleep_for(300ms);
    CHECK(rdma::LoopState::Of(other->context()).held() == 1);
    other->Stop();
    other.reset();
    // A loop that never ran at all.
    boost::asio::io_context idle;
    never_run = rdma::RdmaConnection::Connect(
        idle, uri->host, uri->port, TransportOptions{},
        [&](const Status&, std::shared_ptr<rdma::RdmaConnection>) {
          ++established;
        });
    CHECK(rdma::LoopState::Of(idle).held() == 1);
  }
  CHECK(under_way.expired());
  CHECK(never_run.expired());
  CHECK(handler_state.expired());
  CHECK(established == 0);
  // A loop built at the address of one destroyed has an id of its own.
  std::optional<boost::asio::io_context> context;
  context.emplace();
  const uint64_t before = rdma::LoopState::Of(*context).loop_id();
  void* const address = &*context;
  context.reset();
  context.emplace();
  REQUIRE(static_cast<void*>(&*context) == address);
  CHECK(rdma::LoopState::Of(*context).loop_id() != before);
  CHECK(rdma::LoopState::Of(*context).loop_id() != first_loop);
}

// A registration cache keyed by address would hand new memory at the old
// address the old registration's memory region, which still maps the old
// pages: the peer would receive stale bytes. The test maps fresh pages at
// exactly the old address to make that happen.
TEST_CASE(
    "rdma: memory registered anew at the same address is sent from "
    "its own pages") {
  Pair pair(PollMode::kEvent);
  auto client = std::dynamic_pointer_cast<rdma::RdmaConnection>(pair.client);
  REQUIRE(client);
  constexpr size_t kSize = 2 << 20;
  void* address = mmap(nullptr, kSize, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(address != MAP_FAILED);
  auto* bytes = static_cast<std::byte*>(address);
  auto send = [&](size_t frames) {
    auto registration = MemoryRegistration::Register(std::span(bytes, kSize));
    REQUIRE(registration.ok());
    OutgoingFrame frame;
    frame.header = Buffer::CopyOf(std::string_view("hdr"));
    frame.AddPayload((*registration)->Slice(0, kSize));
    REQUIRE(pair.client->Send(std::move(frame)).ok());
    REQUIRE(pair.WaitFor(frames));
  };
  std::memset(bytes, 0xee, kSize);  // Not the pattern.
  send(1);
  // The transfer is done and the registration gone: so is the region.
  REQUIRE(WaitUntil([&] { return client->cached_registrations() == 0; }));
  {
    std::lock_guard lock(pair.recorder->mu);
    REQUIRE_FALSE(pair.recorder->intact);
    pair.recorder->intact = true;
  }
  // New pages at the same address.
  REQUIRE(munmap(address, kSize) == 0);
  REQUIRE(mmap(address, kSize, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1,
               0) == address);
  Fill(bytes, kSize, 0);
  send(2);
  {
    std::lock_guard lock(pair.recorder->mu);
    CHECK(pair.recorder->intact);
  }
  CHECK(pair.client->stats().registrations == 2);
  munmap(address, kSize);
}

}  // namespace
}  // namespace rdmarpc::transport
