// Keepalive: how a connection notices that its peer is gone, on either
// transport, whether the connection is idle or busy.
//
// Every `interval`, a connection looks at how many bytes it has received in
// all. If nothing arrived since the last look, it sends PING (a control
// frame), which a live peer answers with PONG; any frame counts as a sign of
// life, so a busy connection sends no PING at all, except the peer's own
// PINGs: they show that the peer is up, not that it hears this side (a link
// that fails one way delivers them still). Once nothing has arrived
// for `timeout`, the peer is taken for dead (a crashed or hung process, a
// host gone, a link down for good): the connection closes with
// DEADLINE_EXCEEDED, its calls fail UNAVAILABLE, and a channel reconnects on
// its next call. Both sides run it, so a server also frees the connections of
// clients that vanished.
//
// Counting bytes costs the data path nothing: the transports count them
// anyway (ConnectionStats::bytes_received), and only the timer reads them.
#ifndef RDMARPC_TRANSPORT_KEEPALIVE_H_
#define RDMARPC_TRANSPORT_KEEPALIVE_H_

#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "base/log.h"
#include "rdmarpc/status.h"
#include "transport/connection.h"

namespace rdmarpc::transport {

// A control frame's kind: on TCP the one byte of a kControl frame's header;
// on RDMA a ControlKind of the same name.
enum class KeepaliveKind : uint8_t { kPing = 1, kPong = 2 };

class KeepaliveClock {
 public:
  enum class Action { kNone, kPing, kDead };

  KeepaliveClock(std::chrono::milliseconds interval,
                 std::chrono::milliseconds timeout)
      : interval_(interval),
        silent_ticks_allowed_(
            interval.count() > 0
                ? static_cast<uint32_t>((timeout + interval - ms1) / interval)
                : 0) {}

  bool enabled() const { return interval_.count() > 0; }
  std::chrono::milliseconds interval() const { return interval_; }

  // A PING of `bytes` arrived: not a sign that the peer hears us.
  void PingReceived(uint64_t bytes) { ping_bytes_ += bytes; }

  // Called every interval with the bytes received so far, PINGs included.
  Action Tick(uint64_t received) {
    received -= ping_bytes_;
    if (received != last_received_) {
      last_received_ = received;
      silent_ticks_ = 0;
      return Action::kNone;
    }
    ++silent_ticks_;
    return silent_ticks_ >= silent_ticks_allowed_ ? Action::kDead
                                                  : Action::kPing;
  }

  // How long nothing but PINGs has arrived, as of the last Tick.
  std::chrono::milliseconds silent_for() const {
    return interval_ * silent_ticks_;
  }

  // Why the connection to `peer` closes.
  Status DeadPeer(const std::string& peer) const {
    return Status(StatusCode::kDeadlineExceeded,
                  "keepalive: nothing received from " + peer + " for " +
                      std::to_string(silent_for().count()) +
                      " ms; the peer is taken for dead");
  }

 private:
  static constexpr std::chrono::milliseconds ms1{1};
  const std::chrono::milliseconds interval_;
  const uint32_t silent_ticks_allowed_;
  uint64_t last_received_ = 0;
  uint64_t ping_bytes_ = 0;
  uint32_t silent_ticks_ = 0;
};

// Runs `clock` for one connection, on the connection's own loop: waits an
// interval on `timer`, then, unless the wait was cancelled or `closed()`,
// ticks. A PING is counted in `stats`, logged at debug, sent by `ping()`,
// and the timer re-armed; a dead peer is counted, logged at warn and handed
// to `close(status)`. `owner` (the connection) lives as long as the wait.
template <typename Closed, typename Ping, typename Close>
void ArmKeepalive(boost::asio::steady_timer& timer, KeepaliveClock& clock,
                  ConnectionStats& stats, const std::string& peer,
                  std::shared_ptr<void> owner, Closed closed, Ping ping,
                  Close close) {
  if (!clock.enabled() || closed()) return;
  timer.expires_after(clock.interval());
  timer.async_wait([&timer, &clock, &stats, &peer, owner = std::move(owner),
                    closed, ping,
                    close](const boost::system::error_code& error) mutable {
    if (error || closed()) return;
    switch (clock.Tick(stats.bytes_received.load(std::memory_order_relaxed))) {
      case KeepaliveClock::Action::kNone:
        break;
      case KeepaliveClock::Action::kPing:
        Bump(stats.keepalive_pings);
        Log().debug("{}: nothing received for {} ms: keepalive PING", peer,
                    clock.silent_for().count());
        ping();
        break;
      case KeepaliveClock::Action::kDead: {
        const Status dead = clock.DeadPeer(peer);
        Bump(stats.keepalive_timeouts);
        Log().warn("{}: closing: {}", peer, dead.message());
        return close(dead);
      }
    }
    ArmKeepalive(timer, clock, stats, peer, std::move(owner), closed, ping,
                 close);
  });
}

}  // namespace rdmarpc::transport

#endif  // RDMARPC_TRANSPORT_KEEPALIVE_H_
