#include "transport/rails/railed_connection.h"

#include <algorithm>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <utility>

#include "base/log.h"
#include "transport/bulk.h"

namespace rdmarpc::transport::rails {

namespace asio = boost::asio;

// Frames held longer than this for binds on other rails are logged.
constexpr auto kLongHold = std::chrono::milliseconds(100);

// A pull or push under way: its slices waiting, and those in flight on each
// rail. Loop thread (the primary's executor).
struct RailedConnection::BulkOp {
  bool read = true;
  BulkDescriptor loan;
  uint64_t offset = 0;  // In the loan.
  std::byte* local = nullptr;
  uint64_t length = 0;
  BulkCallback done;
  std::deque<Slice> waiting;
  std::array<uint32_t, tunables::kMaxRails> in_flight{};
  uint32_t total_in_flight = 0;
  Status error;  // The first error that is not a rail's failure.
};

// Delivers one rail's events: the primary's frames to the application's
// observer; every rail's close to the RailedConnection.
class RailedConnection::RailObserver final : public ConnectionObserver {
 public:
  RailObserver(std::weak_ptr<RailedConnection> owner, uint8_t rail,
               uint64_t generation, std::shared_ptr<ConnectionObserver> to)
      : owner_(std::move(owner)),
        rail_(rail),
        generation_(generation),
        to_(std::move(to)) {}

  void OnFrame(ReceivedFrame frame) override {
    if (to_) return to_->OnFrame(std::move(frame));
    // Frames travel on the primary alone: a peer that sends one elsewhere
    // breaks their order.
    if (auto owner = owner_.lock()) {
      std::shared_ptr<Connection> rail;
      {
        std::lock_guard lock(owner->mu_);
        if (owner->rails_[rail_].generation == generation_) {
          rail = owner->rails_[rail_].connection;
        }
      }
      if (rail) {
        rail->Close(Status(StatusCode::kInternal,
                           "protocol error: a frame on rail " +
                               std::to_string(rail_) +
                               ", which carries bulk transfers only"));
      }
    }
  }
  void OnClose(const Status& reason) override {
    if (auto owner = owner_.lock()) {
      owner->OnRailClosed(rail_, generation_, reason);
    }
    if (to_) to_->OnClose(reason);
  }
  bool AdmitHeader(std::span<const std::byte> header) override {
    return to_ ? to_->AdmitHeader(header) : false;
  }

 private:
  const std::weak_ptr<RailedConnection> owner_;
  const uint8_t rail_;
  const uint64_t generation_;
  const std::shared_ptr<ConnectionObserver> to_;  // The primary's only.
};

std::shared_ptr<RailedConnection> RailedConnection::Create(
    std::shared_ptr<Connection> primary, uint8_t primary_rail,
    RailConnector reconnect) {
  return std::make_shared<RailedConnection>(std::move(primary), primary_rail,
                                            std::move(reconnect));
}

RailedConnection::RailedConnection(std::shared_ptr<Connection> primary,
                                   uint8_t primary_rail,
                                   RailConnector reconnect)
    : primary_(std::move(primary)),
      primary_rail_(primary_rail),
      reconnect_(std::move(reconnect)) {
  for (size_t i = 0; i < rails_.size(); ++i) {
    rails_[i].stats.rail = static_cast<uint8_t>(i);
  }
  Rail& rail = rails_[primary_rail_];
  rail.connection = primary_;
  rail.generation = next_generation_++;
  rail.stats.up = true;
  rail.stats.joins = 1;
}

RailedConnection::~RailedConnection() {
  // The primary closes as its owner lets go of it; the others are ours.
  for (size_t i = 0; i < rails_.size(); ++i) {
    if (i != primary_rail_ && rails_[i].connection) {
      rails_[i].connection->Close(Status(
          StatusCode::kCancelled, "its connection of several rails is gone"));
    }
  }
}

bool RailedConnection::AddRail(uint8_t rail, uint16_t epoch,
                               const std::shared_ptr<Connection>& connection) {
  if (rail >= rails_.size() || rail == primary_rail_ || !connection) {
    return false;
  }
  std::shared_ptr<Connection> replaced;
  uint64_t generation;
  {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    Rail& slot = rails_[rail];
    replaced = std::move(slot.connection);
    slot.connection = connection;
    slot.generation = generation = next_generation_++;
    slot.epoch = epoch;
    slot.rejoining = false;
    slot.slices_out = slot.binds_out = 0;
    slot.stats.up = true;
    ++slot.stats.joins;
  }
  if (replaced) {
    replaced->Close(Status(
        StatusCode::kUnavailable,
        "rail " + std::to_string(rail) + " was connected again by its peer"));
  }
  Log().info("{}: rail {} joined (connection {} of it)", primary_->peer(), rail,
             epoch);
  connection->Start(std::make_shared<RailObserver>(weak_from_this(), rail,
                                                   generation, nullptr));
  return true;
}

void RailedConnection::RejoinLater(uint8_t rail) {
  if (rail >= rails_.size() || rail == primary_rail_ || !reconnect_) return;
  std::lock_guard lock(mu_);
  if (!rails_[rail].connection) ScheduleRejoin(rail);
}

size_t RailedConnection::rails_up() const {
  std::lock_guard lock(mu_);
  size_t up = 0;
  for (const Rail& rail : rails_) up += rail.connection ? 1 : 0;
  return up;
}

std::shared_ptr<Connection> RailedConnection::rail(uint8_t rail) const {
  std::lock_guard lock(mu_);
  return rail < rails_.size() ? rails_[rail].connection : nullptr;
}

std::vector<RailStats> RailedConnection::rail_stats() const {
  std::lock_guard lock(mu_);
  std::vector<RailStats> out;
  for (const Rail& rail : rails_) {
    if (rail.stats.joins == 0 && !rail.rejoining) continue;
    out.push_back(rail.stats);
    if (rail.connection) {
      const ConnectionStats& counted = rail.connection->stats();
      out.back().bytes_sent =
          counted.bytes_sent.load(std::memory_order_relaxed);
      out.back().bytes_received =
          counted.bytes_received.load(std::memory_order_relaxed);
    }
  }
  return out;
}

void RailedConnection::Start(std::shared_ptr<ConnectionObserver> observer) {
  primary_->Start(std::make_shared<RailObserver>(
      weak_from_this(), primary_rail_, rails_[primary_rail_].generation,
      std::move(observer)));
}

void RailedConnection::Close(const Status& reason) {
  std::vector<std::shared_ptr<Connection>> rails;
  {
    std::lock_guard lock(mu_);
    closed_ = true;  // No rail's close is a failure now, none rejoins.
    for (const Rail& rail : rails_) {
      if (rail.connection && rail.connection != primary_) {
        rails.push_back(rail.connection);
      }
    }
  }
  // The primary first: its peer then takes the other rails' closes for the
  // session's end, not for failures.
  primary_->Close(reason);
  for (auto& rail : rails) rail->Close(reason);
}

std::shared_ptr<Connection> RailedConnection::TakeDownLocked(
    uint8_t rail, const Status& reason) {
  Rail& slot = rails_[rail];
  std::shared_ptr<Connection> connection = std::move(slot.connection);
  slot.slices_out = slot.binds_out = 0;
  slot.stats.up = false;
  ++slot.stats.failures;
  if (!closed_) {
    Log().warn("{}: rail {} failed ({}); its transfers go on the others",
               primary_->peer(), rail, reason.message());
    if (reconnect_) ScheduleRejoin(rail);
  }
  return connection;
}

void RailedConnection::OnRailClosed(uint8_t rail, uint64_t generation,
                                    const Status& reason) {
  std::vector<std::shared_ptr<Connection>> others;
  {
    std::lock_guard lock(mu_);
    Rail& slot = rails_[rail];
    if (slot.generation != generation || !slot.connection) return;
    if (rail != primary_rail_) {
      TakeDownLocked(rail, reason);
      return;
    }
    closed_ = true;
    for (Rail& other : rails_) {
      if (other.connection && other.connection != primary_) {
        others.push_back(other.connection);
      }
      other.connection.reset();
      other.stats.up = false;
    }
    ++slot.stats.failures;
  }
  for (auto& other : others) other->Close(reason);
}

void RailedConnection::ScheduleRejoin(uint8_t rail) {
  Rail& slot = rails_[rail];
  if (slot.rejoining || closed_) return;
  slot.rejoining = true;
  auto timer = std::make_shared<asio::steady_timer>(primary_->executor(),
                                                    tunables::kRailRejoinDelay);
  timer->async_wait([weak = weak_from_this(), rail,
                     timer](const boost::system::error_code&) {
    auto self = weak.lock();
    if (!self) return;
    uint16_t epoch;
    {
      std::lock_guard lock(self->mu_);
      if (self->closed_) return;
      epoch = static_cast<uint16_t>(self->rails_[rail].epoch + 1);
      self->rails_[rail].epoch = epoch;
    }
    self->reconnect_(
        rail, epoch,
        [weak, rail, epoch](StatusOr<std::shared_ptr<Connection>> connected) {
          auto self = weak.lock();
          if (!self) {
            if (connected.ok()) {
              (*connected)->Close(Status(StatusCode::kCancelled, "gone"));
            }
            return;
          }
          if (connected.ok() && self->AddRail(rail, epoch, *connected)) {
            return;
          }
          if (connected.ok()) {
            (*connected)->Close(Status(StatusCode::kCancelled, "closed"));
          } else {
            Log().debug("{}: rail {} could not rejoin: {}",
                        self->primary_->peer(), rail,
                        connected.status().message());
          }
          std::lock_guard lock(self->mu_);
          self->rails_[rail].rejoining = false;
          if (!self->rails_[rail].connection) self->ScheduleRejoin(rail);
        });
  });
}

StatusOr<BulkDescriptor> RailedConnection::Lend(std::span<std::byte> bytes,
                                                BulkAccess access) {
  struct Up {
    uint8_t rail;
    uint16_t epoch;
    uint64_t generation;
    std::shared_ptr<Connection> connection;
  };
  std::vector<Up> up;
  {
    std::lock_guard lock(mu_);
    if (closed_) return ClosedError(primary_->peer());
    for (size_t i = 0; i < rails_.size(); ++i) {
      if (rails_[i].connection) {
        up.push_back({static_cast<uint8_t>(i), rails_[i].epoch,
                      rails_[i].generation, rails_[i].connection});
      }
    }
  }
  BulkDescriptor out;
  std::vector<BulkDescriptor::RailKey> keys;
  for (const Up& rail : up) {
    // On the primary the bind goes before every later frame; on another
    // rail, frames wait until it is done.
    const bool across = rail.rail != primary_rail_;
    if (across) {
      binds_pending_.fetch_add(1, std::memory_order_acq_rel);
      std::lock_guard lock(mu_);
      OweLocked(rail.rail, rail.generation, /*slice=*/false);
    }
    StatusOr<BulkDescriptor> lent =
        across ? rail.connection->LendAcross(
                     bytes, access,
                     [weak = weak_from_this(), rail = rail.rail,
                      generation = rail.generation] {
                       if (auto self = weak.lock()) {
                         self->BindDone(rail, generation);
                       }
                     })
               : rail.connection->Lend(bytes, access);
    if (across && !lent.ok()) BindDone(rail.rail, rail.generation);
    if (!lent.ok()) {
      for (size_t i = 0; i < keys.size(); ++i) {
        up[i].connection->Revoke(keys[i].key, [] {});
      }
      return Status(lent.status().code(), "rail " + std::to_string(rail.rail) +
                                              ": " + lent.status().message());
    }
    out.address = lent->address;
    out.length = lent->length;
    out.access = lent->access;
    keys.push_back({rail.rail, rail.epoch, lent->rkey, lent->key});
  }
  out.rail_count = static_cast<uint8_t>(keys.size());
  std::copy(keys.begin(), keys.end(), out.rails.begin());
  out.rkey = keys.empty() ? 0 : keys.front().rkey;
  std::lock_guard lock(mu_);
  out.key = next_loan_key_++;
  loans_.emplace(out.key, std::move(keys));
  return out;
}

Status RailedConnection::SendHeld(OutgoingFrame frame) {
  {
    std::lock_guard lock(mu_);
    if (binds_pending_.load(std::memory_order_acquire) > 0 ||
        holding_.load(std::memory_order_acquire)) {
      if (closed_) return ClosedError(primary_->peer());
      if (held_.empty()) held_since_ = std::chrono::steady_clock::now();
      holding_.store(true, std::memory_order_release);
      held_.push_back(std::move(frame));
      return Status();
    }
  }
  return primary_->Send(std::move(frame));
}

void RailedConnection::BindDone(uint8_t rail, uint64_t generation) {
  {
    std::lock_guard lock(mu_);
    PaidLocked(rail, generation, /*slice=*/false, /*ok=*/true);
  }
  if (binds_pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // The last bind is done: the held frames go, in order; frames sent
  // meanwhile join the queue until it is empty.
  for (;;) {
    std::deque<OutgoingFrame> frames;
    {
      std::lock_guard lock(mu_);
      if (held_.empty() || binds_pending_.load(std::memory_order_acquire) > 0) {
        if (held_.empty()) holding_.store(false, std::memory_order_release);
        return;
      }
      frames.swap(held_);
      const auto waited = std::chrono::steady_clock::now() - held_since_;
      if (waited > kLongHold) {
        Log().info("{}: {} frames waited {} ms for window binds on other rails",
                   primary_->peer(), frames.size(),
                   std::chrono::duration_cast<std::chrono::milliseconds>(waited)
                       .count());
      }
    }
    for (OutgoingFrame& frame : frames) {
      Status sent = primary_->Send(std::move(frame));
      if (!sent.ok()) {
        Log().debug("{}: a held frame was not sent: {}", primary_->peer(),
                    sent.message());
      }
    }
  }
}

void RailedConnection::Revoke(uint64_t key, UniqueFunction<void()> revoked) {
  std::vector<std::pair<std::shared_ptr<Connection>, uint64_t>> lent;
  {
    std::lock_guard lock(mu_);
    const auto it = loans_.find(key);
    if (it != loans_.end()) {
      for (const BulkDescriptor::RailKey& rail : it->second) {
        // A rail that failed since ended its loans as it closed.
        const Rail& slot = rails_[rail.rail];
        if (slot.connection && slot.epoch == rail.epoch) {
          lent.emplace_back(slot.connection, rail.key);
        }
      }
      loans_.erase(it);
    }
  }
  auto countdown = std::make_shared<Countdown>(std::move(revoked));
  for (auto& [connection, rail_key] : lent) {
    connection->Revoke(rail_key, [countdown] {});
  }
}

std::optional<BulkDescriptor> RailedConnection::OnRail(
    const BulkDescriptor& loan, uint8_t rail, uint16_t epoch) {
  for (size_t i = 0; i < loan.rail_count && i < loan.rails.size(); ++i) {
    const BulkDescriptor::RailKey& entry = loan.rails[i];
    if (entry.rail != rail || entry.epoch != epoch) continue;
    BulkDescriptor plain = loan;
    plain.key = entry.key;
    plain.rkey = entry.rkey;
    plain.rail_count = 0;
    return plain;
  }
  return std::nullopt;
}

void RailedConnection::Pull(const BulkDescriptor& loan, uint64_t offset,
                            std::span<std::byte> destination,
                            BulkCallback done) {
  auto op = std::make_shared<BulkOp>();
  op->read = true;
  op->loan = loan;
  op->offset = offset;
  op->local = destination.data();
  op->length = destination.size();
  op->done = std::move(done);
  StartBulk(std::move(op));
}

void RailedConnection::Push(std::span<const std::byte> source,
                            const BulkDescriptor& loan, uint64_t offset,
                            BulkCallback done) {
  auto op = std::make_shared<BulkOp>();
  op->read = false;
  op->loan = loan;
  op->offset = offset;
  op->local = const_cast<std::byte*>(source.data());
  op->length = source.size();
  op->done = std::move(done);
  StartBulk(std::move(op));
}

void RailedConnection::StartBulk(std::shared_ptr<BulkOp> op) {
  if (op->loan.rail_count == 0) {
    // A loan of a peer of one connection: the primary's own.
    if (op->read) {
      return primary_->Pull(op->loan, op->offset, {op->local, op->length},
                            std::move(op->done));
    }
    return primary_->Push({op->local, op->length}, op->loan, op->offset,
                          std::move(op->done));
  }
  Status checked =
      CheckBulkRange(op->loan, op->offset, op->length,
                     op->read ? BulkAccess::kRead : BulkAccess::kWrite);
  if (checked.ok() && op->length > 0) {
    // Enough slices to keep every rail's in flight full, in whole chunks,
    // at most kRailSliceSize each.
    const uint64_t rails = std::max<uint64_t>(rails_up(), 1);
    const uint64_t chunk = tunables::kBulkChunkSize;
    const uint64_t even =
        (op->length / (rails * tunables::kRailSlicesInFlight) + chunk - 1) /
        chunk * chunk;
    const uint64_t slice =
        op->length <= tunables::kRailSliceThreshold
            ? op->length
            : std::clamp<uint64_t>(even, chunk, tunables::kRailSliceSize);
    for (uint64_t at = 0; at < op->length; at += slice) {
      op->waiting.push_back({at, std::min(slice, op->length - at), false, {}});
    }
  }
  asio::post(primary_->executor(),
             [self = shared_from_this(), op = std::move(op),
              checked = std::move(checked)] {
               if (!checked.ok()) op->error = checked;
               self->Pump(op);
             });
}

void RailedConnection::Pump(const std::shared_ptr<BulkOp>& op) {
  struct Up {
    uint8_t rail;
    uint64_t generation;
    std::shared_ptr<Connection> connection;
    BulkDescriptor loan;
  };
  std::vector<Up> up;
  {
    std::lock_guard lock(mu_);
    // The primary first: a transfer of one slice goes there.
    for (size_t n = 0; n < rails_.size() && !closed_; ++n) {
      const auto i = static_cast<uint8_t>((primary_rail_ + n) % rails_.size());
      const Rail& slot = rails_[i];
      if (!slot.connection) continue;
      std::optional<BulkDescriptor> loan = OnRail(op->loan, i, slot.epoch);
      if (loan) up.push_back({i, slot.generation, slot.connection, *loan});
    }
  }
  for (Up& rail : up) {
    while (op->error.ok() && !op->waiting.empty() &&
           op->in_flight[rail.rail] < tunables::kRailSlicesInFlight) {
      Slice slice = op->waiting.front();
      op->waiting.pop_front();
      slice.posted = std::chrono::steady_clock::now();
      if (rail.rail != primary_rail_) {
        std::lock_guard lock(mu_);
        OweLocked(rail.rail, rail.generation, /*slice=*/true);
      }
      ++op->in_flight[rail.rail];
      ++op->total_in_flight;
      auto landed = [self = shared_from_this(), op = op, rail = rail.rail,
                     generation = rail.generation,
                     slice](const Status& status) mutable {
        asio::dispatch(
            self->primary_->executor(),
            [self, op = std::move(op), rail, generation, slice, status] {
              self->OnSlice(op, rail, generation, slice, status);
            });
      };
      std::byte* local = op->local + slice.offset;
      if (op->read) {
        rail.connection->Pull(rail.loan, op->offset + slice.offset,
                              {local, slice.length}, std::move(landed));
      } else {
        rail.connection->Push({local, slice.length}, rail.loan,
                              op->offset + slice.offset, std::move(landed));
      }
    }
  }
  if (op->total_in_flight > 0) return;
  if (op->error.ok() && !op->waiting.empty()) {
    op->error =
        Status(StatusCode::kUnavailable,
               "no rail that bulk loan " + std::to_string(op->loan.key) +
                   " was lent on is up to " + primary_->peer());
  }
  Finish(op);
}

void RailedConnection::OnSlice(const std::shared_ptr<BulkOp>& op, uint8_t rail,
                               uint64_t generation, Slice slice,
                               const Status& status) {
  --op->in_flight[rail];
  --op->total_in_flight;
  std::shared_ptr<Connection> failed;
  {
    std::lock_guard lock(mu_);
    Rail& slot = rails_[rail];
    if (rail != primary_rail_) {
      PaidLocked(rail, generation, /*slice=*/true, status.ok());
    }
    if (status.ok()) {
      ++slot.stats.slices;
      slot.stats.bulk_bytes += slice.length;
      slot.stats.slices_resent += slice.resent ? 1 : 0;
    } else if (status.code() == StatusCode::kUnavailable &&
               rail != primary_rail_ && !closed_) {
      // The rail failed under the slice: the others take it, and no slice
      // goes to this connection again.
      slice.resent = true;
      op->waiting.push_front(slice);
      Log().info(
          "{}: rail {} failed a {} slice of {} bytes at {} after {} ms: sent "
          "again on the others",
          primary_->peer(), rail, op->read ? "pull" : "push", slice.length,
          slice.offset,
          std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::steady_clock::now() - slice.posted)
              .count());
      if (slot.generation == generation && slot.connection) {
        failed = TakeDownLocked(rail, status);
      }
    } else if (op->error.ok()) {
      op->error = status;
    }
  }
  if (failed) failed->Close(status);
  Pump(op);
}

void RailedConnection::OweLocked(uint8_t rail, uint64_t generation,
                                 bool slice) {
  Rail& slot = rails_[rail];
  if (!slot.connection || slot.generation != generation) return;
  if (slot.slices_out == 0 && slot.binds_out == 0) {
    // Owing from now: the stall is counted from here.
    slot.progress_at = std::chrono::steady_clock::now();
    slot.progress_seen =
        slot.progress +
        slot.connection->stats().bulk_chunks.load(std::memory_order_relaxed);
  }
  ++(slice ? slot.slices_out : slot.binds_out);
  if (watching_ || closed_) return;
  watching_ = true;
  if (!stall_timer_) {
    stall_timer_ = std::make_shared<asio::steady_timer>(primary_->executor());
  }
  stall_timer_->expires_after(tunables::kRailStallTimeout / 8);
  stall_timer_->async_wait(
      [weak = weak_from_this()](const boost::system::error_code& error) {
        if (auto self = weak.lock(); self && !error) self->OnStallTick();
      });
}

void RailedConnection::PaidLocked(uint8_t rail, uint64_t generation, bool slice,
                                  bool ok) {
  Rail& slot = rails_[rail];
  if (!slot.connection || slot.generation != generation) return;
  uint32_t& owed = slice ? slot.slices_out : slot.binds_out;
  if (owed > 0) --owed;
  if (ok) ++slot.progress;
}

void RailedConnection::OnStallTick() {
  std::vector<std::pair<std::shared_ptr<Connection>, Status>> dead;
  {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    bool owing = false;
    for (size_t i = 0; i < rails_.size() && !closed_; ++i) {
      Rail& slot = rails_[i];
      if (i == primary_rail_ || !slot.connection ||
          (slot.slices_out == 0 && slot.binds_out == 0)) {
        continue;
      }
      const uint64_t progress =
          slot.progress +
          slot.connection->stats().bulk_chunks.load(std::memory_order_relaxed);
      if (progress != slot.progress_seen) {
        slot.progress_seen = progress;
        slot.progress_at = now;
      } else if (now - slot.progress_at >= tunables::kRailStallTimeout) {
        Status stalled(
            StatusCode::kUnavailable,
            fmt::format("no progress for {} ms with {} slices and {} window "
                        "binds outstanding",
                        std::chrono::duration_cast<std::chrono::milliseconds>(
                            now - slot.progress_at)
                            .count(),
                        slot.slices_out, slot.binds_out));
        std::shared_ptr<Connection> connection =
            TakeDownLocked(static_cast<uint8_t>(i), stalled);
        dead.emplace_back(std::move(connection), std::move(stalled));
        continue;
      }
      owing = true;
    }
    watching_ = owing && !closed_;
    if (watching_) {
      stall_timer_->expires_after(tunables::kRailStallTimeout / 8);
      stall_timer_->async_wait(
          [weak = weak_from_this()](const boost::system::error_code& error) {
            if (auto self = weak.lock(); self && !error) self->OnStallTick();
          });
    }
  }
  // Closed at once, its QP first: its slices fail (and go on the others)
  // once nothing more can land.
  for (auto& [connection, why] : dead) connection->Abort(why);
}

void RailedConnection::Finish(const std::shared_ptr<BulkOp>& op) {
  if (!op->done) return;
  BulkCallback done = std::move(op->done);
  done(op->error);
}

}  // namespace rdmarpc::transport::rails
