// Per-call options: deadline (or timeout) and limits.
#ifndef RDMARPC_RPC_CALL_OPTIONS_H_
#define RDMARPC_RPC_CALL_OPTIONS_H_

#include <chrono>
#include <optional>

namespace rdmarpc::rpc {

using Clock = std::chrono::steady_clock;

struct CallOptions {
  // When the caller stops waiting: the call completes with DEADLINE_EXCEEDED
  // and the server sees the call cancelled. None by default.
  std::optional<Clock::time_point> deadline;

  static CallOptions WithTimeout(Clock::duration timeout) {
    return CallOptions{Clock::now() + timeout};
  }
  static CallOptions WithDeadline(Clock::time_point deadline) {
    return CallOptions{deadline};
  }
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_CALL_OPTIONS_H_
