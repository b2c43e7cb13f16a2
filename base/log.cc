#include "base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <memory>

namespace rdmarpc::log_internal {

// Out of line: Log() runs on every call's path (for its level check), and
// this setup inlined there gave every call a heavy prologue.
[[gnu::noinline]] spdlog::logger* MakeLogger() {
  // A program that registered its own "rdmarpc" logger keeps it.
  static std::shared_ptr<spdlog::logger> logger = spdlog::get("rdmarpc");
  if (!logger) logger = spdlog::stderr_color_mt("rdmarpc");
  const char* level = std::getenv("RDMARPC_LOG");
  logger->set_level(level != nullptr ? spdlog::level::from_str(level)
                                     : spdlog::level::info);
  return logger.get();
}

}  // namespace rdmarpc::log_internal
