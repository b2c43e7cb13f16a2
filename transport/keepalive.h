// Keepalive: how a connection notices that its peer is gone, on either
// transport, whether the connection is idle or busy.
//
// Every `interval`, a connection looks at how many bytes it has received in
// all. If nothing arrived since the last look, it sends PING (a control
// frame), which a live peer answers with PONG; any frame counts as a sign of
// life, so a busy connection sends no PING at all, except the peer's own
// PINGs: they show that the peer is up, not that it hears this side (a link
// that fails one way delivers them still). Over RDMA a READ or WRITE of
// this side's that completes counts too: the peer's NIC answered it, and a
// rail that carries only this side's one-sided transfers receives no frame
// at all. Once nothing has arrived
// for `timeout`, the peer is taken for dead (a crashed or hung process, a
// host gone, a link down for good): the connection closes with
// DEADLINE_EXCEEDED, its calls fail UNAVAILABLE, and a channel reconnects on
// its next call. Both sides run it, so a server also frees the connections of
// clients that vanished.
//
// Counting bytes costs the data path nothing: the transports count them
// anyway (ConnectionStats::bytes_received), and only the timer reads them.
//
// A peer's PINGs cost this side nothing it has to keep: a PONG is owed only
// when none is already on its way (a peer that pings and never reads gets
// one PONG queued, not one per PING), and a peer that pings more often than
// TransportOptions::min_ping_interval, more than kMaxPingStrikes times in a
// row, is told TOO_MANY_PINGS and disconnected.
#ifndef RDMARPC_TRANSPORT_KEEPALIVE_H_
#define RDMARPC_TRANSPORT_KEEPALIVE_H_

#include <array>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "base/log.h"
#include "base/log_throttle.h"
#include "rdmarpc/status.h"
#include "rdmarpc/tunables.h"
#include "transport/connection.h"

namespace rdmarpc::transport {

// A control frame's kind: on TCP the one byte of a kControl frame's header;
// on RDMA a ControlKind of the same name.
// TCP's control frames are keepalive's, one byte of header, and so are these
// two of version 6: kTooManyPings, the last frame before this side closes the
// connection of a peer that pinged too often; kHello, each side's first
// frame (transport/tcp/tcp_connection.h).
enum class KeepaliveKind : uint8_t {
  kPing = 1,
  kPong = 2,
  kTooManyPings = 3,
  kHello = 4,
};

// A TCP control frame: its prefix and the one byte of its kind.
inline constexpr size_t kTcpControlFrameSize = tunables::kFramePrefixSize + 1;
inline std::array<std::byte, kTcpControlFrameSize> TcpControlFrame(
    KeepaliveKind kind) {
  const EncodedPrefix prefix = EncodeFramePrefix(
      {.type = FrameType::kControl, .header_size = 1, .payload_size = 0});
  std::array<std::byte, kTcpControlFrameSize> frame;
  std::memcpy(frame.data(), prefix.data(), prefix.size());
  frame.back() = std::byte{static_cast<uint8_t>(kind)};
  return frame;
}

// What a TCP peer's first bytes (`first`: a HELLO's worth, or fewer where
// its stream ended) are: OK for a HELLO of this version; UNIMPLEMENTED,
// naming both versions, for a frame of another; INVALID_ARGUMENT for
// anything else. Both sides check the other's HELLO with it.
inline Status CheckHello(std::span<const std::byte> first) {
  if (first.size() >= tunables::kFramePrefixSize) {
    DecodedPrefix decoded =
        DecodeFramePrefix(first.first(tunables::kFramePrefixSize),
                          tunables::kMaxPayloadSizeLimit);
    if (decoded.verdict == PrefixVerdict::kOtherVersion) {
      return Status(StatusCode::kUnimplemented, decoded.error.message());
    }
  }
  const auto hello = TcpControlFrame(KeepaliveKind::kHello);
  if (first.size() == hello.size() &&
      std::memcmp(first.data(), hello.data(), hello.size()) == 0) {
    return Status();
  }
  return Status(StatusCode::kInvalidArgument, "not a HELLO");
}

class KeepaliveClock {
 public:
  // kSlowFrame: a frame begun has not arrived whole within frame_timeout.
  enum class Action { kNone, kPing, kDead, kSlowFrame };

  KeepaliveClock(std::chrono::milliseconds interval,
                 std::chrono::milliseconds timeout,
                 std::chrono::milliseconds min_ping_interval = {},
                 std::chrono::milliseconds frame_timeout = {})
      : interval_(interval),
        min_ping_interval_(min_ping_interval),
        frame_timeout_(frame_timeout),
        silent_ticks_allowed_(
            interval.count() > 0
                ? static_cast<uint32_t>((timeout + interval - ms1) / interval)
                : 0) {}

  bool enabled() const { return interval_.count() > 0; }
  std::chrono::milliseconds interval() const { return interval_; }

  // A PING of `bytes` arrived at `now`: not a sign that the peer hears us.
  // False once the peer pings too often: more than kMaxPingStrikes PINGs in
  // a row, each within min_ping_interval of the one before.
  bool PingReceived(uint64_t bytes, std::chrono::steady_clock::time_point now) {
    ping_bytes_ += bytes;
    const bool strike = now - last_ping_ < min_ping_interval_;
    last_ping_ = now;
    ping_strikes_ = strike ? ping_strikes_ + 1 : 0;
    return ping_strikes_ <= tunables::kMaxPingStrikes;
  }

  // Why the connection to a peer that pinged too often closes, on this side.
  Status TooManyPings(const std::string& peer) const {
    return Status(StatusCode::kResourceExhausted,
                  "keepalive: " + peer + " sent " +
                      std::to_string(ping_strikes_) +
                      " PINGs in a row less than " +
                      std::to_string(min_ping_interval_.count()) +
                      " ms apart (min_ping_interval): too many pings");
  }
  // And on the peer's, told TOO_MANY_PINGS by `peer`: its calls fail
  // UNAVAILABLE, and its keepalive_interval is too short for that server.
  static Status ToldTooManyPings(const std::string& peer) {
    return Status(StatusCode::kUnavailable,
                  peer +
                      " closed the connection: too many pings (this side's "
                      "keepalive_interval is below the peer's "
                      "min_ping_interval)");
  }

  // Called every interval with the bytes received so far, PINGs included,
  // and the frame in progress (part of it has arrived), named by a number
  // the transport gives it, if any: the same frame found in progress at
  // ticks frame_timeout apart is too slow, whatever bytes of it trickle in.
  Action Tick(uint64_t received, std::optional<uint64_t> frame = {}) {
    if (!frame || !slow_seen_ || *frame != slow_frame_) {
      slow_seen_ = frame.has_value();
      slow_frame_ = frame.value_or(0);
      slow_ticks_ = 0;
    } else if (frame_timeout_.count() > 0 &&
               interval_ * ++slow_ticks_ >= frame_timeout_) {
      return Action::kSlowFrame;
    }
    received -= ping_bytes_;
    if (received != last_received_ || std::exchange(touched_, false)) {
      last_received_ = received;
      silent_ticks_ = 0;
      return Action::kNone;
    }
    ++silent_ticks_;
    return silent_ticks_ >= silent_ticks_allowed_ ? Action::kDead
                                                  : Action::kPing;
  }

  // A sign of life other than bytes received: the peer read what was sent
  // to it while this side did not read (flow control). Counts as activity
  // at the next Tick.
  void Touch() { touched_ = true; }

  // How long nothing but PINGs has arrived, as of the last Tick.
  std::chrono::milliseconds silent_for() const {
    return interval_ * silent_ticks_;
  }

  // Why the connection to a peer that sent a frame too slowly closes.
  Status SlowFrame(const std::string& peer) const {
    return Status(StatusCode::kDeadlineExceeded,
                  "a frame from " + peer + " did not arrive whole within " +
                      std::to_string(frame_timeout_.count()) +
                      " ms (frame_timeout)");
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
  const std::chrono::milliseconds min_ping_interval_;
  const std::chrono::milliseconds frame_timeout_;
  // The frame in progress at the last tick (if slow_seen_), and at this many
  // ticks since.
  bool slow_seen_ = false;
  uint64_t slow_frame_ = 0;
  uint32_t slow_ticks_ = 0;
  const uint32_t silent_ticks_allowed_;
  uint64_t last_received_ = 0;
  uint64_t ping_bytes_ = 0;
  uint32_t silent_ticks_ = 0;
  bool touched_ = false;
  uint32_t ping_strikes_ = 0;
  std::chrono::steady_clock::time_point last_ping_{};
};

// Runs `clock` for one connection, on the connection's own loop: waits an
// interval on `timer`, then, unless the wait was cancelled or `closed()`,
// ticks. A PING is counted in `stats`, logged at debug, sent by `ping()`,
// and the timer re-armed; a dead peer is counted, logged at warn and handed
// to `close(status)`. `owner` (the connection) lives as long as the wait.
template <typename Closed, typename MidFrame, typename Ping, typename Close>
void ArmKeepalive(boost::asio::steady_timer& timer, KeepaliveClock& clock,
                  ConnectionStats& stats, const std::string& peer,
                  std::shared_ptr<void> owner, Closed closed,
                  MidFrame mid_frame, Ping ping, Close close) {
  if (!clock.enabled() || closed()) return;
  timer.expires_after(clock.interval());
  timer.async_wait([&timer, &clock, &stats, &peer, owner = std::move(owner),
                    closed, mid_frame, ping,
                    close](const boost::system::error_code& error) mutable {
    if (error || closed()) return;
    switch (clock.Tick(stats.bytes_received.load(std::memory_order_relaxed),
                       mid_frame())) {
      case KeepaliveClock::Action::kNone:
        break;
      case KeepaliveClock::Action::kSlowFrame: {
        const Status slow = clock.SlowFrame(peer);
        Bump(stats.slow_frames);
        if (const auto held = ThrottleLog("slow frame", peer)) {
          Log().warn("{}: closing: {}{}", peer, slow.message(),
                     HeldBack(*held));
        }
        return close(slow);
      }
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
    ArmKeepalive(timer, clock, stats, peer, std::move(owner), closed, mid_frame,
                 ping, close);
  });
}

}  // namespace rdmarpc::transport

#endif  // RDMARPC_TRANSPORT_KEEPALIVE_H_
