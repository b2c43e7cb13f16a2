// RailedConnection (transport/rails/railed_connection.h): bulk pulls and
// pushes sliced over the rails, a failed rail's slices sent again on the
// others, and the stall watch that takes a rail making no progress for dead.
#include <algorithm>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <utility>

#include "base/log.h"
#include "transport/bulk.h"
#include "transport/rails/railed_connection.h"

namespace rdmarpc::transport::rails {

namespace asio = boost::asio;

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
  ArmStallWatchLocked();
}

void RailedConnection::ArmStallWatchLocked() {
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
    if (watching_) ArmStallWatchLocked();
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
