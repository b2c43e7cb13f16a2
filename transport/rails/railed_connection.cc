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

  void OnFrame(ReceivedFrame&& frame) override {
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

Status RailedConnection::SendHeld(OutgoingFrame&& frame) {
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

}  // namespace rdmarpc::transport::rails
