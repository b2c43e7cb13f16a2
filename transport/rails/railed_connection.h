// A connection of several rails: one connection (on RDMA, one queue pair)
// on each of several NICs or paths to the same peer, opened as one session
// (docs/protocol.md, "Rails"). The factory builds it for
// rdma://A:P?rails=B:P (factory.h), on both sides.
//
//  - Frames go on the primary rail alone, so they keep their order; a frame
//    arriving on another rail is a protocol error that closes that rail.
//  - A bulk loan (Lend) is lent on every rail that is up: its descriptor
//    (include/rdmarpc/bulk.h, format 2) lists the loan's key on each, and
//    Revoke ends it on all of them.
//  - A pull or push of more than kRailSliceThreshold bytes is sliced (in
//    whole chunks, at most kRailSliceSize) over every rail up on both sides
//    (a rail that is up here and named in the descriptor), at most
//    kRailSlicesInFlight per rail, each rail taking the next slice as one
//    of its own completes: faster rails carry more. Smaller ones go whole
//    on the primary rail.
//  - A rail other than the primary that fails (its connection closes: a QP
//    error, its port down, keepalive) is dropped: its slices in flight are
//    sent again on the others, and the transfer completes. The side that
//    connected connects it again after kRailRejoinDelay (and again after
//    each failure) and it rejoins. The primary failing closes the whole
//    connection: calls in flight fail UNAVAILABLE (never run twice), and a
//    channel connects again, to the first rail that answers.
//
// Threading: as every Connection. Its state is guarded by one mutex; slices'
// completions, which each rail reports on its own executor, are handled on
// the primary's.
#ifndef RDMARPC_TRANSPORT_RAILS_RAILED_CONNECTION_H_
#define RDMARPC_TRANSPORT_RAILS_RAILED_CONNECTION_H_

#include <array>
#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "rdmarpc/tunables.h"
#include "transport/connection.h"

namespace rdmarpc::transport::rails {

class RailedConnection final
    : public Connection,
      public std::enable_shared_from_this<RailedConnection> {
 public:
  // Connects rail `rail` again (the side that connected), as its `epoch`-th
  // connection: `done` with the new connection, or why not.
  using RailConnector =
      std::function<void(uint8_t rail, uint16_t epoch, ConnectHandler done)>;

  // `primary` is rail `primary_rail`, its first connection (epoch 0);
  // `reconnect` is null on the side that accepted (its peer connects the
  // rails again).
  static std::shared_ptr<RailedConnection> Create(
      std::shared_ptr<Connection> primary, uint8_t primary_rail,
      RailConnector reconnect);
  ~RailedConnection() override;

  // A rail joins as its `epoch`-th connection; one of the same rail still
  // up is closed (the side that connected knows best). False (the caller
  // closes `connection`) when the number is out of range or the primary's,
  // or this connection is closed. Loans lent before name the rail's earlier
  // epoch and are never used on the new connection.
  bool AddRail(uint8_t rail, uint16_t epoch,
               const std::shared_ptr<Connection>& connection);
  // The side that connected: connects `rail` after kRailRejoinDelay (its
  // first connection failed).
  void RejoinLater(uint8_t rail);

  // Rails up now, the primary's included.
  size_t rails_up() const;
  // Rail `rail`'s connection, null while it is down (tests, metrics).
  std::shared_ptr<Connection> rail(uint8_t rail) const;
  std::vector<RailStats> rail_stats() const override;
  uint8_t primary_rail() const { return primary_rail_; }

  // Connection: frames, stats and the executor are the primary's.
  void Start(std::shared_ptr<ConnectionObserver> observer) override;
  // A frame waits (in order) while a loan's windows on the other rails are
  // being bound: it may carry the loan's descriptor, and the peer must not
  // use a key before its window is.
  Status Send(OutgoingFrame&& frame) override {
    if (binds_pending_.load(std::memory_order_acquire) == 0 &&
        !holding_.load(std::memory_order_acquire)) {
      return primary_->Send(std::move(frame));
    }
    return SendHeld(std::move(frame));
  }
  void Close(const Status& reason) override;
  boost::asio::any_io_executor executor() const override {
    return primary_->executor();
  }
  const std::string& peer() const override { return primary_->peer(); }
  // The primary's: a rail joins only with the same identity (AcceptRails).
  const PeerIdentity* peer_identity() const override {
    return primary_->peer_identity();
  }
  const ConnectionStats& stats() const override { return primary_->stats(); }
  uint64_t queued_bytes() const override { return primary_->queued_bytes(); }
  void RequireAdmission(uint64_t max_payload) override {
    primary_->RequireAdmission(max_payload);
  }
  void Admit() override { primary_->Admit(); }

  StatusOr<BulkDescriptor> Lend(std::span<std::byte> bytes,
                                BulkAccess access) override;
  void Revoke(uint64_t key, UniqueFunction<void()> revoked) override;
  void Pull(const BulkDescriptor& loan, uint64_t offset,
            std::span<std::byte> destination, BulkCallback done) override;
  void Push(std::span<const std::byte> source, const BulkDescriptor& loan,
            uint64_t offset, BulkCallback done) override;

  RailedConnection(std::shared_ptr<Connection> primary, uint8_t primary_rail,
                   RailConnector reconnect);  // Use Create.

 private:
  class RailObserver;
  struct Rail {
    std::shared_ptr<Connection> connection;  // Null while down.
    uint64_t generation = 0;  // Of this object's, unique per connection.
    uint16_t epoch = 0;       // The session's, for descriptors.
    bool rejoining = false;   // A connect or its delay is under way.
    RailStats stats;
    // What its connection owes (slices posted, binds not yet done), and the
    // stall watch's view of its progress: slices landed and binds done, the
    // count it saw last with the connection's bulk chunks, and when that
    // last moved.
    uint32_t slices_out = 0;
    uint32_t binds_out = 0;
    uint64_t progress = 0;
    uint64_t progress_seen = 0;
    std::chrono::steady_clock::time_point progress_at;
  };
  struct BulkOp;
  struct Slice {
    uint64_t offset = 0;  // From the op's start.
    uint64_t length = 0;
    bool resent = false;  // A failed rail had it first.
    std::chrono::steady_clock::time_point posted;  // To its current rail.
  };

  // A rail's connection closed (`generation` names which).
  void OnRailClosed(uint8_t rail, uint64_t generation, const Status& reason);
  // Under mu_: rail `rail` (not the primary) is down; returns its
  // connection, for the caller to close outside the lock.
  std::shared_ptr<Connection> TakeDownLocked(uint8_t rail,
                                             const Status& reason);
  void ScheduleRejoin(uint8_t rail);  // Under mu_.
  // Bulk: starts an op on the primary's executor.
  void StartBulk(std::shared_ptr<BulkOp> op);
  // Issues what slices the rails have room for; finishes the op once it is
  // over. Loop thread.
  void Pump(const std::shared_ptr<BulkOp>& op);
  void OnSlice(const std::shared_ptr<BulkOp>& op, uint8_t rail,
               uint64_t generation, Slice slice, const Status& status);
  void Finish(const std::shared_ptr<BulkOp>& op);
  Status SendHeld(OutgoingFrame&& frame);
  // A bind LendAcross awaited (on `rail`'s connection `generation`) is
  // done: held frames go once none is left.
  void BindDone(uint8_t rail, uint64_t generation);
  // Under mu_: `rail`'s connection owes one more slice or bind, or paid one
  // (if it is still connection `generation`).
  void OweLocked(uint8_t rail, uint64_t generation, bool slice);
  void PaidLocked(uint8_t rail, uint64_t generation, bool slice, bool ok);
  // The stall watch (kRailStallTimeout), on the primary's executor while a
  // rail other than the primary owes anything.
  void OnStallTick();
  void ArmStallWatchLocked();  // Its next tick, in kRailStallTimeout / 8.
  // The loan's descriptor on `rail` as its `epoch`-th connection (a plain
  // one, for that connection); nullopt if the loan names no such key.
  static std::optional<BulkDescriptor> OnRail(const BulkDescriptor& loan,
                                              uint8_t rail, uint16_t epoch);

  const std::shared_ptr<Connection> primary_;
  const uint8_t primary_rail_;
  const RailConnector reconnect_;

  mutable std::mutex mu_;
  std::array<Rail, tunables::kMaxRails> rails_;  // Guarded by mu_.
  std::shared_ptr<ConnectionObserver> observer_;
  bool closed_ = false;  // Guarded by mu_.
  // Loans: this connection's key -> each rail's key. Guarded by mu_.
  std::unordered_map<uint64_t, std::vector<BulkDescriptor::RailKey>> loans_;
  uint64_t next_loan_key_ = 1;    // Guarded by mu_.
  uint64_t next_generation_ = 1;  // Guarded by mu_.
  // Binds on other rails than the primary not yet done, and the frames
  // waiting for them (guarded by mu_; holding_ while any wait or are being
  // sent, so that none overtakes them).
  std::atomic<uint64_t> binds_pending_{0};
  std::atomic<bool> holding_{false};
  std::deque<OutgoingFrame> held_;
  // When the frames held now began to wait (logged when it was long).
  std::chrono::steady_clock::time_point held_since_;
  std::shared_ptr<boost::asio::steady_timer> stall_timer_;  // Guarded by mu_.
  bool watching_ = false;                                   // Guarded by mu_.
};

}  // namespace rdmarpc::transport::rails

#endif  // RDMARPC_TRANSPORT_RAILS_RAILED_CONNECTION_H_
