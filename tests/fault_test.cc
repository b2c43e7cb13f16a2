// Faults: a peer process killed with SIGKILL mid-work, and a server shut
// down under load. Nothing hangs, no call is lost silently, and live calls,
// connections and registered memory all return to where they were.
// Runs over tcp natively and over rdma in the VM.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch_test_macros.hpp>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "rdmarpc/channel.h"
#include "tests/support/test_support.h"

extern char** environ;

namespace rdmarpc::testing {
namespace {

using rpc::Channel;

// tests/fault_peer, built next to this test.
std::string PeerBinary() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() /
          "fault_peer")
      .string();
}

// A fault_peer process; SIGKILLed when destroyed.
class Peer {
 public:
  explicit Peer(std::vector<std::string> args) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    const std::string binary = PeerBinary();
    std::vector<char*> argv{const_cast<char*>(binary.c_str())};
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int error = posix_spawn(&pid_, binary.c_str(), &actions, nullptr,
                                  argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    REQUIRE(error == 0);
    out_ = fdopen(fds[0], "r");
  }
  ~Peer() {
    Kill();
    if (out_ != nullptr) fclose(out_);
  }
  // The next line it prints (blocking), without the newline.
  std::string ReadLine() {
    char line[512];
    if (fgets(line, sizeof(line), out_) == nullptr) return "";
    std::string s(line);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
};

TEST_CASE("faults: a client killed mid-call releases everything") {
  TestServer server;
  const uint64_t registered = RegisteredBytes();
  const int cancels = server.cancels_observed();
  Peer client({"call", server.uri, "20"});
  REQUIRE(client.ReadLine() == "CALLING");
  REQUIRE(WaitFor([&] { return server.stats().live_calls == 20; }, 60s));
  CHECK(server.stats().connections == 1);

  client.Kill();
  // The server notices, cancels the orphaned calls, closes the connection
  // and deregisters its memory.
  CHECK(WaitFor([&] { return server.stats().connections == 0; }, 60s));
  CHECK(WaitFor([&] { return server.stats().live_calls == 0; }));
  CHECK(WaitFor([&] { return server.cancels_observed() == cancels + 20; }));
  CHECK(WaitFor([&] { return RegisteredBytes() == registered; }));

  Channel channel(server.uri);  // Still serving.
  CHECK(CallSync(channel, "Echo", "alive").response == "alive");
}

TEST_CASE("faults: a server killed under load; clients reconnect") {
  const uint64_t registered = RegisteredBytes();
  auto server =
      std::make_unique<Peer>(std::vector<std::string>{"serve", ListenUri()});
  std::string line = server->ReadLine();
  REQUIRE(line.rfind("LISTENING ", 0) == 0);
  const std::string uri = line.substr(10);

  Channel channel(uri);
  REQUIRE(CallSync(channel, "Echo", "first").status.ok());
  std::atomic<int> unavailable{0}, other{0};
  for (int i = 0; i < 20; ++i) {
    channel.Call(
        "test.Test", "WaitCancel", Buffer(), {}, [&](const Status& s, Buffer) {
          s.code() == StatusCode::kUnavailable ? unavailable++ : other++;
        });
  }
  // Under load: echo calls in flight from another thread too.
  std::atomic<bool> stop{false};
  std::atomic<int> echo_ok{0}, echo_unavailable{0}, echo_other{0};
  std::thread load([&] {
    while (!stop) {
      const CallResult r = CallSync(channel, "Echo", std::string(4096, 'e'));
      if (r.status.ok()) {
        echo_ok++;
      } else if (r.status.code() == StatusCode::kUnavailable) {
        echo_unavailable++;
      } else {
        echo_other++;
      }
    }
  });
  REQUIRE(WaitFor([&] { return echo_ok > 20; }, 60s));

  server->Kill();
  // Every call in flight fails UNAVAILABLE: none hangs, none is lost.
  CHECK(WaitFor([&] { return unavailable == 20; }, 60s));
  CHECK(other == 0);
  CHECK(WaitFor([&] { return echo_unavailable > 0; }, 60s));
  // The dead connection's memory is deregistered.
  CHECK(WaitFor([&] { return RegisteredBytes() == registered; }, 60s));

  // The server returns on the same address: the channel reconnects.
  server = std::make_unique<Peer>(std::vector<std::string>{"serve", uri});
  REQUIRE(server->ReadLine() == "LISTENING " + uri);
  const int before = echo_ok;
  CHECK(WaitFor([&] { return echo_ok > before + 20; }, 60s));
  stop = true;
  load.join();
  CHECK(echo_other == 0);
  CHECK(channel.stats().outstanding_calls == 0);
}

TEST_CASE("faults: shutdown under load drains cleanly") {
  const uint64_t registered = RegisteredBytes();
  auto server = std::make_unique<TestServer>();
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, unavailable{0}, other{0};
  std::vector<std::unique_ptr<Channel>> channels;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    channels.push_back(std::make_unique<Channel>(server->uri));
  }
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Channel& channel = *channels[t];
      for (int i = 0; !stop; ++i) {
        const CallResult r =
            i % 2 == 0 ? CallSync(channel, "SleepMs", "20")
                       : CallSync(channel, "Echo", std::string(64 * 1024, 's'));
        if (r.status.ok()) {
          ok++;
        } else if (r.status.code() == StatusCode::kUnavailable) {
          unavailable++;
        } else {
          other++;
          UNSCOPED_INFO("unexpected: " << r.status.ToString());
        }
      }
    });
  }
  REQUIRE(WaitFor([&] { return ok > 100; }, 60s));
  const uint64_t started = server->stats().calls_started;
  server->Shutdown(std::chrono::seconds(5));
  // Drained: every call the server started finished, none is left.
  CHECK(server->stats().live_calls == 0);
  CHECK(server->stats().connections == 0);
  CHECK(server->stats().calls_started >= started);
  CHECK(WaitFor([&] { return unavailable > 0; }, 30s));  // New calls refused.
  stop = true;
  for (auto& thread : threads) thread.join();
  CHECK(other == 0);
  for (auto& channel : channels) CHECK(channel->stats().outstanding_calls == 0);
  channels.clear();
  server.reset();
  CHECK(WaitFor([&] { return RegisteredBytes() == registered; }));
}

}  // namespace
}  // namespace rdmarpc::testing
