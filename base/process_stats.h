// What the kernel says about a process (/proc/PID): for the tests, benchmarks
// and the soak that count what rdmarpc holds (threads, descriptors, pinned
// memory).
#ifndef RDMARPC_BASE_PROCESS_STATS_H_
#define RDMARPC_BASE_PROCESS_STATS_H_

#include <sys/types.h>

#include <string_view>

namespace rdmarpc {

// The leading number of a field of /proc/PID/status ("VmPin", "VmRSS" and
// other sizes in KiB; "Threads"), or -1 when there is none. pid 0 is this
// process.
long long ProcessStatusField(pid_t pid, std::string_view field);

// The process's open file descriptors (pid 0: this process, not counting the
// one used to count them), or -1 when they cannot be listed.
long long OpenFileCount(pid_t pid);

// This process's CPU time in seconds so far (getrusage): user, and system,
// where the kernel's work for it is counted (under Soft-RoCE, the emulated
// device's too).
struct CpuTime {
  double user = 0, system = 0;
  double total() const { return user + system; }
};
CpuTime ProcessCpuTime();

}  // namespace rdmarpc

#endif  // RDMARPC_BASE_PROCESS_STATS_H_
