// A server as deployments run it: a user without CAP_IPC_LOCK, under
// Debian's default locked-memory limit (RLIMIT_MEMLOCK, 8 MiB), which is all
// the memory it may register (pin) for RDMA. Its connections share their
// receive and send pools (transport/rdma/completion_group.h), so it holds
// hundreds of them; past the limit it refuses the next one, says why in its
// log (naming the limit and how to raise it), and keeps serving the others.
// A payload larger than it may still pin is refused the same way
// (RESOURCE_EXHAUSTED), and its connection serves on.
//
// The server is tests/test_server, run by this test as `nobody` under
// `prlimit --memlock=8388608`; the clients are this process. What the
// server pins is read from the kernel (/proc/PID/status VmPin). Needs a
// device and root (to start the server as another user): tools/test runs it
// in the Soft-RoCE VM.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/process_stats.h"
#include "tests/support/test_support.h"

namespace rdmarpc::testing {
namespace {

using namespace std::chrono_literals;
constexpr rpc::MethodRef kEcho("test.Test", "Echo");
constexpr uint64_t kLimit = 8ull << 20;

// tests/test_server as `nobody`, without capabilities, under kLimit.
class LimitedServer {
 public:
  LimitedServer() {
    REQUIRE(geteuid() == 0);
    char dir_template[] = "/tmp/memlock_test.XXXXXX";
    REQUIRE(mkdtemp(dir_template) != nullptr);
    dir_ = dir_template;
    REQUIRE(chmod(dir_.c_str(), 0755) == 0);
    // A copy nobody can read (the build tree may be under /root).
    const auto self = std::filesystem::read_symlink("/proc/self/exe");
    const std::string binary = dir_ + "/test_server";
    std::filesystem::copy_file(self.parent_path() / "test_server", binary);
    REQUIRE(chmod(binary.c_str(), 0755) == 0);
    const std::string ip = RequireEnv("RXE_IP");
    const std::string command =
        "RDMARPC_LOG=info setpriv --reuid=nobody --regid=nogroup "
        "--clear-groups --inh-caps=-all prlimit --memlock=" +
        std::to_string(kLimit) + ":" + std::to_string(kLimit) + " " + binary +
        " --uri rdma://" + ip + ":0 --control tcp://127.0.0.1:0 > " + dir_ +
        "/log 2>&1 & echo $! > " + dir_ + "/pid";
    REQUIRE(std::system(command.c_str()) == 0);
    const auto until = std::chrono::steady_clock::now() + 60s;
    while (uri.empty() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(50ms);
      std::ifstream log(dir_ + "/log");
      for (std::string line; std::getline(log, line);) {
        if (line.rfind("uri ", 0) == 0) uri = line.substr(4);
      }
    }
    INFO(Log());
    REQUIRE(!uri.empty());
    std::ifstream(dir_ + "/pid") >> pid;
    REQUIRE(pid > 0);
    // The server, not the shell or setpriv, once it has exec'd.
    REQUIRE(ProcessStatusField(pid, "CapEff") == 0);
  }
  ~LimitedServer() {
    if (pid > 0) kill(pid, SIGKILL);
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::string Log() const {
    std::ifstream log(dir_ + "/log");
    std::stringstream text;
    text << log.rdbuf();
    return text.str();
  }

  std::string uri;
  pid_t pid = 0;

 private:
  std::string dir_;
};

TEST_CASE("memlock: a server without CAP_IPC_LOCK under 8 MiB") {
  REQUIRE(OverRdma());
  LimitedServer server;
  REQUIRE(ProcessStatusField(server.pid, "VmPin") == 0);
  const long long files_before = OpenFileCount(server.pid);
  const long long threads_before = ProcessStatusField(server.pid, "Threads");

  // 256 connections, each with a call answered.
  constexpr int kHeld = 256;
  std::vector<std::unique_ptr<rpc::Channel>> channels;
  for (int i = 0; i < kHeld; ++i) {
    channels.push_back(std::make_unique<rpc::Channel>(server.uri));
    const CallResult result = CallSync(*channels.back(), kEcho, "hi");
    INFO("connection " << i << ": " << result.status.ToString() << "\n"
                       << server.Log());
    REQUIRE(result.status.ok());
  }
  const long long pinned_kib = ProcessStatusField(server.pid, "VmPin");
  const long long files = OpenFileCount(server.pid) - files_before;
  const long long threads =
      ProcessStatusField(server.pid, "Threads") - threads_before;
  std::printf(
      "memlock: a server as nobody under an 8 MiB limit holds %d connections: "
      "%lld KiB pinned (%.1f KiB each), %lld more open files, %lld more "
      "threads\n",
      kHeld, pinned_kib, double(pinned_kib) / kHeld, files, threads);
  CHECK(pinned_kib * 1024 <= static_cast<long long>(kLimit));
  CHECK(pinned_kib <= kHeld * 64);  // At most 64 KiB per idle connection.

  SECTION("a payload larger than it may pin goes in segments") {
    // 64 MiB, the largest payload: eight times what it may pin at all.
    std::string big(64u << 20, 'x');
    for (size_t i = 0; i < big.size(); i += 4093) big[i] = char(i / 4093);
    // The reply's last WRITE, and frames too large to go inline, are
    // staged in send slots: the group registers its first ones when it is
    // created, before receive buffers and bounce chunks take what may be
    // pinned (else the reply waited for a slot forever).
    const CallResult result =
        CallSync(*channels.front(), kEcho, big,
                 rpc::CallOptions::WithTimeout(std::chrono::seconds(120)));
    INFO(result.status.ToString() << "\n" << server.Log());
    CHECK(result.status.ok());
    CHECK(result.response == big);
    CHECK(ProcessStatusField(server.pid, "VmPin") * 1024 <=
          static_cast<long long>(kLimit));
    // The same connection, and the others, serve on.
    CHECK(CallSync(*channels.front(), kEcho, "after").response == "after");
    CHECK(CallSync(*channels.back(), kEcho, "after").response == "after");
    const std::string staged(4096, 's');  // Not inline.
    CHECK(CallSync(*channels.back(), kEcho, staged,
                   rpc::CallOptions::WithTimeout(std::chrono::seconds(30)))
              .response == staged);
  }

  SECTION("past the limit: refused, the limit named, the others served") {
    Status refused;
    int more = 0;
    while (more < 4000 && refused.ok()) {
      channels.push_back(std::make_unique<rpc::Channel>(server.uri));
      refused = CallSync(*channels.back(), kEcho, "hi").status;
      if (refused.ok()) ++more;
    }
    INFO(kHeld + more << " connections, then: " << refused.ToString());
    std::printf("memlock: refused after %d connections (%lld KiB pinned)\n",
                kHeld + more, ProcessStatusField(server.pid, "VmPin"));
    REQUIRE_FALSE(refused.ok());
    // The call fails as any call whose connection cannot be made does
    // (UNAVAILABLE: another server may take it), saying why.
    CHECK(refused.code() == StatusCode::kUnavailable);
    CHECK(refused.message().find("refused: the server cannot register "
                                 "memory") != std::string::npos);
    // The server's log says why, and what to do.
    // (It rejects the connection before it logs why.)
    std::string log;
    const auto until = std::chrono::steady_clock::now() + 30s;
    do {
      std::this_thread::sleep_for(50ms);
      log = server.Log();
    } while (log.find("refused a connection") == std::string::npos &&
             std::chrono::steady_clock::now() < until);
    const size_t refusal = log.find("refused a connection");
    INFO("the server's log: "
         << (refusal == std::string::npos
                 ? log.substr(log.size() > 4000 ? log.size() - 4000 : 0)
                 : log.substr(refusal, log.find('\n', refusal) - refusal)));
    CHECK(log.find("RLIMIT_MEMLOCK") != std::string::npos);
    CHECK(log.find("may lock " + std::to_string(kLimit)) != std::string::npos);
    CHECK(log.find("ulimit -l") != std::string::npos);
    CHECK(log.find("CAP_IPC_LOCK") != std::string::npos);
    // The connections it holds still work, the first and the last.
    channels.pop_back();
    CHECK(CallSync(*channels.front(), kEcho, "still").status.ok());
    CHECK(CallSync(*channels.back(), kEcho, "still").status.ok());
  }
}

}  // namespace
}  // namespace rdmarpc::testing
