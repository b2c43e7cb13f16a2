// The TCP transport on its own: ordering, batching, graceful close.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <future>
#include <mutex>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include "base/large_block.h"
#include "base/tunables.h"
#include "rpc/event_loop.h"
#include "transport/factory/factory.h"

namespace rdmarpc::transport {
namespace {

using namespace std::chrono_literals;
using Catch::Matchers::ContainsSubstring;

// Records every frame and the close reason.
struct Recorder : ConnectionObserver {
  void OnFrame(ReceivedFrame frame) override {
    std::lock_guard lock(mu);
    headers.emplace_back(reinterpret_cast<const char*>(frame.header().data()),
                         frame.header().size());
    payload_sizes.push_back(frame.payload_size());
    Buffer payload = std::move(frame).TakePayload();
    payload_addresses.push_back(payload.data());
    bool intact = true;
    for (size_t i = 0; i < payload.size(); ++i) {
      intact &= payload.data()[i] == std::byte(i % 251);
    }
    payloads_intact &= intact;
    if (keep_payloads) kept.push_back(std::move(payload));
  }
  void OnClose(const Status& reason) override { closed.set_value(reason); }

  std::mutex mu;
  std::vector<std::string> headers;
  std::vector<uint64_t> payload_sizes;
  std::vector<const std::byte*> payload_addresses;
  bool payloads_intact = true;
  bool keep_payloads = false;  // Otherwise each is released in OnFrame.
  std::vector<Buffer> kept;
  std::promise<Status> closed;
};

Buffer Pattern(size_t size) {
  Buffer buffer = Buffer::Allocate(size);
  for (size_t i = 0; i < size; ++i) buffer.data()[i] = std::byte(i % 251);
  return buffer;
}

OutgoingFrame MakeFrame(std::string header, size_t payload) {
  OutgoingFrame frame;
  frame.header = Buffer::CopyOf(header);
  frame.AddPayload(Pattern(payload));
  return frame;
}

// A connected pair on one loop: `client` sends, the server side records.
struct Pair {
  explicit Pair(std::shared_ptr<ConnectionObserver> client_observer =
                    std::make_shared<Recorder>(),
                const TransportOptions& options = {}) {
    std::promise<std::shared_ptr<Connection>> accepted;
    auto listener = Listen(
        loop.context(), "tcp://127.0.0.1:0", options,
        [this]() -> boost::asio::io_context& { return loop.context(); },
        [&accepted](std::shared_ptr<Connection> c) { accepted.set_value(c); });
    REQUIRE(listener.ok());
    std::promise<StatusOr<std::shared_ptr<Connection>>> connected;
    Connect(loop.context(), (*listener)->uri(), options,
            [&](StatusOr<std::shared_ptr<Connection>> c) {
              connected.set_value(std::move(c));
            });
    auto c = connected.get_future().get();
    REQUIRE(c.ok());
    client = *c;
    server = accepted.get_future().get();
    server->Start(recorder);
    client->Start(std::move(client_observer));
  }
  ~Pair() { loop.Stop(); }

  rpc::EventLoop loop;
  std::shared_ptr<Connection> client;
  std::shared_ptr<Connection> server;
  std::shared_ptr<Recorder> recorder = std::make_shared<Recorder>();
};

// Waits until the recorder holds `count` frames.
void AwaitFrames(Recorder& recorder, size_t count) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    {
      std::lock_guard lock(recorder.mu);
      if (recorder.headers.size() >= count) return;
    }
    REQUIRE(std::chrono::steady_clock::now() < until);
    std::this_thread::sleep_for(100us);
  }
}

TransportOptions Polling(PollMode mode) {
  TransportOptions options;
  options.poll_mode = mode;
  return options;
}

// Sends frames of every path (empty, copied out, in place, read straight
// into their block) and checks they arrive whole and in order.
void ExchangeMix(Pair& pair) {
  const std::vector<size_t> sizes = {0, 10, 70000, 3, 5 << 20, 16 * 1024, 1};
  for (size_t i = 0; i < sizes.size(); ++i) {
    REQUIRE(
        pair.client->Send(MakeFrame("h" + std::to_string(i), sizes[i])).ok());
  }
  pair.client->Close(Status(StatusCode::kCancelled, "done"));
  REQUIRE(pair.recorder->closed.get_future().wait_for(30s) ==
          std::future_status::ready);
  std::lock_guard lock(pair.recorder->mu);
  REQUIRE(pair.recorder->headers.size() == sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    CHECK(pair.recorder->headers[i] == "h" + std::to_string(i));
    CHECK(pair.recorder->payload_sizes[i] == sizes[i]);
  }
  CHECK(pair.recorder->payloads_intact);
}

TEST_CASE("tcp: frames arrive whole and in order, small and large mixed") {
  Pair pair;
  ExchangeMix(pair);
  CHECK(pair.server->stats().read_waits > 0);
  CHECK(pair.server->stats().empty_reads == 0);  // It never polled.
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
  CHECK(stats.frames_sent == kFrames);
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
struct Answerer : ConnectionObserver {
  void OnFrame(ReceivedFrame) override {
    auto connection = this->connection.lock();
    if (!connection) return;
    const uint64_t before = connection->stats().frames_sent;
    const bool sent = connection->Send(MakeFrame("answer", 16)).ok();
    const uint64_t after = connection->stats().frames_sent;
    std::lock_guard lock(mu);
    if (sent) ++answered;
    if (after > before) ++left_at_once;
  }
  void OnClose(const Status&) override {}

  std::weak_ptr<Connection> connection;  // (It holds us.)
  std::mutex mu;
  int answered = 0;
  int left_at_once = 0;
};

// A ping-pong's reply must not wait for the rest of the handler's work (or
// for the next read to be set up): it is written inside Send.
TEST_CASE("tcp: a reply to the only frame of a read leaves inside Send") {
  for (const PollMode mode : {PollMode::kEvent, PollMode::kBusy}) {
    CAPTURE(static_cast<int>(mode));
    auto answerer = std::make_shared<Answerer>();
    Pair pair(answerer, Polling(mode));
    answerer->connection = pair.client;
    constexpr size_t kPings = 20;
    for (size_t i = 0; i < kPings; ++i) {
      // One at a time: each ping is the only frame its read finds.
      REQUIRE(pair.server->Send(MakeFrame("ping", 16)).ok());
      AwaitFrames(*pair.recorder, i + 1);
    }
    std::lock_guard lock(answerer->mu);
    CHECK(answerer->answered == kPings);
    CHECK(answerer->left_at_once == kPings);
    // Written as sent, without a trip through the queue and the batch path.
    CHECK(pair.client->stats().frames_written_directly == kPings);
  }
}

// Answers each frame at once, and lets another thread send a frame on the
// same connection at the same moment.
struct RacingAnswerer : ConnectionObserver {
  void OnFrame(ReceivedFrame) override {
    auto connection = this->connection.lock();
    if (!connection) return;
    go.release();
    connection->Send(MakeFrame("answer", 16)).IgnoreError();
  }
  void OnClose(const Status&) override {}

  std::weak_ptr<Connection> connection;
  std::counting_semaphore<> go{0};
};

// The loop thread writes a reply without the queue's lock. A frame another
// thread queues meanwhile finds the write under way and posts no flush of
// its own, so the loop thread must see it when it is done: otherwise it sits
// in the queue until something else is sent.
TEST_CASE("tcp: a frame queued during a direct write is not stranded") {
  auto answerer = std::make_shared<RacingAnswerer>();
  Pair pair(answerer);
  answerer->connection = pair.client;
  constexpr int kRounds = 300;
  std::atomic<int> other_sent{0};
  std::thread other([&] {
    for (int i = 0; i < kRounds; ++i) {
      answerer->go.acquire();
      if (pair.client->Send(MakeFrame("other", 16)).ok()) ++other_sent;
    }
  });
  {
    struct Joiner {  // Even when a REQUIRE below fails.
      std::thread& thread;
      RacingAnswerer& answerer;
      ~Joiner() {
        answerer.go.release(kRounds);
        thread.join();
      }
    } joiner{other, *answerer};
    for (int i = 0; i < kRounds; ++i) {
      REQUIRE(pair.server->Send(MakeFrame("ping", 16)).ok());
      AwaitFrames(*pair.recorder, 2 * (i + 1));  // Its answer and the other.
    }
  }
  CHECK(other_sent == kRounds);
}

// Answers the first frame with a reply far larger than the socket takes at
// once, then sends a small one behind it.
struct LargeAnswerer : ConnectionObserver {
  void OnFrame(ReceivedFrame) override {
    auto connection = this->connection.lock();
    if (!connection || answered++ > 0) return;
    sent_large = connection->Send(MakeFrame("large", kLarge)).ok();
    sent_small = connection->Send(MakeFrame("small", 16)).ok();
  }
  void OnClose(const Status&) override {}

  static constexpr size_t kLarge = 24 << 20;
  std::weak_ptr<Connection> connection;
  int answered = 0;  // Loop thread only.
  std::atomic<bool> sent_large{false}, sent_small{false};
};

// A reply written at once from OnFrame that the socket takes only part of
// goes on asynchronously from where it stopped; a frame sent behind it waits
// its turn.
TEST_CASE(
    "tcp: a reply that fills the socket finishes later, whole and in "
    "order") {
  auto answerer = std::make_shared<LargeAnswerer>();
  Pair pair(answerer);
  answerer->connection = pair.client;
  REQUIRE(pair.server->Send(MakeFrame("ping", 16)).ok());
  AwaitFrames(*pair.recorder, 2);
  CHECK(answerer->sent_large);
  CHECK(answerer->sent_small);
  std::lock_guard lock(pair.recorder->mu);
  REQUIRE(pair.recorder->headers.size() == 2);
  CHECK(pair.recorder->headers[0] == "large");
  CHECK(pair.recorder->payload_sizes[0] == LargeAnswerer::kLarge);
  CHECK(pair.recorder->headers[1] == "small");
  CHECK(pair.recorder->payloads_intact);
  // It did not all leave in one sendmsg.
  CHECK(pair.client->stats().write_calls > 1);
  CHECK(pair.client->stats().frames_written_directly == 0);
}

// ...while replies to frames that one read delivered together still leave
// together: one write per read, not one per reply.
TEST_CASE("tcp: replies to the frames of one read leave in one write") {
  auto answerer = std::make_shared<Answerer>();
  Pair pair(answerer);
  answerer->connection = pair.client;
  // (Few enough that a read's replies fit in one sendmsg: 3 buffers each.)
  constexpr int kFrames = 200;
  boost::asio::post(pair.server->executor(), [&] {
    for (int i = 0; i < kFrames; ++i) {
      pair.server->Send(MakeFrame("f", 16)).IgnoreError();
    }
  });
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (pair.client->stats().frames_sent < kFrames &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(1ms);
  }
  REQUIRE(pair.client->stats().frames_sent == kFrames);
  CHECK(pair.client->stats().write_calls <= pair.client->stats().read_calls);
  CHECK(pair.client->stats().write_calls < kFrames / 10);
}

// Notes whether OnClose ran inside OnFrame.
struct ReentryCheck : ConnectionObserver {
  void OnFrame(ReceivedFrame) override {
    in_frame = true;
    if (auto connection = this->connection.lock()) {
      connection->Send(MakeFrame("answer", 16)).IgnoreError();
    }
    in_frame = false;
    ++frames;
  }
  void OnClose(const Status&) override {
    closed_inside_frame = in_frame;
    closed.set_value();
  }
  std::weak_ptr<Connection> connection;
  bool in_frame = false;  // Loop thread only.
  std::atomic<bool> closed_inside_frame{false};
  std::atomic<int> frames{0};
  std::promise<void> closed;
};

// A server-side connection on `loop` and the raw socket connected to it.
struct RawPeer {
  std::unique_ptr<Listener> listener;
  std::shared_ptr<Connection> server;
  int fd = -1;
};

RawPeer ConnectRawPeer(rpc::EventLoop& loop) {
  // Shared with the accept callback, which outlives this function.
  auto accepted = std::make_shared<std::promise<std::shared_ptr<Connection>>>();
  auto listener = Listen(
      loop.context(), "tcp://127.0.0.1:0", {},
      [&loop]() -> boost::asio::io_context& { return loop.context(); },
      [accepted](std::shared_ptr<Connection> c) { accepted->set_value(c); });
  REQUIRE(listener.ok());
  const std::string& uri = (*listener)->uri();
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port =
      htons(static_cast<uint16_t>(std::stoi(uri.substr(uri.rfind(':') + 1))));
  const int peer = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(connect(peer, reinterpret_cast<sockaddr*>(&address),
                  sizeof(address)) == 0);
  std::shared_ptr<Connection> server = accepted->get_future().get();
  return {std::move(*listener), std::move(server), peer};
}

// Writes a whole frame, with a one-byte header and no payload, as a peer
// would.
void WriteOneByteHeaderFrame(int peer) {
  const EncodedPrefix prefix = EncodeFramePrefix({FrameType::kRpc, 0, 1, 0});
  std::string bytes(reinterpret_cast<const char*>(prefix.data()),
                    prefix.size());
  bytes += "h";
  REQUIRE(write(peer, bytes.data(), bytes.size()) ==
          static_cast<ssize_t>(bytes.size()));
}

// The write of a reply can fail inside Send (the peer reset the
// connection), and Send may run inside OnFrame: the close it causes must
// wait until OnFrame has returned, or the observer is re-entered.
TEST_CASE("tcp: a reply that fails to write inside OnFrame closes after it") {
  rpc::EventLoop loop;
  RawPeer raw = ConnectRawPeer(loop);
  const int peer = raw.fd;
  std::shared_ptr<Connection> server = raw.server;
  // Hold the loop while the peer sends a frame and then resets the
  // connection, so the frame is read with the reset already in.
  std::promise<void> gate;
  boost::asio::post(loop.context(), [&] { gate.get_future().wait(); });
  auto check = std::make_shared<ReentryCheck>();
  check->connection = server;
  server->Start(check);
  WriteOneByteHeaderFrame(peer);
  const linger reset{1, 0};
  setsockopt(peer, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  close(peer);
  std::this_thread::sleep_for(50ms);
  gate.set_value();
  REQUIRE(check->closed.get_future().wait_for(10s) ==
          std::future_status::ready);
  CHECK(check->frames == 1);
  CHECK_FALSE(check->closed_inside_frame);
}

struct CloseReason : ConnectionObserver {
  void OnFrame(ReceivedFrame) override { ++frames; }
  void OnClose(const Status& status) override { closed.set_value(status); }
  std::atomic<int> frames{0};
  std::promise<Status> closed;
};

// A raw peer sends one whole frame, then closes its socket (`reset`: with an
// RST). The frame arrives, and the close says which of the two it was.
Status FrameThenClose(bool reset, int* frames) {
  rpc::EventLoop loop;
  RawPeer raw = ConnectRawPeer(loop);
  const int peer = raw.fd;
  std::shared_ptr<Connection> server = raw.server;
  auto observer = std::make_shared<CloseReason>();
  server->Start(observer);
  WriteOneByteHeaderFrame(peer);
  for (int i = 0; i < 1000 && observer->frames == 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  REQUIRE(observer->frames == 1);
  if (reset) {
    const linger hard{1, 0};
    setsockopt(peer, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
  }
  close(peer);
  auto closed = observer->closed.get_future();
  REQUIRE(closed.wait_for(10s) == std::future_status::ready);
  *frames = observer->frames;
  return closed.get();
}

TEST_CASE("tcp: the close says whether the peer closed or reset") {
  int frames = 0;
  const Status orderly = FrameThenClose(/*reset=*/false, &frames);
  CHECK(frames == 1);
  CHECK(orderly.code() == StatusCode::kUnavailable);
  CHECK_THAT(orderly.message(), ContainsSubstring("closed the connection"));
  const Status reset = FrameThenClose(/*reset=*/true, &frames);
  CHECK(frames == 1);
  CHECK(reset.code() == StatusCode::kUnavailable);
  CHECK_THAT(reset.message(), ContainsSubstring("lost"));
  CHECK_THAT(reset.message(), ContainsSubstring("reset"));
}

}  // namespace
}  // namespace rdmarpc::transport
