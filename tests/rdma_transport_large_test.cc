// rdma_transport_test (rdma_transport_test.cc): large frames: pipelined
// WRITE WITH IMMEDIATE transfers, standing grants, segments, the grant pool,
// zero-copy sends from registered memory.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <cstring>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "rdmarpc/memory.h"
#include "rpc/common/event_loop.h"
#include "tests/support/rdma_pair.h"
#include "transport/factory/factory.h"
#include "transport/rdma/completion_group.h"
#include "transport/rdma/grant_memory.h"
#include "transport/rdma/loop_state.h"
#include "transport/rdma/rdma_connection.h"
#include "transport/uri.h"

namespace rdmarpc::transport::testing {
namespace {

using namespace std::chrono_literals;

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
  Pair pair({.max_grant_bytes = 3 << 20});
  // All four are sent from one handler on the client's loop, so the second
  // RTS goes out before the first transfer can have finished (from this
  // thread, the loop sometimes sent the first whole before the second was
  // queued, and nothing was pipelined).
  std::promise<bool> sent;
  boost::asio::post(pair.client->executor(), [&] {
    bool ok = true;
    for (int i = 0; i < 4; ++i) ok &= pair.client->Send(MakeFrame(kFrame)).ok();
    sent.set_value(ok);
  });
  REQUIRE(sent.get_future().get());
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
  Pair pair({.keepalive_interval = 300ms});
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
  Pair pair({.max_grant_bytes = 1 << 20, .pooled_grants = pooled});
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
  void OnFrame(ReceivedFrame&& frame) override {
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
  Pair pair({.server_observer = recorder, .pooled_grants = pooled});
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
  void OnFrame(ReceivedFrame&& frame) override {
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
  Pair pair({.server_observer = echoer, .pooled_grants = pooled});
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
        loop->context(), uri->host, uri->port, TransportOptions{}, {},
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
        idle, uri->host, uri->port, TransportOptions{}, {},
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
}  // namespace rdmarpc::transport::testing
