// Runs a fuzz target over its seed corpus without libFuzzer: every file
// named on the command line, or in a directory named there, is one input.
// The same targets link against libFuzzer in tools/fuzz (clang); this
// driver lets the ordinary test suites (and the sanitizer builds) replay
// the corpus on every run, so a fixed crash stays fixed.
//
// Signals interrupt the replay as libFuzzer's timer interrupts the fuzzer
// (-timeout sends SIGALRM every few seconds): here every millisecond, with
// a handler that does nothing and without SA_RESTART, so each blocking call
// a target makes on its thread must cope with EINTR.
#include <signal.h>
#include <sys/time.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool Replay(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", file.c_str());
    return false;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                         bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  struct sigaction action {};
  action.sa_handler = [](int) {};
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // No SA_RESTART.
  sigaction(SIGALRM, &action, nullptr);
  const itimerval every_ms{{0, 1000}, {0, 1000}};
  setitimer(ITIMER_REAL, &every_ms, nullptr);

  int inputs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (!entry.is_regular_file()) continue;
        if (!Replay(entry.path())) return 1;
        ++inputs;
      }
    } else {
      if (!Replay(arg)) return 1;
      ++inputs;
    }
  }
  // An empty corpus would prove nothing.
  if (inputs == 0) {
    std::fprintf(stderr, "no inputs\n");
    return 1;
  }
  const itimerval off{};
  setitimer(ITIMER_REAL, &off, nullptr);
  std::printf("replayed %d inputs\n", inputs);
  return 0;
}
