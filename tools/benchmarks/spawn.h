// A child process whose stdin and stdout are pipes to the parent: this
// benchmark binary again (the client processes of the scale benchmarks), or
// another one (a peer's echo).
#ifndef RDMARPC_TOOLS_BENCHMARKS_SPAWN_H_
#define RDMARPC_TOOLS_BENCHMARKS_SPAWN_H_

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace rdmarpc::bench {

struct ChildProcess {
  pid_t pid = 0;
  FILE* in = nullptr;   // Its stdin.
  FILE* out = nullptr;  // Its stdout.

  // Closes both pipes and waits for it to exit.
  void Reap() {
    if (in != nullptr) std::fclose(in);
    if (out != nullptr) std::fclose(out);
    in = out = nullptr;
    if (pid > 0) waitpid(pid, nullptr, 0);
    pid = 0;
  }
};

// Runs the program at `path` with `args` (args[0] included).
inline ChildProcess Spawn(const std::string& path,
                          const std::vector<std::string>& args) {
  // Close-on-exec: a child spawned later must not inherit this one's pipes
  // (it would hold this one's stdin open after the parent closes it).
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) {
    std::abort();
  }
  // Built before fork: the child may only exec (the parent has threads).
  std::vector<char*> argv;
  for (const std::string& arg : args) {
    argv.push_back(const_cast<char*>(arg.c_str()));
  }
  argv.push_back(nullptr);
  ChildProcess child;
  child.pid = fork();
  if (child.pid == 0) {
    dup2(to_child[0], STDIN_FILENO);
    dup2(from_child[1], STDOUT_FILENO);
    close(to_child[1]);
    close(from_child[0]);
    execv(path.c_str(), argv.data());
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  child.in = fdopen(to_child[1], "w");
  child.out = fdopen(from_child[0], "r");
  return child;
}

// One line a child said (without its newline); empty at end of file.
inline std::string ReadLine(FILE* in) {
  std::string line;
  for (int c; (c = std::fgetc(in)) != EOF && c != '\n';) line += char(c);
  return line;
}

// Runs /proc/self/exe with `args` (args[0] included).
inline ChildProcess SpawnSelf(const std::vector<std::string>& args) {
  return Spawn("/proc/self/exe", args);
}

}  // namespace rdmarpc::bench

#endif  // RDMARPC_TOOLS_BENCHMARKS_SPAWN_H_
