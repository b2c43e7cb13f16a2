// A Channel whose target names a cluster (rpc/cluster_options.h): picking
// (round robin, least loaded, hash ring with bounded load), calls that wait
// for a first connection, endpoints that die, outlier ejection; and the
// same over a real etcd (tests/etcd_process.h) whose membership changes.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <thread>

#include "naming/etcd_client.h"
#include "naming/registration.h"
#include "rpc/event_loop.h"
#include "tests/etcd_process.h"
#include "tests/test_support.h"

namespace rdmarpc::testing {
namespace {

using Servers = std::vector<std::unique_ptr<TestServer>>;

Servers StartServers(int n) {
  Servers servers;
  for (int i = 0; i < n; ++i) servers.push_back(std::make_unique<TestServer>());
  return servers;
}

std::string ListTarget(const Servers& servers) {
  std::string target = "list://";
  for (const auto& server : servers) {
    if (target.size() > 7) target += ",";
    target += server->uri;
  }
  return target;
}

// Waits until `n` of the channel's endpoints are connected.
bool WaitConnected(rpc::Channel& channel, size_t n,
                   std::chrono::milliseconds limit = 10s) {
  const auto give_up = rpc::Clock::now() + limit;
  while (rpc::Clock::now() < give_up) {
    size_t connected = 0;
    for (const auto& endpoint : channel.endpoints()) {
      connected += endpoint.connected;
    }
    if (connected == n) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

std::vector<int> Counts(const Servers& servers) {
  std::vector<int> counts;
  for (const auto& server : servers) counts.push_back(server->calls_started());
  return counts;
}

// The index of the one server whose count grew since `before`; -1 if not
// exactly one did.
int WhichServer(const Servers& servers, const std::vector<int>& before) {
  int which = -1;
  for (size_t i = 0; i < servers.size(); ++i) {
    if (servers[i]->calls_started() == before[i]) continue;
    if (which != -1) return -1;
    which = static_cast<int>(i);
  }
  return which;
}

// Threads that call over and over until stopped, counting what succeeded
// and keeping what failed.
class Callers {
 public:
  Callers(int threads, std::function<CallResult()> call) {
    for (int t = 0; t < threads; ++t) {
      threads_.emplace_back([this, call] {
        while (!stop_.load()) {
          const CallResult result = call();
          if (result.status.ok()) {
            ++ok_;
          } else {
            std::lock_guard lock(mu_);
            failures_.push_back(result.status);
          }
        }
      });
    }
  }
  ~Callers() { Stop(); }
  // Joins the threads; returns the failures.
  std::vector<Status> Stop() {
    stop_ = true;
    for (auto& thread : threads_) thread.join();
    threads_.clear();
    std::lock_guard lock(mu_);
    return failures_;
  }
  int ok() const { return ok_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> ok_{0};
  std::mutex mu_;
  std::vector<Status> failures_;
  std::vector<std::thread> threads_;
};

TEST_CASE("round robin spreads calls evenly over a list:// cluster") {
  Servers servers = StartServers(3);
  rpc::Channel channel(ListTarget(servers));
  // The first call waits for a connection, and starts all of them.
  CHECK(CallSync(channel, "Echo", "first").status.ok());
  REQUIRE(WaitConnected(channel, 3));
  const auto before = Counts(servers);
  for (int i = 0; i < 300; ++i) {
    REQUIRE(CallSync(channel, "Echo", "x").status.ok());
  }
  for (size_t i = 0; i < servers.size(); ++i) {
    CHECK(servers[i]->calls_started() - before[i] == 100);
  }
  CHECK(channel.state() == rpc::ChannelState::kReady);
  CHECK(channel.endpoints().size() == 3);
  CHECK(channel.stats().connects == 3);
}

TEST_CASE("a cluster's calls go on when one of its servers stops") {
  Servers servers = StartServers(3);
  rpc::Channel channel(ListTarget(servers));
  REQUIRE(CallSync(channel, "Echo", "first").status.ok());
  REQUIRE(WaitConnected(channel, 3));
  servers[1]->Shutdown(0ms);
  REQUIRE(WaitConnected(channel, 2));
  const auto before = Counts(servers);
  for (int i = 0; i < 100; ++i) {
    REQUIRE(CallSync(channel, "Echo", "x").status.ok());
  }
  CHECK(servers[1]->calls_started() == before[1]);
  CHECK(servers[0]->calls_started() - before[0] == 50);
}

TEST_CASE("a cluster with no server to reach fails calls UNAVAILABLE") {
  std::string dead;
  {
    Servers gone = StartServers(2);
    dead = ListTarget(gone);
  }
  rpc::Channel channel(dead);
  CallResult result;
  // The first calls wait for the connects; once both failed, they fail.
  for (int i = 0; i < 50 && result.status.ok(); ++i) {
    result = CallSync(channel, "Echo", "x", rpc::CallOptions::WithTimeout(5s));
  }
  CHECK(result.status.code() == StatusCode::kUnavailable);
  CHECK(result.status.message().find("could be connected") !=
        std::string::npos);
  // A call that is wait-for-ready waits out its deadline instead.
  rpc::CallOptions patient = rpc::CallOptions::WithTimeout(300ms);
  patient.wait_for_ready = true;
  CHECK(CallSync(channel, "Echo", "x", patient).status.code() ==
        StatusCode::kDeadlineExceeded);
  // A stream opened now goes to a stand-in that refuses it: it ends
  // UNAVAILABLE. (Before, the stand-in unlocked its lock twice, and
  // OpenStream threw std::system_error.)
  std::unique_ptr<rpc::ClientStream> stream;
  REQUIRE_NOTHROW(stream =
                      channel.OpenStream(rpc::MethodRef("test.Stream", "Sum"),
                                         rpc::StreamKind::kClientStreaming,
                                         rpc::CallOptions::WithTimeout(5s)));
  std::promise<Status> ended;
  stream->Finish(
      [&](const Status& status, rpc::Payload) { ended.set_value(status); });
  const Status end = ended.get_future().get();
  CHECK(end.code() == StatusCode::kUnavailable);
  CHECK(end.message().find("could be connected") != std::string::npos);

  rpc::Channel bad("list://nohost");
  CHECK(CallSync(bad, "Echo", "x").status.code() == StatusCode::kUnavailable);
}

TEST_CASE("a hash ring sends a key to one server, and spreads a hot key") {
  Servers servers = StartServers(3);
  rpc::ChannelOptions options;
  options.cluster.policy = rpc::LoadBalancing::kHashRing;
  options.cluster.balance_metadata_key = "shard";
  rpc::Channel channel(ListTarget(servers), options);
  REQUIRE(CallSync(channel, "Echo", "first").status.ok());
  REQUIRE(WaitConnected(channel, 3));

  std::map<int, int> home;  // key -> server
  std::vector<int> per_server(3);
  for (int round = 0; round < 3; ++round) {
    for (int key = 0; key < 60; ++key) {
      rpc::CallOptions call;
      if (key % 2 == 0) {
        call.balance_key = rpc::BalanceKey("user" + std::to_string(key));
      } else {
        call.metadata.Add("shard", "user" + std::to_string(key));
      }
      const auto before = Counts(servers);
      REQUIRE(CallSync(channel, "Echo", "x", call).status.ok());
      const int server = WhichServer(servers, before);
      REQUIRE(server >= 0);
      if (round == 0) {
        home[key] = server;
        ++per_server[server];
      } else {
        CHECK(home[key] == server);
      }
    }
  }
  for (int count : per_server) CHECK(count >= 5);  // Each holds some keys.

  // Bounded load: 30 calls of one key at once do not all go to its server.
  std::vector<rpc::CallOptions> hot(30);
  std::vector<std::promise<Status>> done(30);
  const auto before = Counts(servers);
  for (int i = 0; i < 30; ++i) {
    hot[i] = rpc::CallOptions::WithTimeout(2s);
    hot[i].balance_key = rpc::BalanceKey("hot");
    channel.Call("test.Test", "SleepMs", Buffer::CopyOf("300"), hot[i],
                 [&done, i](const Status& status, rpc::Payload) {
                   done[i].set_value(status);
                 });
  }
  for (auto& one : done) CHECK(one.get_future().get().ok());
  const auto after = Counts(servers);
  for (size_t i = 0; i < servers.size(); ++i) {
    // ceil(1.25 * 30 / 3) = 13, and a little slack for calls that ended.
    CHECK(after[i] - before[i] <= 14);
    CHECK(after[i] - before[i] >= 1);
  }

  // Keys stay on their servers when another server goes.
  servers[2]->Shutdown(0ms);
  REQUIRE(WaitConnected(channel, 2));
  for (int key = 0; key < 60; ++key) {
    if (home[key] == 2) continue;
    rpc::CallOptions call;
    call.balance_key = rpc::BalanceKey("user" + std::to_string(key));
    if (key % 2 == 1) {
      call.balance_key.reset();
      call.metadata.Add("shard", "user" + std::to_string(key));
    }
    const auto before_one = Counts(servers);
    REQUIRE(CallSync(channel, "Echo", "x", call).status.ok());
    CHECK(WhichServer(servers, before_one) == home[key]);
  }
}

// A test.Test whose Echo always fails UNAVAILABLE: a sick server.
class SickService : public rpc::Service {
 public:
  SickService() : Service("test.Test") {
    AddMethod("Echo", [this](std::shared_ptr<rpc::ServerCall> call) {
      ++calls;
      call->Finish(Status(StatusCode::kUnavailable, "sick"));
    });
  }
  std::atomic<int> calls{0};
};

TEST_CASE("outlier detection ejects a failing server, then tries it again") {
  Servers servers = StartServers(2);
  SickService sick;
  rpc::Server sick_server;
  sick_server.RegisterService(&sick);
  auto sick_uri = sick_server.Listen(ListenUri());
  REQUIRE(sick_uri.ok());
  rpc::ChannelOptions options;
  options.cluster.outliers.interval = 50ms;
  options.cluster.outliers.consecutive_failures = 3;
  options.cluster.outliers.base_ejection = 500ms;
  rpc::Channel channel(ListTarget(servers) + "," + *sick_uri, options);
  // The first call may land on the sick one.
  CallSync(channel, "Echo", "first").status.IgnoreError();
  REQUIRE(WaitConnected(channel, 3));
  int failed = 0;
  for (int i = 0; i < 30; ++i) {
    failed += !CallSync(channel, "Echo", "x").status.ok();
  }
  CHECK(failed >= 3);
  // Ejected within an interval of its third failure.
  const auto give_up = rpc::Clock::now() + 5s;
  bool ejected = false;
  while (!ejected && rpc::Clock::now() < give_up) {
    for (const auto& endpoint : channel.endpoints()) {
      if (endpoint.uri == *sick_uri) ejected = endpoint.ejected;
    }
    std::this_thread::sleep_for(5ms);
  }
  REQUIRE(ejected);
  const int sick_before = sick.calls.load();
  for (int i = 0; i < 50; ++i) {
    CHECK(CallSync(channel, "Echo", "x").status.ok());
  }
  CHECK(sick.calls.load() == sick_before);
  // Back after the ejection, and ejected again for longer.
  std::this_thread::sleep_for(700ms);
  for (int i = 0; i < 30; ++i)
    CallSync(channel, "Echo", "x").status.IgnoreError();
  CHECK(sick.calls.load() > sick_before);
  std::this_thread::sleep_for(200ms);
  for (const auto& endpoint : channel.endpoints()) {
    if (endpoint.uri == *sick_uri) {
      CHECK(endpoint.ejected);
      CHECK(endpoint.ejections == 2);
      CHECK(endpoint.failures >= 6);
    }
  }
}

TEST_CASE("an etcd cluster follows servers that join, stop and crash") {
  EtcdProcess etcd;
  rpc::EventLoop loop;
  const std::string target = "etcd://" + etcd.endpoint() + "/services/test";
  // Servers register themselves (ServerOptions::register_at).
  rpc::ServerOptions server_options;
  server_options.register_at = target;
  server_options.registration.ttl = 2s;
  Servers servers;
  for (int i = 0; i < 3; ++i) {
    servers.push_back(std::make_unique<TestServer>(server_options));
  }
  // A cluster that lists no server fails calls: wait until all three are in.
  auto client = naming::EtcdClient::Create(loop.context().get_executor(),
                                           etcd.endpoint());
  REQUIRE(client.ok());
  const auto listed = [&] {
    std::promise<size_t> count;
    (*client)->Range("/services/test/", [&count](auto range) {
      count.set_value(range.ok() ? range->kvs_size() : 0);
    });
    return count.get_future().get();
  };
  const auto give_up = rpc::Clock::now() + 10s;
  while (listed() != 3 && rpc::Clock::now() < give_up) {
    std::this_thread::sleep_for(10ms);
  }
  REQUIRE(listed() == 3);
  rpc::ChannelOptions options;
  options.cluster.policy = rpc::LoadBalancing::kLeastLoaded;
  rpc::Channel channel(target, options);
  REQUIRE(CallSync(channel, "Echo", "first").status.ok());
  REQUIRE(WaitConnected(channel, 3));
  auto before = Counts(servers);
  for (int i = 0; i < 90; ++i) {
    REQUIRE(CallSync(channel, "Echo", "x").status.ok());
  }
  for (int i = 0; i < 3; ++i) CHECK(servers[i]->calls_started() > before[i]);

  // Least loaded: with calls held on the first three, a fourth server that
  // joins takes more of the new ones than its share.
  std::vector<std::promise<Status>> held(9);
  std::vector<std::shared_ptr<rpc::CallCancellation>> cancels;
  for (int i = 0; i < 9; ++i) {
    rpc::CallOptions call = rpc::CallOptions::WithTimeout(20s);
    call.cancellation = std::make_shared<rpc::CallCancellation>();
    cancels.push_back(call.cancellation);
    channel.Call("test.Test", "WaitCancel", Buffer(), call,
                 [&held, i](const Status& status, rpc::Payload) {
                   held[i].set_value(status);
                 });
  }
  const auto joined = rpc::Clock::now();
  servers.push_back(std::make_unique<TestServer>(server_options));
  REQUIRE(WaitConnected(channel, 4));
  const auto join_time = rpc::Clock::now() - joined;
  CHECK(join_time < 5s);
  std::cout << "measured: a new server was connected to "
            << std::chrono::duration_cast<std::chrono::microseconds>(join_time)
                       .count() /
                   1000.0
            << " ms after it started\n";
  // Each pick compares two endpoints at random; the new one, with no call
  // held, wins each pick it is in: about half of them (round robin would
  // give it a quarter). Below 35 of 100 is a chance of about 1e-5.
  before = Counts(servers);
  for (int i = 0; i < 100; ++i) {
    REQUIRE(CallSync(channel, "Echo", "x").status.ok());
  }
  CHECK(servers[3]->calls_started() - before[3] >= 35);
  for (auto& cancel : cancels) cancel->Cancel();
  for (auto& one : held) {
    CHECK(one.get_future().get().code() == StatusCode::kCancelled);
  }

  // A graceful stop deregisters first: gone from the channel within a
  // second (while the server still drains).
  const auto stopped = rpc::Clock::now();
  std::thread stopping([&] { servers[0]->Shutdown(1s); });
  while (channel.endpoints().size() != 3 && rpc::Clock::now() - stopped < 5s) {
    std::this_thread::sleep_for(1ms);
  }
  const auto gone = rpc::Clock::now() - stopped;
  stopping.join();
  CHECK(channel.endpoints().size() == 3);
  CHECK(gone < 3s);  // Goal: at once (docs/cluster.md has the measure).
  std::cout
      << "measured: a deregistered server left the channel in "
      << std::chrono::duration_cast<std::chrono::microseconds>(gone).count() /
             1000.0
      << " ms\n";

  // etcd restarts: the channel keeps the membership it knew.
  etcd.Stop(SIGKILL);
  before = Counts(servers);
  for (int i = 0; i < 30; ++i) {
    REQUIRE(CallSync(channel, "Echo", "x").status.ok());
  }
  CHECK(servers[0]->calls_started() == before[0]);
  CHECK(channel.endpoints().size() == 3);
  etcd.Restart();
  for (int i = 0; i < 30; ++i) {
    REQUIRE(CallSync(channel, "Echo", "x").status.ok());
  }
}

}  // namespace
}  // namespace rdmarpc::testing

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

}  // namespace
}  // namespace rdmarpc::testing

namespace rdmarpc::testing {
namespace {

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
  for (const auto& failure : failures) INFO(failure.ToString());
  CHECK(failures.empty());
  CHECK(before_shutdown > 20);
  CHECK(callers.ok() > before_shutdown + 20);
  CHECK(servers[0]->calls_started() == served);
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

}  // namespace
}  // namespace rdmarpc::testing

namespace rdmarpc::testing {
namespace {

// A tests/test_server process registered in etcd, for a crash: SIGKILL.
class ServerProcess {
 public:
  ServerProcess(const std::string& register_at, int ttl_seconds) {
    const std::string binary =
        std::filesystem::read_symlink("/proc/self/exe").parent_path() /
        "test_server";
    int out[2];
    REQUIRE(pipe(out) == 0);
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // Gone with the test, if it dies.
      dup2(out[1], 1);
      close(out[0]);
      const std::string ttl = std::to_string(ttl_seconds);
      execl(binary.c_str(), binary.c_str(), "--uri", "tcp://127.0.0.1:0",
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
    return CallSync(channel, kEchoIdempotent, "x",
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
  for (const auto& failure : failures) INFO(failure.ToString());
  CHECK(failures.empty());
  CHECK(callers.ok() > before_join);
  for (const auto& endpoint : channel.endpoints()) {
    if (endpoint.uri == fourth) CHECK(endpoint.calls > 0);
  }
  CHECK(channel.stats().retries >= 1);  // The calls the crash cut short.
}

}  // namespace
}  // namespace rdmarpc::testing

namespace rdmarpc::testing {
namespace {

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

}  // namespace
}  // namespace rdmarpc::testing

namespace rdmarpc::testing {
namespace {

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
