// What the RDMA transport's tests share (rdma_transport_test's three
// files): a connected pair of connections on two loops over the Soft-RoCE
// device (RXE_IP), a recorder checking every byte, and frames to send.
#ifndef RDMARPC_TESTS_RDMA_PAIR_H_
#define RDMARPC_TESTS_RDMA_PAIR_H_

#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rdmarpc/tunables.h"
#include "rpc/common/event_loop.h"
#include "transport/connection.h"
#include "transport/factory/factory.h"

namespace rdmarpc::transport::testing {

inline std::string RdmaUri() {
  const char* ip = std::getenv("RXE_IP");
  if (ip == nullptr) {
    FAIL("RXE_IP is not set: run under tools/softroce/run (tools/test does)");
  }
  return std::string("rdma://") + ip + ":0";
}

struct Recorder : ConnectionObserver {
  void OnFrame(ReceivedFrame&& frame) override {
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

// The byte pattern Recorder checks, written at `offset` of the payload.
inline void Fill(std::byte* data, size_t size, size_t offset) {
  for (size_t i = 0; i < size; ++i) data[i] = std::byte((offset + i) % 251);
}

inline OutgoingFrame MakeFrame(size_t payload) {
  OutgoingFrame frame;
  frame.header = Buffer::CopyOf(std::string_view("hdr"));
  Buffer body = Buffer::Allocate(payload);
  for (size_t i = 0; i < payload; ++i) body.data()[i] = std::byte(i % 251);
  frame.AddPayload(std::move(body));
  return frame;
}

// How a Pair is set up: both sides' transport options, unless noted.
struct PairOptions {
  PollMode mode = PollMode::kEvent;
  uint64_t max_grant_bytes = tunables::kDefaultMaxGrantBytes;
  // What the server's connection reports to (default: the Pair's recorder).
  std::shared_ptr<ConnectionObserver> server_observer = nullptr;
  bool pooled_grants = true;
  std::chrono::milliseconds keepalive_interval = tunables::kKeepaliveInterval;
  uint64_t max_pool_bytes = tunables::kDefaultRdmaMaxPoolBytes;
  // The client's own keepalive interval, when set.
  std::chrono::milliseconds client_keepalive_interval{};
};

// A connected pair on two loops; the server side records what arrives.
struct Pair {
  explicit Pair(PollMode mode) : Pair(PairOptions{.mode = mode}) {}
  explicit Pair(const PairOptions& setup) {
    options.poll_mode = setup.mode;
    options.rdma_max_pool_bytes = setup.max_pool_bytes;
    options.keepalive_interval = setup.keepalive_interval;
    options.max_grant_bytes = setup.max_grant_bytes;
    options.rdma_pooled_grants = setup.pooled_grants;
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
    if (setup.client_keepalive_interval.count() > 0) {
      client_options.keepalive_interval = setup.client_keepalive_interval;
    }
    Connect(client_loop.context(), listener->uri(), client_options,
            [&](StatusOr<std::shared_ptr<Connection>> c) {
              connected.set_value(std::move(c));
            });
    auto c = connected.get_future().get();
    REQUIRE(c.ok());
    client = *c;
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      {
        std::lock_guard lock(accepted_mu);
        if (!accepted.empty()) {
          server = accepted.front();
          break;
        }
      }
      REQUIRE(std::chrono::steady_clock::now() < until);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (setup.server_observer) {
      server->Start(setup.server_observer);
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
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    client_loop.Stop();
    server_loop.Stop();
  }
  bool WaitFor(size_t frames,
               std::chrono::seconds timeout = std::chrono::seconds(60)) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (recorder->count() < frames) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
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

inline bool WaitUntil(const std::function<bool()>& done) {
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Sends a frame of each size at once; all arrive intact, in order.
inline void SendAllInOrder(Pair& pair, const std::vector<size_t>& sizes) {
  for (size_t size : sizes) REQUIRE(pair.client->Send(MakeFrame(size)).ok());
  REQUIRE(pair.WaitFor(sizes.size()));
  std::lock_guard lock(pair.recorder->mu);
  CHECK(pair.recorder->intact);
  CHECK(pair.recorder->sizes ==
        std::vector<uint64_t>(sizes.begin(), sizes.end()));
}

inline void ExchangeMix(Pair& pair) {
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

}  // namespace rdmarpc::transport::testing

#endif  // RDMARPC_TESTS_RDMA_PAIR_H_
