// The rdmarpc logger: one spdlog logger named "rdmarpc".
//
// Its level comes from the environment variable RDMARPC_LOG (trace, debug,
// info, warn, error, critical, off; default info), read once at first use.
// Connection lifecycle logs at info; per-call logs at debug only.
#ifndef RDMARPC_BASE_LOG_H_
#define RDMARPC_BASE_LOG_H_

#include <spdlog/spdlog.h>

namespace rdmarpc {

namespace log_internal {
spdlog::logger* MakeLogger();
}  // namespace log_internal

// Inline: every call's path checks the level (should_log), and a call costs
// about 11 ns in the emulated RDMA test VM. The set-up stays out of line.
inline spdlog::logger& Log() {
  static spdlog::logger* const logger = log_internal::MakeLogger();
  return *logger;
}

}  // namespace rdmarpc

#endif  // RDMARPC_BASE_LOG_H_
