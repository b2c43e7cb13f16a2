// cluster_test (cluster_test.cc): a cluster's servers coming and going:
// registration in etcd, a server's shutdown (GOAWAY) and crash under calls,
// a cluster channel's end, and dns:// clusters.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <filesystem>
#include <future>
#include <iostream>
#include <thread>

#include "naming/registration.h"
#include "rpc/client/subchannel.h"
#include "tests/support/cluster_support.h"
#include "tests/support/etcd_process.h"
#include "tests/support/test_support.h"

namespace rdmarpc::testing {
namespace {

TEST_CASE("a server registers only an address clients can dial") {
  rpc::ServerOptions options;
  options.register_at = "etcd://127.0.0.1:1/services/test";
  rpc::Server wildcard(options);
  auto bound = wildcard.Listen("tcp://0.0.0.0:0");
  CHECK(bound.status().code() == StatusCode::kInvalidArgument);
  CHECK(bound.status().message().find("advertise_uri") != std::string::npos);
  options.register_at = "etcd://127.0.0.1:1";  // No prefix.
  rpc::Server malformed(options);
  CHECK(malformed.Listen("tcp://127.0.0.1:0").status().code() ==
        StatusCode::kInvalidArgument);
}

TEST_CASE("a server that shuts down moves its clients without a failed call") {
  Servers servers = StartServers(3);
  rpc::Channel channel(ListTarget(servers));
  REQUIRE(CallSync(channel, "Echo", "first").status.ok());
  REQUIRE(WaitConnected(channel, 3));
  Callers callers(4, [&] {
    return CallSync(channel, "SleepMs", "5", rpc::CallOptions::WithTimeout(5s));
  });
  std::this_thread::sleep_for(300ms);
  const int before_shutdown = callers.ok();
  servers[0]->Shutdown(2s);  // GOAWAY; its calls in flight finish.
  const int served = servers[0]->calls_started();
  std::this_thread::sleep_for(300ms);
  const std::vector<Status> failures = callers.Stop();
  INFO(Describe(failures));
  CHECK(failures.empty());
  CHECK(before_shutdown > 20);
  CHECK(callers.ok() > before_shutdown + 20);
  CHECK(servers[0]->calls_started() == served);
}

// The race the test above runs into now and then, made to happen: a call
// that picked an endpoint just before the cluster heard of its GOAWAY
// reaches the subchannel after. It goes to another endpoint (before the
// fix it waited, and failed once the server closed: "cannot connect").
TEST_CASE("a call that reaches an endpoint after its GOAWAY goes to another") {
  Servers servers = StartServers(2);
  boost::asio::io_context context;
  auto work = boost::asio::make_work_guard(context);
  std::thread loop([&] { context.run(); });
  auto going = std::make_shared<rpc::Subchannel>(
      servers[0]->uri, rpc::ChannelOptions{}, context);
  auto other = std::make_shared<rpc::Subchannel>(
      servers[1]->uri, rpc::ChannelOptions{}, context);
  // Starts a call; its status comes to `result`.
  const auto start = [](rpc::Subchannel& to, const char* method,
                        const char* request,
                        std::shared_ptr<std::promise<Status>> result) {
    to.Start("test.Test", method, 0, Buffer::CopyOf(request),
             rpc::CallOptions::WithTimeout(5s),
             [result](const Status& status, rpc::Payload) {
               result->set_value(status);
             });
  };
  const auto call = [&](rpc::Subchannel& to, const char* method,
                        const char* request) {
    auto result = std::make_shared<std::promise<Status>>();
    start(to, method, request, result);
    return result->get_future();
  };
  // The late call starts on the loop thread right after OnGoAway, which
  // told the cluster (this callback) and then set goaway_: as a call that
  // picked this endpoint just before would reach it.
  auto late = std::make_shared<std::promise<Status>>();
  std::atomic<bool> seen{false};
  going->KeepConnected(
      [&](rpc::ChannelState state) {
        if (state != rpc::ChannelState::kIdle || seen.exchange(true)) return;
        boost::asio::post(context,
                          [&] { start(*going, "Echo", "late", late); });
      },
      [&](const rpc::CallOptions&) { return other; });
  other->KeepConnected([](rpc::ChannelState) {});
  REQUIRE(call(*going, "Echo", "first").get().ok());
  REQUIRE(call(*other, "Echo", "first").get().ok());
  // A call in flight keeps the server draining, its connection open.
  std::future<Status> slow = call(*going, "SleepMs", "500");
  REQUIRE(WaitFor([&] { return servers[0]->calls_started() == 2; }));
  std::thread shutdown([&] { servers[0]->Shutdown(5s); });
  const Status late_status = late->get_future().get();
  INFO(late_status.ToString());
  CHECK(late_status.ok());
  CHECK(slow.get().ok());
  shutdown.join();
  CHECK(servers[0]->calls_started() == 2);
  CHECK(servers[1]->calls_started() == 2);  // "first" and "late".
  CHECK(going->stats().calls_repicked == 1);
  std::vector<rpc::CallTable::Entry> orphans;
  going->Shutdown(&orphans);
  other->Shutdown(&orphans);
  CHECK(orphans.empty());
  work.reset();
  loop.join();
}

TEST_CASE("a single server's call in flight completes through its GOAWAY") {
  rpc::ServerOptions options;
  options.goaway_answer_timeout = 10s;  // What an unanswered GOAWAY costs.
  TestServer server(options);
  rpc::Channel channel(server.uri);
  REQUIRE(CallSync(channel, "Echo", "first").status.ok());
  std::promise<Status> slow;
  channel.Call(
      "test.Test", "SleepMs", Buffer::CopyOf("300"),
      rpc::CallOptions::WithTimeout(5s),
      [&slow](const Status& status, rpc::Payload) { slow.set_value(status); });
  std::this_thread::sleep_for(50ms);
  const auto started = rpc::Clock::now();
  server.Shutdown(10s);
  CHECK(slow.get_future().get().ok());
  // The client answered GOAWAY at once: the server did not wait it out.
  CHECK(rpc::Clock::now() - started < 5s);
  // A call made now finds no server.
  CHECK(CallSync(channel, "Echo", "x").status.code() ==
        StatusCode::kUnavailable);
}

// A tests/test_server process registered in etcd, for a crash: SIGKILL.
class ServerProcess {
 public:
  ServerProcess(const std::string& register_at, int ttl_seconds) {
    const std::string binary =
        std::filesystem::read_symlink("/proc/self/exe").parent_path() /
        "test_server";
    // tcp://, or rdma:// in the VM (RDMARPC_TEST_TRANSPORT); read before
    // the fork, since it may throw.
    const std::string listen = ListenUri();
    int out[2];
    REQUIRE(pipe(out) == 0);
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // Gone with the test, if it dies.
      dup2(out[1], 1);
      close(out[0]);
      const std::string ttl = std::to_string(ttl_seconds);
      execl(binary.c_str(), binary.c_str(), "--uri", listen.c_str(),
            "--control", "tcp://127.0.0.1:0", "--register-at",
            register_at.c_str(), "--registration-ttl-s", ttl.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    FILE* lines = fdopen(out[0], "r");
    char line[512];
    while (uri.empty() && std::fgets(line, sizeof line, lines) != nullptr) {
      std::string text(line);
      if (text.rfind("uri ", 0) == 0) uri = text.substr(4, text.size() - 5);
    }
    std::fclose(lines);
    REQUIRE(!uri.empty());
  }
  ~ServerProcess() { Kill(); }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::string uri;

 private:
  pid_t pid_ = -1;
};

constexpr rpc::MethodRef kEchoIdempotent("test.Test", "Echo",
                                         rpc::MethodRef::kIdempotent);
// 20 ms in the server: callers of it always have calls there, for a crash
// to cut short (an echo's time in the server is so short that, under TSan,
// a crash once met none).
constexpr rpc::MethodRef kSleepIdempotent("test.Test", "SleepMs",
                                          rpc::MethodRef::kIdempotent);

bool Lists(rpc::Channel& channel, const std::string& uri) {
  for (const auto& endpoint : channel.endpoints()) {
    if (endpoint.uri == uri) return true;
  }
  return false;
}

TEST_CASE("a crashed server leaves the cluster and no idempotent call fails") {
  EtcdProcess etcd;
  const std::string target = "etcd://" + etcd.endpoint() + "/services/crash";
  constexpr int kTtl = 2;
  std::vector<std::unique_ptr<ServerProcess>> servers;
  for (int i = 0; i < 3; ++i) {
    servers.push_back(std::make_unique<ServerProcess>(target, kTtl));
  }
  rpc::ChannelOptions options;
  options.retry.max_attempts = 3;
  options.retry.initial_backoff = 5ms;
  rpc::Channel channel(target, options);
  REQUIRE(WaitFor([&] {
    return CallSync(channel, kEchoIdempotent, "x").status.ok() &&
           WaitConnected(channel, 3, 100ms);
  }));

  Callers callers(4, [&] {
    return CallSync(channel, kSleepIdempotent, "20",
                    rpc::CallOptions::WithTimeout(5s));
  });
  std::this_thread::sleep_for(300ms);
  const std::string dead = servers[0]->uri;
  const auto killed = rpc::Clock::now();
  servers[0]->Kill();
  // Its lease runs out: gone from the channel within the TTL and a second.
  while (Lists(channel, dead) && rpc::Clock::now() - killed < 10s) {
    std::this_thread::sleep_for(5ms);
  }
  const auto gone = rpc::Clock::now() - killed;
  CHECK_FALSE(Lists(channel, dead));
  // Goal: within the TTL and a second; the bound is twice that, for
  // sanitizers and loaded machines (docs/cluster.md has the measure).
  CHECK(gone < 2 * (std::chrono::seconds(kTtl) + 1s));
  std::cout
      << "measured: a server killed with SIGKILL left the channel "
      << std::chrono::duration_cast<std::chrono::milliseconds>(gone).count()
      << " ms after (lease TTL " << kTtl << " s)\n";

  // A fourth joins and gets calls within a second.
  const int before_join = callers.ok();
  const auto started = rpc::Clock::now();
  servers.push_back(std::make_unique<ServerProcess>(target, kTtl));
  const std::string fourth = servers.back()->uri;
  while (!Lists(channel, fourth) && rpc::Clock::now() - started < 10s) {
    std::this_thread::sleep_for(1ms);
  }
  REQUIRE(WaitConnected(channel, 3));
  const auto joined = rpc::Clock::now() - started;
  CHECK(joined < 5s);  // Goal: a second, process start included.
  std::cout
      << "measured: a new server process was connected to "
      << std::chrono::duration_cast<std::chrono::milliseconds>(joined).count()
      << " ms after it was started\n";
  std::this_thread::sleep_for(200ms);
  const std::vector<Status> failures = callers.Stop();
  INFO(Describe(failures));
  CHECK(failures.empty());
  CHECK(callers.ok() > before_join);
  for (const auto& endpoint : channel.endpoints()) {
    if (endpoint.uri == fourth) CHECK(endpoint.calls > 0);
  }
  CHECK(channel.stats().retries >= 1);  // The calls the crash cut short.
}

// A regression: with retries, the channel's retrier held its cluster past
// the release of the channel's loop, and the cluster's etcd resolver then
// posted to a destroyed loop (a crash at a client's exit).
TEST_CASE(
    "a cluster channel with retries, alone in its process, ends cleanly") {
  EtcdProcess etcd;
  const std::string target = "etcd://" + etcd.endpoint() + "/services/end";
  rpc::ServerOptions server_options;
  server_options.register_at = target;
  TestServer server(server_options);
  for (int round = 0; round < 3; ++round) {
    rpc::ChannelOptions options;
    options.retry.max_attempts = 3;
    // The only channel: its destructor releases the client loops.
    rpc::Channel channel(target, options);
    CHECK(WaitFor(
        [&] { return CallSync(channel, kEchoIdempotent, "x").status.ok(); }));
  }
}

TEST_CASE("a dns:// cluster spreads calls over a name's addresses") {
  DnsmasqProcess dns;
  // Two servers on one port, at two loopback addresses of one name.
  auto first =
      std::make_unique<TestServer>(rpc::ServerOptions{}, "tcp://127.0.0.2:0");
  const std::string port = first->uri.substr(first->uri.rfind(':') + 1);
  auto second = std::make_unique<TestServer>(rpc::ServerOptions{},
                                             "tcp://127.0.0.3:" + port);
  dns.Set("127.0.0.2 kv.test\n127.0.0.3 kv.test\n");
  rpc::ChannelOptions options;
  options.cluster.naming.default_scheme = "tcp";
  rpc::Channel channel("dns://" + dns.server() + "/kv.test:" + port, options);
  REQUIRE(CallSync(channel, "Echo", "first").status.ok());
  REQUIRE(WaitConnected(channel, 2));
  const int a = first->calls_started();
  const int b = second->calls_started();
  for (int i = 0; i < 100; ++i) {
    REQUIRE(CallSync(channel, "Echo", "x").status.ok());
  }
  CHECK(first->calls_started() - a == 50);
  CHECK(second->calls_started() - b == 50);
}

}  // namespace
}  // namespace rdmarpc::testing
