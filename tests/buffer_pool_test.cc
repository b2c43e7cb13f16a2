// The small-block pool: a thread reuses what it released, its cache is
// bounded, blocks may be released on any thread, and a thread's blocks
// outlive it safely. Heap traffic is read from PoolHeapAllocations().
#include "base/buffer_pool.h"

#include <atomic>
#include <catch2/catch_test_macros.hpp>
#include <cstring>
#include <semaphore>
#include <thread>
#include <vector>

namespace rdmarpc {
namespace {

TEST_CASE("a released block serves the thread's next request of its class") {
  std::thread([] {  // A fresh thread: its cache starts empty.
    std::byte* first = nullptr;
    {
      Buffer block = PooledBuffer(100);
      REQUIRE(block.size() == 100);
      first = block.data();
      std::memset(block.data(), 7, block.size());
    }
    const size_t heap_before = PoolHeapAllocations();
    for (int i = 0; i < 1000; ++i) {
      Buffer again = PooledBuffer(200);  // The same class (256 B).
      CHECK(again.data() == first);
    }
    CHECK(PoolHeapAllocations() == heap_before);
  })
      .join();
}

TEST_CASE("PoolAllocate and PoolFree share the pool with PooledBuffer") {
  std::thread([] {
    void* raw = PoolAllocate(64);
    PoolFree(raw, 64);
    Buffer block = PooledBuffer(256);
    CHECK(static_cast<void*>(block.data()) == raw);
  }).join();
}

TEST_CASE("blocks released on another thread come back, not from the heap") {
  // This thread takes, another releases: the releaser's cache spills to the
  // shared list, from which this thread refills. Once enough blocks exist,
  // the heap is left alone but for a few: how many the releaser keeps in its
  // own cache varies from round to round by up to half its limit.
  constexpr int kRounds = 40;
  constexpr int kPerRound = 3000;  // Past a thread's limit of 1,024 blocks.
  std::vector<Buffer> handoff;
  handoff.reserve(kPerRound);
  std::binary_semaphore release(0);
  std::binary_semaphore released(0);
  std::atomic<bool> stop = false;
  std::thread releaser([&] {
    for (;;) {
      release.acquire();
      if (stop) return;
      handoff.clear();
      released.release();
    }
  });
  size_t heap_in_late_rounds = 0;
  for (int round = 0; round < kRounds; ++round) {
    const size_t heap_before = PoolHeapAllocations();
    for (int i = 0; i < kPerRound; ++i) handoff.push_back(PooledBuffer(64));
    if (round >= kRounds / 2) {
      heap_in_late_rounds += PoolHeapAllocations() - heap_before;
    }
    release.release();
    released.acquire();
  }
  stop = true;
  release.release();
  releaser.join();
  const size_t late_blocks = size_t{kRounds / 2} * kPerRound;
  INFO(heap_in_late_rounds << " of " << late_blocks
                           << " blocks came from the heap");
  CHECK(heap_in_late_rounds * 100 < late_blocks);
}

TEST_CASE("a block outlives the thread that cached it") {
  Buffer kept;
  std::thread([&] {
    {
      Buffer warm = PooledBuffer(32);  // Arms this thread's cache.
    }
    kept = PooledBuffer(32);
    std::memset(kept.data(), 1, kept.size());
  }).join();
  // Released here, on the main thread, after its thread has ended.
  CHECK(kept.size() == 32);
  CHECK(std::to_integer<int>(kept.data()[31]) == 1);
  kept.Reset();
}

TEST_CASE("a thread-local destructor may release a pooled block") {
  // Released during thread exit, possibly after the pool's own per-thread
  // cache is gone: the block must go to the heap, not to a dead cache (ASan
  // reports either mistake).
  struct Holder {
    Buffer block;
    ~Holder() { block.Reset(); }
  };
  for (int i = 0; i < 2; ++i) {
    std::thread([i] {
      thread_local Holder holder;
      if (i == 0) {
        holder.block = PooledBuffer(48);  // Holder constructed first.
      } else {
        Buffer warm = PooledBuffer(48);  // The pool's cache first.
        warm.Reset();
        holder.block = PooledBuffer(48);
      }
    }).join();
  }
  SUCCEED("no sanitizer report");
}

}  // namespace
}  // namespace rdmarpc
