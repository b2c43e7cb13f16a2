// Subchannel: calls ended by the client whose lent windows wait for the
// server's answer before they are invalidated (rpc/client/bulk_loans.h).
#include <boost/asio/steady_timer.hpp>

#include "base/log.h"
#include "rpc/client/subchannel.h"

namespace rdmarpc::rpc {

namespace asio = boost::asio;
using transport::Connection;

void Subchannel::AwaitReleaseLocked(
    uint64_t id, BulkLoans& loans,
    const std::shared_ptr<Connection>& connection) {
  if (!loans.AwaitRelease(connection.get())) return;
  auto grace = std::make_unique<asio::steady_timer>(
      context_, tunables::kBulkReleaseGrace);
  grace->async_wait(
      [weak = weak_from_this(), id](const boost::system::error_code& error) {
        if (error) return;  // The server answered.
        auto self = weak.lock();
        if (!self) return;
        std::shared_ptr<BulkLoans> loans;
        {
          std::lock_guard lock(self->mu_);
          loans = self->TakeAwaitingLocked(id, /*timed_out=*/true);
        }
        if (loans) {
          Log().warn(
              "{}: call {}: the server did not release its loans within "
              "{} ms; invalidating them",
              self->target_, id, tunables::kBulkReleaseGrace.count());
          loans->Released();
        }
      });
  awaiting_release_.insert_or_assign(
      id, AwaitingRelease{loans.shared_from_this(), std::move(grace)});
}

std::shared_ptr<BulkLoans> Subchannel::TakeAwaitingLocked(uint64_t id,
                                                          bool timed_out) {
  const auto it = awaiting_release_.find(id);
  if (it == awaiting_release_.end()) return nullptr;
  std::shared_ptr<BulkLoans> loans = std::move(it->second.loans);
  if (!timed_out) it->second.grace->cancel();
  awaiting_release_.erase(it);
  ++(timed_out ? stats_.bulk_releases_timed_out : stats_.bulk_releases);
  return loans;
}

std::vector<std::shared_ptr<BulkLoans>> Subchannel::TakeAllAwaitingLocked() {
  std::vector<std::shared_ptr<BulkLoans>> all;
  for (auto& [id, awaiting] : awaiting_release_) {
    awaiting.grace->cancel();
    all.push_back(std::move(awaiting.loans));
  }
  awaiting_release_.clear();
  return all;
}

}  // namespace rdmarpc::rpc
