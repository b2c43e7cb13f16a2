#include "base/process_stats.h"

#include <sys/resource.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace rdmarpc {
namespace {

std::string ProcDir(pid_t pid) {
  return pid == 0 ? "/proc/self" : "/proc/" + std::to_string(pid);
}

}  // namespace

long long ProcessStatusField(pid_t pid, std::string_view field) {
  std::ifstream status(ProcDir(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.size() > field.size() &&
        line.compare(0, field.size(), field) == 0 &&
        line[field.size()] == ':') {
      return std::atoll(line.c_str() + field.size() + 1);
    }
  }
  return -1;
}

long long OpenFileCount(pid_t pid) {
  std::error_code error;
  long long count = 0;
  for (auto it =
           std::filesystem::directory_iterator(ProcDir(pid) + "/fd", error);
       !error && it != std::filesystem::directory_iterator(); ++it) {
    ++count;
  }
  if (error) return -1;
  // Listing our own descriptors opens one more.
  return pid == 0 && count > 0 ? count - 1 : count;
}

CpuTime ProcessCpuTime() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return {seconds(usage.ru_utime), seconds(usage.ru_stime)};
}

}  // namespace rdmarpc
