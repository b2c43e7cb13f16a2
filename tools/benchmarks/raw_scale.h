// Raw verbs beside the scale benchmark (scale.cc): verbs_scale, the binary
// beside this one, run at the same N and load, and what it reported.
#ifndef RDMARPC_TOOLS_BENCHMARKS_RAW_SCALE_H_
#define RDMARPC_TOOLS_BENCHMARKS_RAW_SCALE_H_

#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>

#include "tools/benchmarks/spawn.h"

namespace rdmarpc::bench {

struct RawScale {
  double calls_per_s = 0;
  double cpu_us_per_call = 0;  // The raw server's.
};

// verbs_scale (tools/benchmarks/verbs_scale.cc) on `host` with
// `connections` QPs from `processes` clients, `outstanding` messages in
// all, for `seconds`; nullopt (said on stderr) when it failed.
inline std::optional<RawScale> MeasureRawScale(const std::string& host,
                                               int connections, int processes,
                                               int outstanding,
                                               const std::string& seconds) {
  std::string self(4096, '\0');
  const ssize_t length = readlink("/proc/self/exe", self.data(), self.size());
  if (length <= 0) return std::nullopt;
  self.resize(static_cast<size_t>(length));
  const std::string path = self.substr(0, self.rfind('/') + 1) + "verbs_scale";
  ChildProcess raw =
      Spawn(path, {"verbs_scale", "--ip", host, "--connections",
                   std::to_string(connections), "--processes",
                   std::to_string(processes), "--outstanding",
                   std::to_string(outstanding), "--seconds", seconds});
  // "raw verbs scale: N QPs (...): X calls/s, server CPU Y us per call"
  const std::string line = ReadLine(raw.out);
  raw.Reap();
  RawScale result;
  const size_t colon = line.find("): ");
  if (line.rfind("raw verbs scale:", 0) != 0 || colon == std::string::npos ||
      std::sscanf(line.c_str() + colon + 3,
                  "%lf calls/s, server CPU %lf us per call",
                  &result.calls_per_s, &result.cpu_us_per_call) != 2) {
    std::fprintf(stderr, "scale: raw verbs at %d connections said '%s'\n",
                 connections, line.c_str());
    return std::nullopt;
  }
  return result;
}

}  // namespace rdmarpc::bench

#endif  // RDMARPC_TOOLS_BENCHMARKS_RAW_SCALE_H_
