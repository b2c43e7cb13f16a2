// What tcp_transport_test's files share: a connected pair of TCP
// connections on two loops, a recorder checking every byte, and frames.
#ifndef RDMARPC_TESTS_TCP_PAIR_H_
#define RDMARPC_TESTS_TCP_PAIR_H_

#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/large_block.h"
#include "rpc/common/event_loop.h"
#include "transport/connection.h"
#include "transport/factory/factory.h"

namespace rdmarpc::transport::testing {

// Records every frame and the close reason.
struct Recorder : ConnectionObserver {
  void OnFrame(ReceivedFrame&& frame) override {
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

inline Buffer Pattern(size_t size) {
  Buffer buffer = Buffer::Allocate(size);
  for (size_t i = 0; i < size; ++i) buffer.data()[i] = std::byte(i % 251);
  return buffer;
}

inline OutgoingFrame MakeFrame(std::string header, size_t payload) {
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
inline void AwaitFrames(Recorder& recorder, size_t count) {
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    {
      std::lock_guard lock(recorder.mu);
      if (recorder.headers.size() >= count) return;
    }
    REQUIRE(std::chrono::steady_clock::now() < until);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

inline TransportOptions Polling(PollMode mode) {
  TransportOptions options;
  options.poll_mode = mode;
  return options;
}

// Sends frames of every path (empty, copied out, in place, read straight
// into their block) and checks they arrive whole and in order.
inline void ExchangeMix(Pair& pair) {
  const std::vector<size_t> sizes = {0, 10, 70000, 3, 5 << 20, 16 * 1024, 1};
  for (size_t i = 0; i < sizes.size(); ++i) {
    REQUIRE(
        pair.client->Send(MakeFrame("h" + std::to_string(i), sizes[i])).ok());
  }
  pair.client->Close(Status(StatusCode::kCancelled, "done"));
  REQUIRE(pair.recorder->closed.get_future().wait_for(
              std::chrono::seconds(30)) == std::future_status::ready);
  std::lock_guard lock(pair.recorder->mu);
  REQUIRE(pair.recorder->headers.size() == sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    CHECK(pair.recorder->headers[i] == "h" + std::to_string(i));
    CHECK(pair.recorder->payload_sizes[i] == sizes[i]);
  }
  CHECK(pair.recorder->payloads_intact);
}

}  // namespace rdmarpc::transport::testing

#endif  // RDMARPC_TESTS_TCP_PAIR_H_
