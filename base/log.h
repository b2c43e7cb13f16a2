// The rdmarpc logger: one spdlog logger named "rdmarpc".
//
// Its level comes from the environment variable RDMARPC_LOG (trace, debug,
// info, warn, error, critical, off; default info), read once at first use.
// Connection lifecycle logs at info; per-call logs at debug only.
#ifndef RDMARPC_BASE_LOG_H_
#define RDMARPC_BASE_LOG_H_

#include <spdlog/spdlog.h>

namespace rdmarpc {

spdlog::logger& Log();

}  // namespace rdmarpc

#endif  // RDMARPC_BASE_LOG_H_
