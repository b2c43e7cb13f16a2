// The echo benchmark: raw verbs baselines, run by verbs_baseline.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tools/benchmarks/bench.h"

namespace rdmarpc::bench {

// Runs verbs_baseline (next to this binary) and returns its first number
// after `key` ("p50 " or "outstanding: "), or NaN.
double RawVerbs(const std::string& self, const std::string& ip,
                const std::string& mode, size_t size, int iters,
                const std::string& key) {
  const std::string dir = self.substr(0, self.rfind('/') + 1);
  const std::string command = dir + "verbs_baseline --ip " + ip + " --mode " +
                              mode + " --size " + std::to_string(size) +
                              " --iters " + std::to_string(iters) + " --pin " +
                              (pin_sides ? "1" : "0") + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return NAN;
  std::string output;
  char line[512];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) output += line;
  if (pclose(pipe) != 0) {
    std::fprintf(stderr, "bench: raw verbs baseline failed: %s",
                 output.c_str());
    return NAN;
  }
  const size_t at = output.find(key);
  return at == std::string::npos
             ? NAN
             : std::strtod(output.c_str() + at + key.size(), nullptr);
}

}  // namespace rdmarpc::bench
