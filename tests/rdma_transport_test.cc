// The RDMA transport on its own, on a real device (run in the Soft-RoCE VM by
// tools/test; without a device every case fails: there is no silent skip).
// This file: small frames, the poll modes, credits, selective signaling.
// With rdma_transport_resources_test.cc and rdma_transport_large_test.cc it
// makes one binary, rdma_transport_test.

#include <boost/asio/post.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "rpc/common/event_loop.h"
#include "tests/support/rdma_pair.h"
#include "transport/factory/factory.h"
#include "transport/rdma/device_info.h"
#include "transport/rdma/rdma_connection.h"

namespace rdmarpc::transport::testing {
namespace {

using namespace std::chrono_literals;

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
  Pair pair({.keepalive_interval = 100ms});
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
  Pair pair({.keepalive_interval = 100ms, .client_keepalive_interval = 2000ms});
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
  Pair pair({.pooled_grants = pooled});
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

}  // namespace
}  // namespace rdmarpc::transport::testing
