// The TCP transport on its own: ordering, the poll modes, batching, frames
// received in place. With tcp_transport_replies_test.cc it makes one binary,
// tcp_transport_test.

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch_test_macros.hpp>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "base/large_block.h"
#include "rdmarpc/peer_memory.h"
#include "rdmarpc/tunables.h"
#include "tests/support/tcp_pair.h"

namespace rdmarpc::transport::testing {
namespace {

using namespace std::chrono_literals;

TEST_CASE("tcp: frames arrive whole and in order, small and large mixed") {
  Pair pair;
  ExchangeMix(pair);
  CHECK(pair.server->stats().read_waits > 0);
  CHECK(pair.server->stats().empty_reads == 0);  // It never polled.
}

// A connection whose loop ends before its close runs (an application that
// stops the loop first, or a close still flushing when it does) is destroyed
// with frames counted in the peer memory budget: it gives them back then.
// (Before, the count stayed: admission_test's next case found 8 MiB held
// after a channel's 8 MiB request was cut short, 1 run in 36 under ASan.)
TEST_CASE("tcp: a connection destroyed unclosed gives back its peer memory") {
  const uint64_t before = PeerMemoryUsed();
  {
    Pair pair;
    pair.loop.Stop();  // No handler runs from here: the frame stays queued.
    REQUIRE(pair.client->Send(MakeFrame("h", 1 << 20)).ok());
    CHECK(PeerMemoryUsed() >= before + (1 << 20));
  }  // The connections go with the loop's pending handlers.
  CHECK(PeerMemoryUsed() == before);
}

TEST_CASE("tcp: busy-poll mode carries the same traffic, never waiting") {
  Pair pair(std::make_shared<Recorder>(), Polling(PollMode::kBusy));
  ExchangeMix(pair);
  CHECK(pair.server->stats().read_waits == 0);
  CHECK(pair.server->stats().empty_reads > 0);
}

TEST_CASE("tcp: hybrid mode carries the same traffic") {
  Pair pair(std::make_shared<Recorder>(), Polling(PollMode::kHybrid));
  ExchangeMix(pair);
}

// Hybrid mode spins only while there is traffic: quiet for hybrid_spin, a
// connection waits for readability as in event mode, and a frame arriving
// then still wakes it; it spins again, then waits again.
TEST_CASE("tcp: hybrid mode waits once quiet, and wakes for the next frame") {
  TransportOptions options = Polling(PollMode::kHybrid);
  options.hybrid_spin = 2ms;
  Pair pair(std::make_shared<Recorder>(), options);
  const ConnectionStats& stats = pair.server->stats();
  for (const char* header : {"first", "second"}) {
    std::this_thread::sleep_for(200ms);  // Far longer than hybrid_spin.
    const uint64_t waits = stats.read_waits;
    const uint64_t empty = stats.empty_reads;
    CHECK(waits > 0);  // Waiting...
    std::this_thread::sleep_for(100ms);
    CHECK(stats.empty_reads == empty);  // ...not spinning.
    CHECK(stats.read_waits == waits);
    REQUIRE(pair.client->Send(MakeFrame(header, 16)).ok());
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (stats.read_waits == waits) {  // Woken; it waits again later.
      REQUIRE(std::chrono::steady_clock::now() < until);
      std::this_thread::sleep_for(1ms);
    }
    CHECK(stats.empty_reads > empty);  // In between, it spun.
  }
  AwaitFrames(*pair.recorder, 2);
}

// A busy connection reads in turns and posts the next, so the loop's timers
// and other handlers still run. (A turn that looped until data came would
// hold the loop forever on an idle connection.)
TEST_CASE("tcp: a busy connection leaves its loop to timers and handlers") {
  Pair pair(std::make_shared<Recorder>(), Polling(PollMode::kBusy));
  std::promise<void> fired, ran;
  boost::asio::steady_timer timer(pair.loop.context(), 5ms);
  timer.async_wait(
      [&](const boost::system::error_code&) { fired.set_value(); });
  boost::asio::post(pair.loop.context(), [&] { ran.set_value(); });
  CHECK(ran.get_future().wait_for(10s) == std::future_status::ready);
  CHECK(fired.get_future().wait_for(10s) == std::future_status::ready);
  CHECK(pair.server->stats().empty_reads > 0);  // Polling all the while.
  REQUIRE(pair.client->Send(MakeFrame("after", 16)).ok());
  AwaitFrames(*pair.recorder, 1);
}

// A released frame's block takes the next large frame, for bandwidth: fresh
// heap memory for every large frame would be faulted in and zeroed by the
// kernel page by page (64 MiB frames at about 0.6 of the raw socket's
// bandwidth).
// Frames far larger than the socket takes: the writer waits for room and
// writes on from where it stopped, mid-frame and mid-piece, with every
// sendmsg taking all the room there is (not asio::async_write's 64 KiB per
// call, each a posted handler).
TEST_CASE("tcp: a batch larger than the socket waits for room, then leaves") {
  Pair pair;
  constexpr int kFrames = 8;
  constexpr size_t kSize = (4 << 20) + 3;  // Pieces end off any boundary.
  for (int i = 0; i < kFrames; ++i) {
    REQUIRE(pair.client->Send(MakeFrame("b" + std::to_string(i), kSize)).ok());
  }
  AwaitFrames(*pair.recorder, kFrames);
  std::lock_guard lock(pair.recorder->mu);
  for (int i = 0; i < kFrames; ++i) {
    CHECK(pair.recorder->headers[i] == "b" + std::to_string(i));
    CHECK(pair.recorder->payload_sizes[i] == kSize);
  }
  CHECK(pair.recorder->payloads_intact);
  const ConnectionStats& stats = pair.client->stats();
  CHECK(stats.write_waits > 0);
  // A slow run (TSan) may also send a keepalive PING: the client hears
  // nothing from the server for longer than kKeepaliveInterval.
  CHECK(stats.frames_sent - stats.keepalive_pings == kFrames);
  INFO("write calls " << stats.write_calls << ", waits " << stats.write_waits);
  // Every wait is followed by at least one write that moves bytes.
  CHECK(stats.write_calls > stats.write_waits);
}

TEST_CASE("tcp: a large frame is read into the block the last one released") {
  Pair pair;
  const size_t size = 3 << 20;  // With its header, capacity class 4 MiB.
  REQUIRE(pair.client->Send(MakeFrame("first", size)).ok());
  AwaitFrames(*pair.recorder, 1);  // Its payload was released in OnFrame.
  const size_t cached = CachedLargeBlockBytes();
  REQUIRE(cached >= (4u << 20));
  {
    std::lock_guard lock(pair.recorder->mu);
    pair.recorder->keep_payloads = true;
  }
  REQUIRE(pair.client->Send(MakeFrame("again", size)).ok());
  AwaitFrames(*pair.recorder, 2);
  std::lock_guard lock(pair.recorder->mu);
  CHECK(pair.recorder->payload_addresses[1] ==
        pair.recorder->payload_addresses[0]);
  CHECK(CachedLargeBlockBytes() == cached - (4u << 20));
  CHECK(pair.recorder->payloads_intact);
}

// A 64 KiB message arrives whole in one read; copying it out of the staging
// area would cost about 5 us per side, so it is handed over where it landed,
// and the frames that follow land in a fresh staging block.
TEST_CASE("tcp: a 64 KiB frame is received in place, and stays intact") {
  Pair pair;
  {
    std::lock_guard lock(pair.recorder->mu);
    pair.recorder->keep_payloads = true;
  }
  constexpr size_t kFrames = 3;
  for (size_t i = 0; i < kFrames; ++i) {  // One at a time: each read ends it.
    REQUIRE(pair.client->Send(MakeFrame("big", 64 << 10)).ok());
    AwaitFrames(*pair.recorder, i + 1);
  }
  REQUIRE(pair.client->Send(MakeFrame("small", 20 << 10)).ok());
  AwaitFrames(*pair.recorder, kFrames + 1);
  CHECK(pair.server->stats().frames_received_in_place == kFrames);
  std::lock_guard lock(pair.recorder->mu);
  CHECK(pair.recorder->payloads_intact);
  for (size_t i = 0; i < pair.recorder->kept.size(); ++i) {
    bool intact = true;  // Still, with every later frame received.
    const Buffer& payload = pair.recorder->kept[i];
    for (size_t j = 0; j < payload.size(); ++j) {
      intact &= payload.data()[j] == std::byte(j % 251);
    }
    CHECK(intact);
  }
}

// Frames too large to receive in place are read straight into their own
// blocks: after the first, the read that brings the next one's prefix is
// kept short (kTcpLargeFrameHeadRead), so only a few KiB of each are copied
// out of the staging area, not up to all of it (128 KiB a frame before).
TEST_CASE("tcp: a stream of large frames is read straight into its blocks") {
  Pair pair;
  constexpr size_t kFrames = 8;
  constexpr size_t kSize = 1 << 20;
  for (size_t i = 0; i < kFrames; ++i) {  // All at once: they queue up.
    REQUIRE(pair.client->Send(MakeFrame("large", kSize)).ok());
  }
  REQUIRE(pair.client->Send(MakeFrame("small", 100)).ok());
  AwaitFrames(*pair.recorder, kFrames + 1);
  {
    std::lock_guard lock(pair.recorder->mu);
    CHECK(pair.recorder->payloads_intact);
    CHECK(pair.recorder->payload_sizes.back() == 100);
  }
  const uint64_t copied = pair.server->stats().received_bytes_copied;
  INFO("bytes copied out of staging: " << copied);
  CHECK(copied <= tunables::kTcpReceiveChunk +
                      kFrames * tunables::kTcpLargeFrameHeadRead);
}

// Frames whose ends straddle full reads of the staging area, and frames
// large enough to receive in place with others staged behind them.
TEST_CASE("tcp: frames around the staging area's size arrive whole") {
  Pair pair;
  const size_t chunk = tunables::kTcpReceiveChunk;
  const std::vector<size_t> sizes = {chunk - 40, chunk + 8, 40000,     40000,
                                     chunk / 2,  7,         chunk - 16};
  for (size_t i = 0; i < sizes.size(); ++i) {
    REQUIRE(
        pair.client->Send(MakeFrame("h" + std::to_string(i), sizes[i])).ok());
  }
  AwaitFrames(*pair.recorder, sizes.size());
  std::lock_guard lock(pair.recorder->mu);
  for (size_t i = 0; i < sizes.size(); ++i) {
    CHECK(pair.recorder->headers[i] == "h" + std::to_string(i));
    CHECK(pair.recorder->payload_sizes[i] == sizes[i]);
  }
  CHECK(pair.recorder->payloads_intact);
}

// Close() writes every frame queued before it, so a server's last responses
// survive a graceful shutdown.
TEST_CASE("tcp: Close writes the frames queued before it") {
  Pair pair;
  REQUIRE(pair.client->Send(MakeFrame("last words", 8 << 20)).ok());
  pair.client->Close(Status(StatusCode::kUnavailable, "shutting down"));
  CHECK_FALSE(pair.client->Send(MakeFrame("too late", 1)).ok());
  const Status reason = pair.recorder->closed.get_future().get();
  CHECK(reason.code() == StatusCode::kUnavailable);  // The peer left.
  std::lock_guard lock(pair.recorder->mu);
  REQUIRE(pair.recorder->headers.size() == 1);
  CHECK(pair.recorder->payload_sizes[0] == (8u << 20));
  CHECK(pair.recorder->payloads_intact);
}

TEST_CASE("tcp: frames queued together leave in one gathered write") {
  Pair pair;
  constexpr int kFrames = 500;
  std::promise<void> queued;
  // Queue every frame from the connection's own thread, so none can leave
  // before the last is queued.
  boost::asio::post(pair.client->executor(), [&] {
    for (int i = 0; i < kFrames; ++i) {
      pair.client->Send(MakeFrame("f", 16)).IgnoreError();
    }
    queued.set_value();
  });
  queued.get_future().wait();
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (pair.server->stats().frames_received < kFrames &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(1ms);
  }
  CHECK(pair.server->stats().frames_received == kFrames);
  CHECK(pair.client->stats().frames_sent == kFrames);
  // 500 frames of 3 buffers each: 1,500 buffers, IOV_MAX (1,024) per
  // sendmsg, so 2 system calls for all of them.
  CHECK(pair.client->stats().write_calls == 2);
  CHECK(pair.server->stats().read_calls < kFrames / 10);
}

// Answers each frame from inside OnFrame, and notes whether the answer had
// already been written when Send returned.

}  // namespace
}  // namespace rdmarpc::transport::testing
