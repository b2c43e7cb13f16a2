// ServerSession: connection lifetime (ServerOptions::max_connection_age,
// max_connection_idle and max_connection_age_grace, as gRPC's server
// keepalive options). A timer on the connection's loop, created only where
// one of them is set, tells the client GOAWAY when the connection is old
// enough or idle long enough, then closes it once the client has answered
// and its calls have finished, or when the grace period is over. It reads
// what the call path counts anyway (live calls, frames received): a call
// pays nothing for it.
#include <boost/asio/steady_timer.hpp>
#include <optional>
#include <random>
#include <vector>

#include "base/log.h"
#include "rpc/server/server_session.h"

namespace rdmarpc::rpc {

using Clock = std::chrono::steady_clock;

struct ServerSession::Lifetime {
  explicit Lifetime(const boost::asio::any_io_executor& executor)
      : timer(executor) {}
  boost::asio::steady_timer timer;
  std::optional<Clock::time_point> age_deadline;
  // Idle: frames received at the last tick, and since when none came with
  // no call in flight.
  uint64_t frames_seen = 0;
  Clock::time_point quiet_since;
  // After Recycle: why, the client's answer (or when it is taken as given),
  // when the grace ends, and whether the close has begun.
  const char* recycled_for = nullptr;
  bool answered = false;
  Clock::time_point answer_deadline = Clock::time_point::max();
  Clock::time_point grace_deadline = Clock::time_point::max();
  bool closing = false;
};

void ServerSession::LifetimeDeleter::operator()(Lifetime* lifetime) const {
  delete lifetime;
}

namespace {

// Longer is as good as never (and keeps time points from overflowing).
constexpr std::chrono::milliseconds kLongest = std::chrono::hours(24 * 3650);
std::chrono::milliseconds Bounded(std::chrono::milliseconds limit) {
  return std::min(limit, kLongest);
}

// A connection's age limit: within 10 % of `age`, at random.
Clock::duration JitteredAge(std::chrono::milliseconds age) {
  thread_local std::minstd_rand random{std::random_device{}()};
  std::uniform_real_distribution<double> factor(0.9, 1.1);
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::milli>(Bounded(age)) * factor(random));
}

// How often idleness is checked: a quarter of the limit, so a connection
// is recycled within 1.25 times it.
Clock::duration IdleTick(std::chrono::milliseconds idle) {
  return std::max<Clock::duration>(Bounded(idle) / 4,
                                   std::chrono::milliseconds(1));
}

// While a recycled connection's calls finish.
constexpr auto kRecycleTick = std::chrono::milliseconds(20);

}  // namespace

void ServerSession::StartLifetime() {
  lifetime_.reset(new Lifetime(connection_->executor()));
  const Clock::time_point now = Clock::now();
  if (core_->max_connection_age.count() > 0) {
    lifetime_->age_deadline = now + JitteredAge(core_->max_connection_age);
  }
  lifetime_->quiet_since = now;
  ScheduleLifetimeTick();
}

void ServerSession::StopLifetime() { lifetime_->timer.cancel(); }

void ServerSession::ScheduleLifetimeTick() {
  Lifetime& lifetime = *lifetime_;
  const Clock::time_point now = Clock::now();
  Clock::time_point next = Clock::time_point::max();
  if (lifetime.recycled_for != nullptr) {
    next = std::min(now + kRecycleTick, lifetime.grace_deadline);
  } else {
    if (lifetime.age_deadline) next = *lifetime.age_deadline;
    if (core_->max_connection_idle.count() > 0) {
      next = std::min(next, now + IdleTick(core_->max_connection_idle));
    }
  }
  lifetime.timer.expires_at(next);
  lifetime.timer.async_wait(
      [weak = weak_from_this()](const boost::system::error_code& error) {
        if (error) return;  // Cancelled: the connection closed.
        if (auto self = weak.lock()) self->OnLifetimeTick();
      });
}

void ServerSession::OnLifetimeTick() {
  if (closed_.load()) return;
  Lifetime& lifetime = *lifetime_;
  if (lifetime.recycled_for != nullptr) {
    CloseIfRecycled();
    if (!lifetime.closing && !closed_.load()) ScheduleLifetimeTick();
    return;
  }
  const Clock::time_point now = Clock::now();
  if (lifetime.age_deadline && now >= *lifetime.age_deadline) {
    return Recycle("max_connection_age");
  }
  if (core_->max_connection_idle.count() > 0) {
    const uint64_t frames =
        connection_->stats().frames_received.load(std::memory_order_relaxed);
    if (frames != lifetime.frames_seen ||
        tracked_calls_.load(std::memory_order_acquire) > 0) {
      lifetime.frames_seen = frames;
      lifetime.quiet_since = now;
    } else if (now - lifetime.quiet_since >=
               Bounded(core_->max_connection_idle)) {
      return Recycle("max_connection_idle");
    }
  }
  ScheduleLifetimeTick();
}

void ServerSession::Recycle(const char* why) {
  Lifetime& lifetime = *lifetime_;
  lifetime.recycled_for = why;
  const Clock::time_point now = Clock::now();
  if (core_->max_connection_age_grace < kLongest) {
    lifetime.grace_deadline = now + core_->max_connection_age_grace;
  }
  // A client that does not answer is taken to have answered after
  // goaway_answer_timeout, as at shutdown: its later requests are then
  // refused (UNAVAILABLE, not run: it may send them again elsewhere).
  lifetime.answer_deadline = now + core_->goaway_answer_timeout;
  Log().debug("{}: {} reached: GOAWAY", connection_->peer(), why);
  GoAway();
  ScheduleLifetimeTick();
}

void ServerSession::CloseIfRecycled() {
  Lifetime& lifetime = *lifetime_;
  if (lifetime.recycled_for == nullptr || lifetime.closing || closed_.load()) {
    return;
  }
  const Clock::time_point now = Clock::now();
  // The client's GOAWAY: it has sent its last request here. (Its requests
  // arrived before it, so their calls are counted already.)
  if (!lifetime.answered &&
      (goaway_counted_.load() || now >= lifetime.answer_deadline)) {
    lifetime.answered = true;
    recycled_ = Status(StatusCode::kUnavailable,
                       std::string("connection recycled by the server (") +
                           lifetime.recycled_for + "): call again");
    gated_ = true;  // Later requests: OnGatedRequest refuses them.
  }
  const size_t in_flight = tracked_calls_.load(std::memory_order_acquire);
  if (lifetime.answered && in_flight == 0) {
    lifetime.closing = true;
    core_->connections_recycled++;
    return Close(Status(StatusCode::kUnavailable,
                        std::string("connection closed by the server: ") +
                            lifetime.recycled_for));
  }
  if (now >= lifetime.grace_deadline) {
    lifetime.closing = true;
    core_->connections_recycled++;
    const Status over(
        StatusCode::kUnavailable,
        std::string("connection closed by the server: ") +
            lifetime.recycled_for + ", and the call still running after " +
            "max_connection_age_grace (" +
            std::to_string(core_->max_connection_age_grace.count()) + " ms)");
    Log().info(
        "{}: {} reached; {} calls still running after "
        "max_connection_age_grace ({} ms): closing",
        connection_->peer(), lifetime.recycled_for, in_flight,
        core_->max_connection_age_grace.count());
    // Each is answered why (the handler's own Finish then sends nothing),
    // ahead of the close.
    for (const auto& call : CallsInFlight()) call->EndWith(over);
    Close(over);
  }
}

}  // namespace rdmarpc::rpc
