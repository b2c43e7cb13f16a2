// tcp_transport_test (tcp_transport_test.cc): replies sent from inside
// OnFrame (direct writes, gathered writes, re-entry), raw peers, and what a
// close says.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <boost/asio/post.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <future>
#include <mutex>
#include <semaphore>
#include <string>
#include <thread>

#include "rpc/common/event_loop.h"
#include "tests/support/tcp_pair.h"
#include "transport/factory/factory.h"
#include "transport/keepalive.h"
#include "transport/tcp/tcp_connection.h"

namespace rdmarpc::transport::testing {
namespace {

using namespace std::chrono_literals;
using Catch::Matchers::ContainsSubstring;

struct Answerer : ConnectionObserver {
  void OnFrame(ReceivedFrame&&) override {
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
  void OnFrame(ReceivedFrame&&) override {
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
  void OnFrame(ReceivedFrame&&) override {
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
  // Those sent with more staged behind were copied together, not queued.
  CHECK(pair.client->stats().frames_coalesced > 0);
  AwaitFrames(*pair.recorder, kFrames);
  std::lock_guard lock(pair.recorder->mu);
  CHECK(pair.recorder->payloads_intact);
}

// Answers frame "fN" with "sN" (small); every third also with "lN", too large
// to coalesce, and "tN" (small) behind it. Another thread sends frames too.
struct MixedAnswerer : ConnectionObserver {
  void OnFrame(ReceivedFrame&& frame) override {
    auto connection = this->connection.lock();
    if (!connection) return;
    const std::string n(
        reinterpret_cast<const char*>(frame.header().data()) + 1,
        frame.header().size() - 1);
    connection->Send(MakeFrame("s" + n, 16)).IgnoreError();
    if (std::stoi(n) % 3 == 0) {
      connection->Send(MakeFrame("l" + n, 4096)).IgnoreError();
      connection->Send(MakeFrame("t" + n, 16)).IgnoreError();
    }
    answering.store(true);
  }
  void OnClose(const Status&) override {}
  std::weak_ptr<Connection> connection;
  // Set once the first reply is sent (and, with frames staged behind it,
  // the read's block begun).
  std::atomic<bool> answering{false};
};

// Coalesced frames never overtake a frame the loop thread queued before
// them (one too large to coalesce), nor get stranded by frames another
// thread queues meanwhile: everything arrives, the loop thread's in the
// order sent. The other thread starts once the first reply is sent, so the
// first read's replies begin a block (the server's frames are all in the
// socket before the loop reads: both ends share it) and the other thread's
// frames race the rest; had it started earlier, a flush it posted could
// hold the writer's token through every read and nothing would coalesce.
TEST_CASE("tcp: coalesced replies keep their order behind queued ones") {
  auto answerer = std::make_shared<MixedAnswerer>();
  Pair pair(answerer);
  answerer->connection = pair.client;
  constexpr int kFrames = 300;
  constexpr int kOthers = 200;
  std::thread other([&] {
    while (!answerer->answering.load()) std::this_thread::yield();
    for (int i = 0; i < kOthers; ++i) {
      pair.client->Send(MakeFrame("other", 16)).IgnoreError();
      if (i % 8 == 0) std::this_thread::yield();
    }
  });
  boost::asio::post(pair.server->executor(), [&] {
    for (int i = 0; i < kFrames; ++i) {
      pair.server->Send(MakeFrame("f" + std::to_string(i), 16)).IgnoreError();
    }
  });
  other.join();
  std::vector<std::string> expected;
  for (int i = 0; i < kFrames; ++i) {
    const std::string n = std::to_string(i);
    expected.push_back("s" + n);
    if (i % 3 == 0) {
      expected.push_back("l" + n);
      expected.push_back("t" + n);
    }
  }
  AwaitFrames(*pair.recorder, expected.size() + kOthers);
  CHECK(pair.client->stats().frames_coalesced > 0);
  std::lock_guard lock(pair.recorder->mu);
  std::vector<std::string> answers;
  for (const std::string& header : pair.recorder->headers) {
    if (header != "other") answers.push_back(header);
  }
  CHECK(pair.recorder->headers.size() - answers.size() == kOthers);
  CHECK(answers == expected);
  CHECK(pair.recorder->payloads_intact);
}

// Notes whether OnClose ran inside OnFrame.
struct ReentryCheck : ConnectionObserver {
  void OnFrame(ReceivedFrame&&) override {
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
  // The HELLOs: the peer's, then the server's, read so that closing the
  // socket later sends FIN, not RST.
  const auto hello = TcpControlFrame(KeepaliveKind::kHello);
  REQUIRE(write(peer, hello.data(), hello.size()) ==
          static_cast<ssize_t>(hello.size()));
  std::array<std::byte, kTcpControlFrameSize> greeting;
  REQUIRE(read(peer, greeting.data(), greeting.size()) ==
          static_cast<ssize_t>(greeting.size()));
  REQUIRE(greeting == hello);
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

// A read's replies that find another write in flight (a large frame the
// peer is not reading) queue behind it, and take no coalescing block: a
// block taken then would stay with the connection, 16 KiB for each one
// stalled so.
TEST_CASE("tcp: replies queued behind a write in flight hold no block") {
  rpc::EventLoop loop;
  RawPeer raw = ConnectRawPeer(loop);
  auto tcp = std::dynamic_pointer_cast<tcp::TcpConnection>(raw.server);
  REQUIRE(tcp);
  auto answerer = std::make_shared<Answerer>();
  answerer->connection = raw.server;
  raw.server->Start(answerer);
  // Far more than the socket buffers take, and the peer reads nothing.
  REQUIRE(raw.server->Send(MakeFrame("large", 16 << 20)).ok());
  for (int i = 0; i < 1000 && raw.server->stats().write_waits == 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  REQUIRE(raw.server->stats().write_waits > 0);
  // Three frames in one write, which one read delivers together.
  const EncodedPrefix prefix = EncodeFramePrefix({FrameType::kRpc, 0, 1, 0});
  std::string bytes;
  for (int i = 0; i < 3; ++i) {
    bytes.append(reinterpret_cast<const char*>(prefix.data()), prefix.size());
    bytes += "h";
  }
  REQUIRE(write(raw.fd, bytes.data(), bytes.size()) ==
          static_cast<ssize_t>(bytes.size()));
  for (int i = 0; i < 1000; ++i) {
    {
      std::lock_guard lock(answerer->mu);
      if (answerer->answered == 3) break;
    }
    std::this_thread::sleep_for(10ms);
  }
  {
    std::lock_guard lock(answerer->mu);
    REQUIRE(answerer->answered == 3);
    CHECK(answerer->left_at_once == 0);  // All three wait their turn.
  }
  CHECK(raw.server->stats().frames_coalesced == 0);
  std::promise<size_t> held;
  boost::asio::post(loop.context(),
                    [&] { held.set_value(tcp->coalesce_block_bytes()); });
  CHECK(held.get_future().get() == 0);
  close(raw.fd);
}

struct CloseReason : ConnectionObserver {
  void OnFrame(ReceivedFrame&&) override { ++frames; }
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
}  // namespace rdmarpc::transport::testing
