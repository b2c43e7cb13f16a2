// ReceiveClock: the time the frames being delivered were taken in.
//
// A server reads the clock for each call it starts: its latency's start (the
// method metrics) and its deadline's. But the event loop takes frames in by
// the batch (one read() on TCP, one completion poll on RDMA), and a clock
// read is not free everywhere: in the emulated test VM, whose clock source
// is the HPET, each is a system call of about 3 us. Inside a Batch, Now()
// reads the clock once, when first asked, and every call the batch's frames
// start shares that time: when its request was taken in, so its latency
// includes its wait behind the batch's earlier calls, and its deadline
// starts no later than it did. Outside a Batch, Now() reads the clock.
#ifndef RDMARPC_BASE_RECEIVE_CLOCK_H_
#define RDMARPC_BASE_RECEIVE_CLOCK_H_

#include <chrono>
#include <cstdint>

namespace rdmarpc {
namespace receive_clock_internal {

struct State {
  uint32_t depth = 0;  // Batches open on this thread.
  bool read = false;   // The innermost one's time is read.
  std::chrono::steady_clock::time_point time{};
};
inline thread_local State state;

}  // namespace receive_clock_internal

class ReceiveClock {
 public:
  using Clock = std::chrono::steady_clock;

  // The scope of one batch taken in, on the thread that delivers it. May
  // nest: a batch's time is read afresh after an inner one.
  class Batch {
   public:
    Batch() noexcept {
      ++receive_clock_internal::state.depth;
      receive_clock_internal::state.read = false;
    }
    ~Batch() {
      --receive_clock_internal::state.depth;
      receive_clock_internal::state.read = false;
    }
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;
  };

  static Clock::time_point Now() noexcept {
    receive_clock_internal::State& state = receive_clock_internal::state;
    if (state.depth == 0) return Clock::now();
    if (!state.read) {
      state.time = Clock::now();
      state.read = true;
    }
    return state.time;
  }
};

}  // namespace rdmarpc

#endif  // RDMARPC_BASE_RECEIVE_CLOCK_H_
