// What cluster_test's files share: servers on loopback, a list:// target
// naming them, and threads that call until stopped.
#ifndef RDMARPC_TESTS_CLUSTER_SUPPORT_H_
#define RDMARPC_TESTS_CLUSTER_SUPPORT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rdmarpc/channel.h"
#include "tests/support/test_support.h"

namespace rdmarpc::testing {

using Servers = std::vector<std::unique_ptr<TestServer>>;

inline Servers StartServers(int n) {
  Servers servers;
  for (int i = 0; i < n; ++i) servers.push_back(std::make_unique<TestServer>());
  return servers;
}

inline std::string ListTarget(const Servers& servers) {
  std::string target = "list://";
  for (const auto& server : servers) {
    if (target.size() > 7) target += ",";
    target += server->uri;
  }
  return target;
}

// Waits until `n` of the channel's endpoints are connected.
inline bool WaitConnected(rpc::Channel& channel, size_t n,
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

// The failures, one per line, for INFO (which lasts only as long as its
// scope: one INFO per failure in a loop would print none of them).
inline std::string Describe(const std::vector<Status>& failures) {
  std::string text;
  for (const Status& failure : failures) text += failure.ToString() + "\n";
  return text;
}

}  // namespace rdmarpc::testing

#endif  // RDMARPC_TESTS_CLUSTER_SUPPORT_H_
