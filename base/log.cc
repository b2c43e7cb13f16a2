#include "base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <memory>

namespace rdmarpc {
namespace {

std::shared_ptr<spdlog::logger> MakeLogger() {
  // A program that registered its own "rdmarpc" logger keeps it.
  auto logger = spdlog::get("rdmarpc");
  if (!logger) logger = spdlog::stderr_color_mt("rdmarpc");
  const char* level = std::getenv("RDMARPC_LOG");
  logger->set_level(level != nullptr ? spdlog::level::from_str(level)
                                     : spdlog::level::info);
  return logger;
}

}  // namespace

spdlog::logger& Log() {
  static const std::shared_ptr<spdlog::logger> logger = MakeLogger();
  return *logger;
}

}  // namespace rdmarpc
