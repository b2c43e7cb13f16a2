// Pins the calling thread to one CPU. The benchmarks put the client side on
// CPU 0 and the server side on CPU 1, as two hosts would be: left to the
// scheduler, the two sides share a CPU in some runs and not in others, and
// a latency ratio follows where they land.
#ifndef RDMARPC_TOOLS_BENCHMARKS_PIN_H_
#define RDMARPC_TOOLS_BENCHMARKS_PIN_H_

#include <pthread.h>
#include <sched.h>

namespace rdmarpc::bench {

inline void PinThisThreadTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

}  // namespace rdmarpc::bench

#endif  // RDMARPC_TOOLS_BENCHMARKS_PIN_H_
