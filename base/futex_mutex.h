// FutexMutex: a mutex for short critical sections on hot paths.
//
// Uncontended, lock and unlock are one atomic instruction each; glibc's
// pthread mutex does several times that work on the pair (type checks, owner
// and user counts). Contended, a waiter sleeps in the kernel (futex), so a
// preempted holder costs the waiter nothing but its wait. The protocol is
// the third mutex of Drepper's "Futexes Are Tricky": 0 unlocked, 1 locked,
// 2 locked with waiters.
//
// It meets the standard Lockable requirements (std::lock_guard,
// std::unique_lock); there is no condition variable for it. Not recursive.
#ifndef RDMARPC_BASE_FUTEX_MUTEX_H_
#define RDMARPC_BASE_FUTEX_MUTEX_H_

#include <atomic>
#include <cstdint>

namespace rdmarpc {

class FutexMutex {
 public:
  FutexMutex() = default;
  FutexMutex(const FutexMutex&) = delete;
  FutexMutex& operator=(const FutexMutex&) = delete;

  void lock() noexcept {
    uint32_t expected = kUnlocked;
    if (state_.compare_exchange_strong(expected, kLocked,
                                       std::memory_order_acquire,
                                       std::memory_order_relaxed)) [[likely]] {
      return;
    }
    LockSlow(expected);
  }
  bool try_lock() noexcept {
    uint32_t expected = kUnlocked;
    return state_.compare_exchange_strong(expected, kLocked,
                                          std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }
  void unlock() noexcept {
    if (state_.fetch_sub(1, std::memory_order_release) != kLocked)
        [[unlikely]] {
      UnlockSlow();
    }
  }

 private:
  static constexpr uint32_t kUnlocked = 0;
  static constexpr uint32_t kLocked = 1;
  static constexpr uint32_t kContended = 2;

  void LockSlow(uint32_t seen) noexcept;
  void UnlockSlow() noexcept;

  std::atomic<uint32_t> state_{kUnlocked};
};

}  // namespace rdmarpc

#endif  // RDMARPC_BASE_FUTEX_MUTEX_H_
