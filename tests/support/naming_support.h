// Helpers of the naming tests (naming_test.cc, naming_secure_test.cc): an
// io_context on a thread, waiting for a callback's value, an etcd client,
// and a recorder of a resolver's updates.
#ifndef RDMARPC_TESTS_SUPPORT_NAMING_SUPPORT_H_
#define RDMARPC_TESTS_SUPPORT_NAMING_SUPPORT_H_

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "naming/etcd_client.h"
#include "naming/resolver.h"

namespace rdmarpc::testing {

// An io_context on a thread of its own.
struct Loop {
  Loop() : thread([this] { context.run(); }) {}
  ~Loop() {
    work.reset();
    context.stop();
    thread.join();
  }
  boost::asio::io_context context;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type>
      work = boost::asio::make_work_guard(context);
  std::thread thread;
};

// Calls `start(callback)` and waits for the callback's value.
template <typename Response, typename F>
StatusOr<Response> Wait(F start) {
  std::promise<StatusOr<Response>> promise;
  auto future = promise.get_future();
  start([&promise](StatusOr<Response> r) { promise.set_value(std::move(r)); });
  return future.get();
}

// A client of `endpoints`, which must be accepted.
inline std::shared_ptr<naming::EtcdClient> Client(Loop& loop,
                                                  std::string endpoints,
                                                  EtcdOptions options = {}) {
  auto client = naming::EtcdClient::Create(loop.context.get_executor(),
                                           endpoints, options);
  REQUIRE(client.ok());
  return *client;
}

// Records a resolver's updates; waits for one that satisfies a predicate.
class Watcher {
 public:
  naming::Resolver::Update Callback() {
    return [this](StatusOr<std::vector<std::string>> update) {
      std::lock_guard lock(mu_);
      if (update.ok()) {
        sets_.push_back(*update);
      } else {
        errors_.push_back(update.status());
      }
      changed_.notify_all();
    };
  }
  // True once the latest set equals `want`; false after `limit`.
  bool WaitFor(const std::vector<std::string>& want,
               std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(
        lock, limit, [&] { return !sets_.empty() && sets_.back() == want; });
  }
  size_t updates() const {
    std::lock_guard lock(mu_);
    return sets_.size();
  }
  size_t errors() const {
    std::lock_guard lock(mu_);
    return errors_.size();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::vector<std::string>> sets_;
  std::vector<Status> errors_;
};

}  // namespace rdmarpc::testing

#endif  // RDMARPC_TESTS_SUPPORT_NAMING_SUPPORT_H_
