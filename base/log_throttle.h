// What a hostile peer can make the log say, bounded: at most one line per
// kind of event and peer host every kLogThrottleInterval, the next one
// saying how many were held back. For events a peer causes at will (a
// refused call, a protocol error, a PING flood, a slow frame), so that an
// attack from one host is one line per interval, not one per frame or
// connection.
//
//   if (const auto held = ThrottleLog("too many pings", peer)) {
//     Log().warn("{}: closing: {}{}", peer, why, HeldBack(*held));
//   }
#ifndef RDMARPC_BASE_LOG_THROTTLE_H_
#define RDMARPC_BASE_LOG_THROTTLE_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rdmarpc {

inline constexpr std::chrono::seconds kLogThrottleInterval{10};

// "tcp://10.0.0.2:41000" -> "tcp://10.0.0.2".
std::string PeerHost(std::string_view peer);

// Whether a line about `kind` from `peer`'s host may be logged now: the
// number of lines held back since the last one, or nullopt to hold this one
// back too.
std::optional<uint64_t> ThrottleLog(std::string_view kind,
                                    std::string_view peer);

// " (N more from this host held back)", or nothing for 0.
std::string HeldBack(uint64_t held);

// For tests that count lines: forgets what was logged, so the next line of
// each kind and host is logged.
void ForgetThrottledLogs();

}  // namespace rdmarpc

#endif  // RDMARPC_BASE_LOG_THROTTLE_H_
