// Load: many connections on one server, all calling for a bounded time.
// No call fails, memory stays bounded, and everything is released after.
// 1,000 connections over tcp natively; 64 over rdma in the VM
// (RDMARPC_LOAD_CONNECTIONS overrides, as the sanitizer configs do).
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "rdmarpc/channel.h"
#include "tests/support/test_support.h"

namespace rdmarpc::testing {
namespace {

using rpc::Channel;

#if defined(__SANITIZE_THREAD__)
constexpr double kShadowFactor = 8;
#elif defined(__SANITIZE_ADDRESS__)
constexpr double kShadowFactor = 4;
#else
constexpr double kShadowFactor = 1;
#endif

uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

int Connections() {
  if (const char* n = std::getenv("RDMARPC_LOAD_CONNECTIONS")) {
    return std::atoi(n);
  }
  return OverRdma() ? 64 : 1000;
}

// Keeps `depth` calls in flight on one channel until `until`.
struct Caller : std::enable_shared_from_this<Caller> {
  Channel* channel;
  std::chrono::steady_clock::time_point until;
  std::atomic<uint64_t>* ok;
  std::atomic<uint64_t>* failed;
  std::atomic<int>* running;
  void Next() {
    if (std::chrono::steady_clock::now() >= until) {
      (*running)--;
      return;
    }
    channel->Call("test.Test", "Echo",
                  Buffer::CopyOf(std::string_view("0123456789abcdef")), {},
                  [self = shared_from_this()](const Status& s, Buffer b) {
                    if (s.ok() && b.size() == 16) {
                      (*self->ok)++;
                    } else {
                      (*self->failed)++;
                      UNSCOPED_INFO(s.ToString());
                    }
                    self->Next();
                  });
  }
};

TEST_CASE("load: many connections calling at once on one server") {
  const int connections = Connections();
  // Two sockets per connection (both ends live here), plus spare.
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  REQUIRE(files.rlim_cur > static_cast<rlim_t>(2 * connections + 100));

  const uint64_t registered = RegisteredBytes();
  TestServer server;
  const uint64_t rss_before = ResidentBytes();
  std::vector<std::unique_ptr<Channel>> channels;
  for (int i = 0; i < connections; ++i) {
    channels.push_back(std::make_unique<Channel>(server.uri));
  }
  // Connect them all first (one call each).
  for (auto& channel : channels) {
    REQUIRE(CallSync(*channel, "Echo", "hello").response == "hello");
  }
  CHECK(server.stats().connections == static_cast<uint64_t>(connections));

  std::atomic<uint64_t> ok{0}, failed{0};
  std::atomic<int> running{0};
  const auto until = std::chrono::steady_clock::now() + 5s;
  for (auto& channel : channels) {
    for (int depth = 0; depth < 2; ++depth) {
      auto caller = std::make_shared<Caller>();
      caller->channel = channel.get();
      caller->until = until;
      caller->ok = &ok;
      caller->failed = &failed;
      caller->running = &running;
      running++;
      caller->Next();
    }
  }
  REQUIRE(WaitFor([&] { return running == 0; }, 120s));
  const uint64_t rss_peak = ResidentBytes();
  const double per_connection =
      static_cast<double>(rss_peak - std::min(rss_peak, rss_before)) /
      connections;
  std::printf(
      "load: %d connections, %llu calls in 5 s, %llu failed; resident "
      "memory grew %.1f MiB (%.0f KiB per connection, both ends)\n",
      connections, static_cast<unsigned long long>(ok.load()),
      static_cast<unsigned long long>(failed.load()),
      (rss_peak - std::min(rss_peak, rss_before)) / 1048576.0,
      per_connection / 1024);
  CHECK(failed == 0);
  CHECK(ok > static_cast<uint64_t>(connections));
  // Bounded: per connection (both ends, a thread each for the clients),
  // well under what unbounded queues or leaked buffers would reach.
  // (Sanitizer shadow memory inflates resident size several times.)
  CHECK(per_connection < (OverRdma() ? 16.0 : 1.0) * 1048576 * kShadowFactor);

  channels.clear();
  CHECK(WaitFor([&] { return server.stats().connections == 0; }, 60s));
  CHECK(server.stats().live_calls == 0);
  CHECK(WaitFor([&] { return RegisteredBytes() == registered; }));
}

}  // namespace
}  // namespace rdmarpc::testing
