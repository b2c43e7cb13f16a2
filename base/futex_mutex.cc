#include "base/futex_mutex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace rdmarpc {
namespace {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the futex word is the atomic itself");

void FutexWait(std::atomic<uint32_t>* word, uint32_t value) noexcept {
  // Returns at once if the word no longer holds `value`; spurious wake-ups
  // and EINTR are handled by the caller's loop.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE,
          value, nullptr, nullptr, 0);
}

void FutexWakeOne(std::atomic<uint32_t>* word) noexcept {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, 1,
          nullptr, nullptr, 0);
}

}  // namespace

void FutexMutex::LockSlow(uint32_t seen) noexcept {
  // Mark the mutex contended before sleeping, so that its holder wakes a
  // waiter on unlock. Whoever swaps in 2 over 0 owns the mutex (and keeps
  // it marked contended: an extra wake-up at worst).
  if (seen != kContended) {
    seen = state_.exchange(kContended, std::memory_order_acquire);
  }
  while (seen != kUnlocked) {
    FutexWait(&state_, kContended);
    seen = state_.exchange(kContended, std::memory_order_acquire);
  }
}

void FutexMutex::UnlockSlow() noexcept {
  // The state was 2 (waiters): fetch_sub left 1. Release it and wake one.
  state_.store(kUnlocked, std::memory_order_release);
  FutexWakeOne(&state_);
}

}  // namespace rdmarpc
