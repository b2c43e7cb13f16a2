// A benchmark's --poll flag, as the benchmarks spell it.
#ifndef RDMARPC_TOOLS_BENCHMARKS_POLL_FLAG_H_
#define RDMARPC_TOOLS_BENCHMARKS_POLL_FLAG_H_

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "transport/connection.h"

namespace rdmarpc::bench {

// "event", "busy" or "hybrid"; anything else ends the program with usage
// status 64, in a message that names `tool`.
inline transport::PollMode PollModeOrExit(const std::string& poll,
                                          const char* tool) {
  const std::optional<transport::PollMode> mode =
      transport::PollModeFromName(poll);
  if (!mode) {
    std::fprintf(stderr, "%s: --poll event|busy|hybrid, not '%s'\n", tool,
                 poll.c_str());
    std::exit(64);
  }
  return *mode;
}

}  // namespace rdmarpc::bench

#endif  // RDMARPC_TOOLS_BENCHMARKS_POLL_FLAG_H_
