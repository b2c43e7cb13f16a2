// What the raw-verbs baselines (verbs_baseline.cc, verbs_scale.cc) share:
// they use verbs with none of rdmarpc's wrapping, and give up on the first
// failure, since a baseline that half works measures nothing.
#ifndef RDMARPC_TOOLS_BENCHMARKS_VERBS_UTIL_H_
#define RDMARPC_TOOLS_BENCHMARKS_VERBS_UTIL_H_

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

namespace rdmarpc::bench {

// Prints "PROGRAM: WHAT: strerror(errno)" and exits 1.
[[noreturn]] inline void Die(const char* program, const std::string& what) {
  std::fprintf(stderr, "%s: %s: %s\n", program, what.c_str(),
               std::strerror(errno));
  std::exit(1);
}

// A memory region registered with any access (rdmarpc's own RegisterRegion
// refuses remote read, which the READ baseline needs).
struct RawMrDeleter {
  void operator()(ibv_mr* mr) const { ibv_dereg_mr(mr); }
};
using RawMemoryRegion = std::unique_ptr<ibv_mr, RawMrDeleter>;

}  // namespace rdmarpc::bench

#endif  // RDMARPC_TOOLS_BENCHMARKS_VERBS_UTIL_H_
