// FutexMutex excludes, wakes its waiters, and works with the std lock
// types. Run under TSan too (tools/test), which checks the exclusion.
#include "base/futex_mutex.h"

#include <atomic>
#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace rdmarpc {
namespace {

using namespace std::chrono_literals;

TEST_CASE("FutexMutex: contending threads never lose an update") {
  FutexMutex mu;
  uint64_t counter = 0;  // Plain: only the mutex protects it.
  constexpr int kThreads = 4;
  constexpr int kRounds = 100000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::lock_guard lock(mu);
        counter = counter + 1;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(counter == uint64_t{kThreads} * kRounds);
}

TEST_CASE("FutexMutex: a waiter sleeps until the holder unlocks") {
  FutexMutex mu;
  std::atomic<bool> acquired = false;
  mu.lock();
  std::thread waiter([&] {
    std::lock_guard lock(mu);
    acquired = true;
  });
  std::this_thread::sleep_for(50ms);  // Long enough to reach the futex.
  CHECK_FALSE(acquired);
  mu.unlock();
  waiter.join();
  CHECK(acquired);
  // Unlocked again, and uncontended: the fast path takes it.
  CHECK(mu.try_lock());
  CHECK_FALSE(mu.try_lock());
  mu.unlock();
}

TEST_CASE("FutexMutex: unique_lock can unlock early and relock") {
  FutexMutex mu;
  std::unique_lock lock(mu);
  CHECK_FALSE(mu.try_lock());
  lock.unlock();
  CHECK(mu.try_lock());
  mu.unlock();
  lock.lock();
  CHECK(lock.owns_lock());
}

}  // namespace
}  // namespace rdmarpc
