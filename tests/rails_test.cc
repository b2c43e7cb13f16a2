// Connections of several rails (transport/rails/railed_connection.h): bulk
// sliced over every rail, a rail lost mid-transfer with its slices resent
// on the others, frames on the primary alone, loans per rail and epoch.
//
// Over TCP (the default) both sides are built by hand from TCP connections
// to one listener. Over RDMA (RDMARPC_TEST_TRANSPORT=rdma, in the VM) they
// come from the factory: rdma://RXE_IP:P?rails=RXE_IP:P, two queue pairs on
// the one device, the session in rdma_cm's private data, and the client
// connecting a lost rail again.
#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <cstring>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rdmarpc/bulk.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/memory.h"
#include "rdmarpc/server.h"
#include "rpc/builtin/prometheus.h"
#include "rpc/common/event_loop.h"
#include "tests/support/test_support.h"
#include "transport/bulk.h"
#include "transport/factory/factory.h"
#include "transport/rails/railed_connection.h"
#include "transport/rdma/rdma_connection.h"
#include "transport/uri.h"

namespace rdmarpc::testing {
namespace {

using namespace std::chrono_literals;
using transport::Connection;
using transport::ConnectionObserver;
using transport::ReceivedFrame;
using transport::rails::RailedConnection;

struct Recorder : ConnectionObserver {
  void OnFrame(ReceivedFrame&& frame) override {
    std::lock_guard lock(mu);
    headers.emplace_back(reinterpret_cast<const char*>(frame.header().data()),
                         frame.header().size());
  }
  void OnClose(const Status& reason) override {
    std::lock_guard lock(mu);
    closed = true;
    close_reason = reason;
  }
  std::mutex mu;
  std::vector<std::string> headers;
  bool closed = false;
  Status close_reason;
};

template <typename Predicate>
bool Eventually(Predicate predicate, std::chrono::seconds limit = 20s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!predicate()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

void Fill(std::span<std::byte> bytes, uint64_t seed) {
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = std::byte((i * 131 + seed + i / 4096) & 0xff);
  }
}

std::shared_ptr<MemoryRegistration> Arena(size_t size) {
  auto arena = MemoryRegistration::Allocate(size);
  REQUIRE(arena.ok());
  return *arena;
}

// Two sides of a connection of two rails: `client` lends, `server` pulls
// and pushes.
// A rail whose fabric stopped answering while its connection stays up (no
// error, no close): its pulls and pushes, and the binds of loans lent across
// it, never complete; they fail, or run, once it is aborted or closed.
class Stalling final : public Connection {
 public:
  explicit Stalling(std::shared_ptr<Connection> inner)
      : inner_(std::move(inner)) {}
  void Start(std::shared_ptr<ConnectionObserver> observer) override {
    inner_->Start(std::move(observer));
  }
  Status Send(transport::OutgoingFrame&& frame) override {
    return inner_->Send(std::move(frame));
  }
  void Close(const Status& reason) override {
    Release(reason);
    inner_->Close(reason);
  }
  void Abort(const Status& reason) override {
    {
      std::lock_guard lock(mu_);
      aborted_ = reason;
    }
    Close(reason);
  }
  boost::asio::any_io_executor executor() const override {
    return inner_->executor();
  }
  const std::string& peer() const override { return inner_->peer(); }
  const transport::ConnectionStats& stats() const override {
    return inner_->stats();
  }
  uint64_t queued_bytes() const override { return inner_->queued_bytes(); }
  StatusOr<BulkDescriptor> Lend(std::span<std::byte> bytes,
                                BulkAccess access) override {
    return inner_->Lend(bytes, access);
  }
  StatusOr<BulkDescriptor> LendAcross(std::span<std::byte> bytes,
                                      BulkAccess access,
                                      UniqueFunction<void()> usable) override {
    StatusOr<BulkDescriptor> lent = inner_->Lend(bytes, access);
    if (lent.ok()) {
      std::lock_guard lock(mu_);
      binds_.push_back(std::move(usable));
    }
    return lent;
  }
  void Revoke(uint64_t key, UniqueFunction<void()> revoked) override {
    inner_->Revoke(key, std::move(revoked));
  }
  void Pull(const BulkDescriptor&, uint64_t, std::span<std::byte>,
            transport::BulkCallback done) override {
    std::lock_guard lock(mu_);
    stuck_.push_back(std::move(done));
  }
  void Push(std::span<const std::byte>, const BulkDescriptor&, uint64_t,
            transport::BulkCallback done) override {
    std::lock_guard lock(mu_);
    stuck_.push_back(std::move(done));
  }
  // Why it was aborted ("" if it was not).
  std::string aborted() const {
    std::lock_guard lock(mu_);
    return aborted_ ? aborted_->message() : "";
  }
  size_t stuck() const {
    std::lock_guard lock(mu_);
    return stuck_.size() + binds_.size();
  }

 private:
  void Release(const Status& reason) {
    std::vector<transport::BulkCallback> stuck;
    std::vector<UniqueFunction<void()>> binds;
    {
      std::lock_guard lock(mu_);
      stuck.swap(stuck_);
      binds.swap(binds_);
    }
    const Status failed(StatusCode::kUnavailable,
                        "stalled rail closed: " + reason.message());
    for (auto& done : stuck) {
      boost::asio::post(
          inner_->executor(),
          [done = std::move(done), failed]() mutable { done(failed); });
    }
    for (auto& usable : binds) usable();
  }

  const std::shared_ptr<Connection> inner_;
  mutable std::mutex mu_;
  std::optional<Status> aborted_;
  std::vector<transport::BulkCallback> stuck_;
  std::vector<UniqueFunction<void()>> binds_;
};

struct Rails {
  // Rail 1 of one side stalled (over TCP, whatever the transport tested).
  enum class Stall { kNone, kServer, kClient };

  explicit Rails(Stall stall = Stall::kNone) : stall_(stall) {
    if (OverRdma() && stall == Stall::kNone) {
      OpenOverRdma();
    } else {
      OpenOverTcp();
    }
    REQUIRE(Eventually([&] { return server->rails_up() == 2; }));
    REQUIRE(client->rails_up() == 2);
    server->Start(server_frames);
    client->Start(client_frames);
  }
  ~Rails() {
    client->Close(Status(StatusCode::kCancelled, "test over"));
    Eventually([&] {
      std::lock_guard lock(server_frames->mu);
      return server_frames->closed;
    });
    loop.Stop();
  }

  // Two TCP connections to one listener, paired in order by hand.
  void OpenOverTcp() {
    std::mutex mu;
    std::vector<std::shared_ptr<Connection>> accepted;
    auto bound = transport::Listen(
        loop.context(), "tcp://127.0.0.1:0", {},
        [this]() -> boost::asio::io_context& { return loop.context(); },
        [&](std::shared_ptr<Connection> c) {
          std::lock_guard lock(mu);
          accepted.push_back(std::move(c));
        });
    REQUIRE(bound.ok());
    std::vector<std::shared_ptr<Connection>> connected;
    for (int rail = 0; rail < 2; ++rail) {
      std::promise<StatusOr<std::shared_ptr<Connection>>> done;
      transport::Connect(loop.context(), (*bound)->uri(), {},
                         [&](StatusOr<std::shared_ptr<Connection>> c) {
                           done.set_value(std::move(c));
                         });
      auto c = done.get_future().get();
      REQUIRE(c.ok());
      connected.push_back(*c);
      REQUIRE(Eventually([&] {
        std::lock_guard lock(mu);
        return accepted.size() == connected.size();
      }));
    }
    if (stall_ == Stall::kClient) {
      stalled = std::make_shared<Stalling>(connected[1]);
      connected[1] = stalled;
    } else if (stall_ == Stall::kServer) {
      stalled = std::make_shared<Stalling>(accepted[1]);
      accepted[1] = stalled;
    }
    client = RailedConnection::Create(connected[0], 0, nullptr);
    REQUIRE(client->AddRail(1, 0, connected[1]));
    server = RailedConnection::Create(accepted[0], 0, nullptr);
    REQUIRE(server->AddRail(1, 0, accepted[1]));
    listener = std::move(*bound);
  }

  // The factory's: rdma://IP:P?rails=IP:P.
  void OpenOverRdma() {
    std::promise<std::shared_ptr<Connection>> accepted;
    auto bound = transport::Listen(
        loop.context(), ListenUri(), {},
        [this]() -> boost::asio::io_context& { return loop.context(); },
        [&](std::shared_ptr<Connection> c) { accepted.set_value(c); });
    REQUIRE(bound.ok());
    auto uri = transport::ParseUri((*bound)->uri());
    REQUIRE(uri.ok());
    const std::string address = uri->host + ":" + std::to_string(uri->port);
    std::promise<StatusOr<std::shared_ptr<Connection>>> done;
    transport::Connect(loop.context(), (*bound)->uri() + "?rails=" + address,
                       {}, [&](StatusOr<std::shared_ptr<Connection>> c) {
                         done.set_value(std::move(c));
                       });
    auto c = done.get_future().get();
    REQUIRE(c.ok());
    client = std::dynamic_pointer_cast<RailedConnection>(*c);
    REQUIRE(client);
    server = std::dynamic_pointer_cast<RailedConnection>(
        accepted.get_future().get());
    REQUIRE(server);
    listener = std::move(*bound);
  }

  // Breaks `side`'s rail as a fabric failure would: over RDMA its queue
  // pair goes to the error state; over TCP its connection closes.
  static void Break(RailedConnection& side, uint8_t rail) {
    std::shared_ptr<Connection> connection = side.rail(rail);
    REQUIRE(connection);
    if (auto rdma = std::dynamic_pointer_cast<transport::rdma::RdmaConnection>(
            connection)) {
      return rdma->ForceQpErrorForTesting();
    }
    connection->Close(Status(StatusCode::kUnavailable, "rail broken by test"));
  }

  // As a call carries a descriptor: a frame after the loan, which reaches
  // the server once the loan's windows on every rail are bound.
  void Announce() {
    size_t seen;
    {
      std::lock_guard lock(server_frames->mu);
      seen = server_frames->headers.size();
    }
    transport::OutgoingFrame frame;
    frame.header = Buffer::CopyOf(std::string("descriptor"));
    REQUIRE(client->Send(std::move(frame)).ok());
    REQUIRE(Eventually([&] {
      std::lock_guard lock(server_frames->mu);
      return server_frames->headers.size() > seen;
    }));
  }

  Status Pull(const BulkDescriptor& loan, std::span<std::byte> into) {
    std::promise<Status> done;
    server->Pull(loan, 0, into, [&](const Status& s) { done.set_value(s); });
    auto future = done.get_future();
    REQUIRE(future.wait_for(60s) == std::future_status::ready);
    return future.get();
  }

  const Stall stall_;
  rpc::EventLoop loop;
  std::unique_ptr<transport::Listener> listener;
  std::shared_ptr<RailedConnection> client;
  std::shared_ptr<RailedConnection> server;
  // Rail 1 of the side stall_ names (it holds that TCP connection: gone
  // before the loop).
  std::shared_ptr<Stalling> stalled;
  std::shared_ptr<Recorder> client_frames = std::make_shared<Recorder>();
  std::shared_ptr<Recorder> server_frames = std::make_shared<Recorder>();
};

RailStats StatsOf(const RailedConnection& side, uint8_t rail) {
  for (const RailStats& stats : side.rail_stats()) {
    if (stats.rail == rail) return stats;
  }
  return RailStats{};
}

// Large enough for eight slices of 4 MiB over two rails.
constexpr size_t kBig = 32 << 20;
// Sixteen: a rail broken once it has carried one still has some in flight.
constexpr size_t k64MiB = 64 << 20;

TEST_CASE("a loan is lent on every rail, and a pull is sliced over them",
          "[rails]") {
  Rails rails;
  auto lent = Arena(kBig);
  Fill({lent->data(), kBig}, 7);
  auto loan = rails.client->Lend({lent->data(), kBig}, BulkAccess::kRead);
  REQUIRE(loan.ok());
  rails.Announce();
  REQUIRE(loan->rail_count == 2);
  CHECK(loan->rails[0].rail == 0);
  CHECK(loan->rails[1].rail == 1);
  // It travels whole: format 2, 32 + 2 x 16 bytes, and back.
  const auto encoded = loan->Encode();
  CHECK(encoded.size() == 64);
  auto decoded = BulkDescriptor::Decode({encoded.data(), encoded.size()});
  REQUIRE(decoded);
  CHECK(decoded->rails[1].key == loan->rails[1].key);

  auto into = Arena(kBig);
  REQUIRE(rails.Pull(*decoded, {into->data(), kBig}).ok());
  CHECK(std::memcmp(into->data(), lent->data(), kBig) == 0);
  const RailStats zero = StatsOf(*rails.server, 0);
  const RailStats one = StatsOf(*rails.server, 1);
  CHECK(zero.bulk_bytes + one.bulk_bytes == kBig);
  std::cout << "32 MiB pull over two rails: " << zero.bulk_bytes * 100 / kBig
            << " % on rail 0, " << one.bulk_bytes * 100 / kBig
            << " % on rail 1\n";
  // Each rail takes the next slice as one of its own lands: equal rails
  // share about equally.
  CHECK(zero.bulk_bytes >= kBig / 4);
  CHECK(one.bulk_bytes >= kBig / 4);

  // Small ones go whole on the primary.
  REQUIRE(rails.Pull(*decoded, {into->data(), 4096}).ok());
  CHECK(StatsOf(*rails.server, 0).slices == zero.slices + 1);
  CHECK(StatsOf(*rails.server, 1).slices == one.slices);

  // A push is sliced the same way.
  auto writable = Arena(kBig);
  auto target =
      rails.client->Lend({writable->data(), kBig}, BulkAccess::kWrite);
  REQUIRE(target.ok());
  rails.Announce();
  std::promise<Status> pushed;
  rails.server->Push({lent->data(), kBig}, *target, 0,
                     [&](const Status& s) { pushed.set_value(s); });
  REQUIRE(pushed.get_future().get().ok());
  CHECK(std::memcmp(writable->data(), lent->data(), kBig) == 0);
  CHECK(StatsOf(*rails.server, 1).slices > one.slices);

  std::promise<void> revoked;
  rails.client->Revoke(loan->key, [&] { revoked.set_value(); });
  REQUIRE(revoked.get_future().wait_for(10s) == std::future_status::ready);
  rails.client->Revoke(target->key, [] {});
}

TEST_CASE("a rail lost mid-pull: its slices go on the other, nothing lost",
          "[rails]") {
  Rails rails;
  auto lent = Arena(k64MiB);
  Fill({lent->data(), k64MiB}, 11);
  auto loan = rails.client->Lend({lent->data(), k64MiB}, BulkAccess::kRead);
  REQUIRE(loan.ok());
  rails.Announce();
  auto into = Arena(k64MiB);
  std::promise<Status> done;
  rails.server->Pull(*loan, 0, {into->data(), k64MiB},
                     [&](const Status& s) { done.set_value(s); });
  // Once rail 1 has carried a slice, it fails with more in flight.
  REQUIRE(Eventually([&] { return StatsOf(*rails.server, 1).slices >= 1; }));
  Rails::Break(*rails.server, 1);
  auto future = done.get_future();
  REQUIRE(future.wait_for(60s) == std::future_status::ready);
  REQUIRE(future.get().ok());
  CHECK(std::memcmp(into->data(), lent->data(), k64MiB) == 0);
  const RailStats zero = StatsOf(*rails.server, 0);
  const RailStats one = StatsOf(*rails.server, 1);
  CHECK(one.failures == 1);
  CHECK(zero.slices_resent >= 1);  // It had slices in flight.
  CHECK(zero.bulk_bytes + one.bulk_bytes == k64MiB);  // Each byte landed once.
  std::cout << "rail 1 lost mid-pull: " << zero.slices_resent
            << " slice(s) resent on rail 0, " << one.bulk_bytes * 100 / k64MiB
            << " % had landed on rail 1\n";
  // (Over RDMA the client may have connected it again already.)
  if (!OverRdma()) CHECK(rails.server->rails_up() == 1);
  // The connection carries on: frames, and a pull on the rail left.
  rails.Announce();
  auto again = Arena(k64MiB);
  REQUIRE(rails.Pull(*loan, {again->data(), k64MiB}).ok());
  CHECK(std::memcmp(again->data(), lent->data(), k64MiB) == 0);
  CHECK(StatsOf(*rails.server, 1).bulk_bytes == one.bulk_bytes);

  if (OverRdma()) {
    // The side that connected connects the rail again; a loan lent before
    // names its earlier connection and is never used on the new one, a new
    // loan is lent on both.
    REQUIRE(Eventually([&] { return rails.server->rails_up() == 2; }));
    const uint64_t before = StatsOf(*rails.server, 1).bulk_bytes;
    REQUIRE(rails.Pull(*loan, {again->data(), k64MiB}).ok());
    CHECK(StatsOf(*rails.server, 1).bulk_bytes == before);
    REQUIRE(Eventually([&] { return rails.client->rails_up() == 2; }));
    auto fresh = rails.client->Lend({lent->data(), k64MiB}, BulkAccess::kRead);
    REQUIRE(fresh.ok());
    rails.Announce();
    CHECK(fresh->rail_count == 2);
    REQUIRE(rails.Pull(*fresh, {again->data(), k64MiB}).ok());
    CHECK(StatsOf(*rails.server, 1).bulk_bytes > before);
    CHECK(StatsOf(*rails.client, 1).joins == 2);
    rails.client->Revoke(fresh->key, [] {});
  }
  rails.client->Revoke(loan->key, [] {});
}

TEST_CASE(
    "a rail that stops answering, its connection still up, is abandoned: "
    "its slices go on the other",
    "[rails]") {
  Rails rails(Rails::Stall::kServer);
  auto lent = Arena(kBig);
  Fill({lent->data(), kBig}, 13);
  auto loan = rails.client->Lend({lent->data(), kBig}, BulkAccess::kRead);
  REQUIRE(loan.ok());
  rails.Announce();
  REQUIRE(loan->rail_count == 2);
  // Without the stall watch this pull waits for rail 1 forever.
  auto into = Arena(kBig);
  REQUIRE(rails.Pull(*loan, {into->data(), kBig}).ok());
  CHECK(std::memcmp(into->data(), lent->data(), kBig) == 0);
  INFO(rails.stalled->aborted());
  CHECK(rails.stalled->aborted().find("no progress for") != std::string::npos);
  CHECK(rails.stalled->stuck() == 0);
  const RailStats zero = StatsOf(*rails.server, 0);
  const RailStats one = StatsOf(*rails.server, 1);
  CHECK(one.failures == 1);
  CHECK(one.bulk_bytes == 0);
  CHECK(zero.bulk_bytes == kBig);
  CHECK(zero.slices_resent >= 1);
  CHECK(rails.server->rails_up() == 1);
  rails.client->Revoke(loan->key, [] {});
}

TEST_CASE(
    "a loan's bind that never completes on a rail holds frames only until "
    "that rail is abandoned",
    "[rails]") {
  Rails rails(Rails::Stall::kClient);
  auto lent = Arena(4096);
  auto loan = rails.client->Lend({lent->data(), 4096}, BulkAccess::kRead);
  REQUIRE(loan.ok());
  REQUIRE(rails.stalled->stuck() == 1);  // Rail 1's bind.
  // The frame after the loan waits for that bind, then goes once the rail
  // is taken for dead (Announce waits for it to arrive).
  rails.Announce();
  INFO(rails.stalled->aborted());
  CHECK(rails.stalled->aborted().find("1 window binds") != std::string::npos);
  CHECK(StatsOf(*rails.client, 1).failures == 1);
  CHECK(rails.client->rails_up() == 1);
  rails.client->Revoke(loan->key, [] {});
}

TEST_CASE("frames travel on the primary alone", "[rails]") {
  Rails rails;
  transport::OutgoingFrame frame;
  frame.header = Buffer::CopyOf(std::string("hello"));
  REQUIRE(rails.client->Send(std::move(frame)).ok());
  REQUIRE(Eventually([&] {
    std::lock_guard lock(rails.server_frames->mu);
    return rails.server_frames->headers.size() == 1;
  }));
  // A frame on another rail breaks their order: that rail is closed, the
  // connection stays.
  transport::OutgoingFrame stray;
  stray.header = Buffer::CopyOf(std::string("stray"));
  REQUIRE(rails.client->rail(1)->Send(std::move(stray)).ok());
  REQUIRE(Eventually([&] { return rails.server->rails_up() == 1; }));
  std::lock_guard lock(rails.server_frames->mu);
  CHECK(rails.server_frames->headers.size() == 1);
  CHECK_FALSE(rails.server_frames->closed);
}

TEST_CASE("the primary lost closes the whole connection", "[rails]") {
  Rails rails;
  Rails::Break(*rails.server, 0);
  REQUIRE(Eventually([&] {
    std::lock_guard lock(rails.server_frames->mu);
    return rails.server_frames->closed;
  }));
  CHECK(rails.server->rails_up() == 0);
  REQUIRE(Eventually([&] { return rails.client->rails_up() == 0; }));
  auto lent = Arena(4096);
  CHECK(rails.client->Lend({lent->data(), 4096}, BulkAccess::kRead)
            .status()
            .code() == StatusCode::kUnavailable);
}

TEST_CASE("a revoked loan fails a pull with the owner's answer",
          "[rails][tcp]") {
  if (OverRdma()) return;  // Over RDMA a revoked key breaks the queue pair.
  Rails rails;
  auto lent = Arena(8 << 20);
  auto loan = rails.client->Lend({lent->data(), 8 << 20}, BulkAccess::kRead);
  REQUIRE(loan.ok());
  rails.Announce();
  std::promise<void> revoked;
  rails.client->Revoke(loan->key, [&] { revoked.set_value(); });
  revoked.get_future().wait();
  auto into = Arena(8 << 20);
  const Status pulled = rails.Pull(*loan, {into->data(), 8 << 20});
  CHECK(pulled.code() == StatusCode::kFailedPrecondition);
  // Not a rail's failure: both stay.
  CHECK(rails.server->rails_up() == 2);
}

// The whole stack over rails: a Channel to rdma://IP:P?rails=IP:P, a
// handler that pulls the call's loan, and the rails in Channel::rails() and
// the server's Prometheus text. (rails= is rdma://'s: over TCP the cases
// above build the rails by hand.)
TEST_CASE("a channel's calls pull over its rails", "[rails][rdma]") {
  if (!OverRdma()) return;
  rpc::Service service("test.Rails");
  service.AddMethod("Pull", [](std::shared_ptr<rpc::ServerCall> call) {
    const BulkDescriptor loan = call->bulk()[0];
    auto into = Arena(loan.length);
    call->Pull(loan, 0, {into->data(), loan.length},
               [call, into](const Status& status) {
                 if (!status.ok()) return call->Finish(status);
                 call->Finish(Status(),
                              Buffer::CopyOf(std::span<const std::byte>(
                                  into->data(), 64)));
               });
  });
  rpc::Server server;
  server.RegisterService(&service);
  auto bound = server.Listen(ListenUri());
  REQUIRE(bound.ok());
  auto uri = transport::ParseUri(*bound);
  REQUIRE(uri.ok());
  Channel channel(*bound + "?rails=" + uri->host + ":" +
                  std::to_string(uri->port));
  // The warm-up: every rail up before the first call.
  channel.Connect();
  REQUIRE(Eventually([&] { return channel.state() == ChannelState::kReady; }));
  REQUIRE(channel.rails().size() == 2);
  CHECK(channel.rails()[1].up);
  auto lent = Arena(kBig);
  Fill({lent->data(), kBig}, 5);
  for (int i = 0; i < 3; ++i) {
    CallOptions options;
    options.bulk.push_back({lent->data(), kBig, BulkAccess::kRead});
    auto result = CallSync(channel, "Pull", "", options, "test.Rails");
    REQUIRE(result.status.ok());
    REQUIRE(result.response.size() == 64);
    CHECK(std::memcmp(result.response.data(), lent->data(), 64) == 0);
  }
  const std::vector<RailStats> rails = channel.rails();
  REQUIRE(rails.size() == 2);
  CHECK(rails[0].up);
  CHECK(rails[1].up);
  // The server sliced: each rail carried its share of 3 x 32 MiB.
  std::vector<RailStats> served;
  server.ForEachConnection([&](const transport::Connection& connection) {
    served = connection.rail_stats();
  });
  REQUIRE(served.size() == 2);
  CHECK(served[0].bulk_bytes + served[1].bulk_bytes == 3 * kBig);
  CHECK(served[1].bulk_bytes >= kBig / 2);
  const std::string text = rpc::PrometheusText(server);
  CHECK(text.find("rdmarpc_rail_bulk_bytes_total{side=\"server\",rail=\"1\"} " +
                  std::to_string(served[1].bulk_bytes)) != std::string::npos);
  CHECK(text.find("rdmarpc_rail_up{side=\"client\",target=") !=
        std::string::npos);
}

TEST_CASE("railed descriptors decode strictly", "[rails]") {
  BulkDescriptor loan;
  loan.key = 9;
  loan.length = 100;
  loan.rail_count = 2;
  loan.rails[0] = {0, 0, 11, 21};
  loan.rails[1] = {2, 3, 12, 22};
  const auto encoded = loan.Encode();
  std::vector<std::byte> bytes(encoded.begin(), encoded.end());
  auto decoded = BulkDescriptor::Decode(bytes);
  REQUIRE(decoded);
  CHECK(decoded->rails[1].rail == 2);
  CHECK(decoded->rails[1].epoch == 3);
  CHECK(decoded->rails[1].rkey == 12);
  CHECK(decoded->rails[1].key == 22);
  auto broken = bytes;
  broken[32 + 16] = std::byte{0};  // Rails not increasing.
  CHECK_FALSE(BulkDescriptor::Decode(broken));
  broken = bytes;
  broken[32 + 1] = std::byte{1};  // Padding not zero.
  CHECK_FALSE(BulkDescriptor::Decode(broken));
  broken = bytes;
  broken[3] = std::byte{tunables::kMaxRails + 1};  // More than kMaxRails.
  CHECK_FALSE(BulkDescriptor::Decode(broken));
  CHECK_FALSE(BulkDescriptor::Decode({bytes.data(), 48}));  // Truncated.
  // A railed loan on a connection of one names no key there.
  auto arena = Arena(4096);
  CHECK(transport::CheckTransfer(*decoded, 0, {arena->data(), 10},
                                 BulkAccess::kRead)
            .status()
            .code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rdmarpc::testing
