// A timeline of the steps of a call, for finding where a round trip's time
// goes where callgrind cannot tell (it counts instructions, not the cost of
// each under emulation or in the kernel).
//
// Off by default: RDMARPC_TRACE(...) compiles to nothing unless the build
// defines RDMARPC_LATENCY_TRACE (tools/bench-trace does). When on, each mark
// takes a clock reading, and the process keeps marks number kTraceSkip to
// kTraceSkip + kTraceMarks: past connection setup and the first calls.
// Once that window is full it is written to RDMARPC_TRACE_FILE followed by
// "." and the program's name, one mark per line: nanoseconds since the
// window's first mark, side (0 client, 1 server) and step.
// tools/benchmarks/trace_segments.py turns that into the median time of each
// phase of a round trip and of each step to the next.
#ifndef RDMARPC_BASE_LATENCY_TRACE_H_
#define RDMARPC_BASE_LATENCY_TRACE_H_

#ifdef RDMARPC_LATENCY_TRACE

#include <atomic>
#include <cerrno>  // program_invocation_short_name (GNU)
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace rdmarpc::trace {

inline constexpr uint64_t kTraceSkip = 4000;
inline constexpr uint64_t kTraceMarks = 12000;

struct Mark {
  int64_t ns;
  int side;
  const char* step;
};

inline Mark marks[kTraceMarks];
inline std::atomic<uint64_t> next_mark{0};

inline void Write() {
  const char* prefix = std::getenv("RDMARPC_TRACE_FILE");
  if (prefix == nullptr) return;
  // A benchmark and the baseline it runs share the variable.
  const std::string path =
      std::string(prefix) + "." + program_invocation_short_name;
  FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr) return;
  for (const Mark& m : marks) {
    if (m.step == nullptr) continue;  // Taken by a thread still writing it.
    std::fprintf(out, "%lld %d %s\n",
                 static_cast<long long>(m.ns - marks[0].ns), m.side, m.step);
  }
  std::fclose(out);
}

// `step` must be a string literal: only the pointer is kept.
inline void Record(int side, const char* step) {
  const uint64_t i = next_mark.fetch_add(1, std::memory_order_relaxed);
  if (i < kTraceSkip || i >= kTraceSkip + kTraceMarks) return;
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  marks[i - kTraceSkip] = {
      std::chrono::duration_cast<std::chrono::nanoseconds>(now).count(), side,
      step};
  // The window's last mark writes it. A mark another thread took just before
  // may not be filled in yet; Write skips it.
  if (i == kTraceSkip + kTraceMarks - 1) Write();
}

}  // namespace rdmarpc::trace

#define RDMARPC_TRACE(side, step) ::rdmarpc::trace::Record((side), (step))

#else

#define RDMARPC_TRACE(side, step) \
  do {                            \
  } while (false)

#endif  // RDMARPC_LATENCY_TRACE

#endif  // RDMARPC_BASE_LATENCY_TRACE_H_
