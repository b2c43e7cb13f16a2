#include "base/buffer_pool.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>
#include <vector>

#include "base/large_block.h"

namespace rdmarpc {
namespace {

constexpr std::array<size_t, 5> kClassSizes = {256, 4096, 8192, 16384,
                                               kLargestPooled};
constexpr size_t kThreadCacheBytes = size_t{256} * 1024;
constexpr size_t kSharedBytes = size_t{4} * 1024 * 1024;

static_assert(kClassSizes.back() == kLargestPooled);
static_assert(kThreadCacheBytes / kLargestPooled >= 4,
              "a thread must cache a few of the largest blocks");

// A free block holds the link to the next one.
struct FreeBlock {
  FreeBlock* next;
};

// Blocks a thread caches per class before it spills half of them.
constexpr std::array<uint32_t, kClassSizes.size()> kThreadLimits = [] {
  std::array<uint32_t, kClassSizes.size()> limits{};
  for (size_t c = 0; c < limits.size(); ++c) {
    limits[c] = static_cast<uint32_t>(kThreadCacheBytes / kClassSizes[c]);
  }
  return limits;
}();

std::atomic<size_t> heap_allocations{0};

int ClassOf(size_t size) {
  if (size <= kClassSizes[0]) return 0;  // Call headers and most messages.
  for (size_t i = 1; i < kClassSizes.size(); ++i) {
    if (size <= kClassSizes[i]) return static_cast<int>(i);
  }
  return -1;
}

struct Shared {
  std::mutex mu;
  std::array<FreeBlock*, kClassSizes.size()> heads{};
  std::array<size_t, kClassSizes.size()> counts{};
};
Shared& TheShared() {
  static auto* shared = new Shared;  // Never destroyed: threads outlive exit.
  return *shared;
}

// A thread's free lists. Trivially destructible and constant-initialised,
// so the hot path reaches it with a plain thread-local access: no guard and
// no call to a TLS init function. Emptying it at thread exit is the job of
// a separate CacheReaper, armed the first time the thread could hold a
// block.
struct ThreadCache {
  enum State : uint8_t {
    kUnarmed,  // Holds nothing; the reaper is not registered yet.
    kArmed,    // The reaper will empty it when the thread ends.
    kGone,     // Emptied: blocks released later (by other thread-local or
               // static destructors) go straight to the heap.
  };
  std::array<FreeBlock*, kClassSizes.size()> heads;
  std::array<uint32_t, kClassSizes.size()> counts;
  State state;
};
constinit thread_local ThreadCache cache{};

struct CacheReaper {
  bool armed = false;
  ~CacheReaper() {  // The thread ends: its blocks go back to the heap.
    cache.state = ThreadCache::kGone;
    for (size_t c = 0; c < cache.heads.size(); ++c) {
      while (FreeBlock* block = cache.heads[c]) {
        cache.heads[c] = block->next;
        ::operator delete(block);
      }
      cache.counts[c] = 0;
    }
  }
};
thread_local CacheReaper reaper;

// False once the thread's cache is gone. Registers the reaper on first use.
bool Arm() {
  if (cache.state == ThreadCache::kUnarmed) {
    reaper.armed = true;  // Constructs it, which registers its destructor.
    cache.state = ThreadCache::kArmed;
  }
  return cache.state == ThreadCache::kArmed;
}

// Half the limit from the shared list, under one lock.
void Refill(int c) {
  Shared& shared = TheShared();
  std::lock_guard lock(shared.mu);
  for (size_t n = kThreadLimits[c] / 2; n > 0 && shared.heads[c] != nullptr;
       --n) {
    FreeBlock* block = shared.heads[c];
    shared.heads[c] = block->next;
    --shared.counts[c];
    block->next = cache.heads[c];
    cache.heads[c] = block;
    ++cache.counts[c];
  }
}

// Half the cache to the shared list (or the heap when that is full).
void Spill(int c) {
  Shared& shared = TheShared();
  std::lock_guard lock(shared.mu);
  const size_t shared_limit = kSharedBytes / kClassSizes[c];
  for (size_t n = cache.counts[c] / 2; n > 0; --n) {
    FreeBlock* block = cache.heads[c];
    cache.heads[c] = block->next;
    --cache.counts[c];
    if (shared.counts[c] < shared_limit) {
      block->next = shared.heads[c];
      shared.heads[c] = block;
      ++shared.counts[c];
    } else {
      ::operator delete(block);
    }
  }
}

FreeBlock* Pop(int c) {
  FreeBlock* block = cache.heads[c];
  cache.heads[c] = block->next;
  --cache.counts[c];
  return block;
}

[[gnu::noinline]] void* TakeSlow(int c) {
  if (Arm()) {
    Refill(c);
    if (cache.heads[c] != nullptr) return Pop(c);
  }
  heap_allocations.fetch_add(1, std::memory_order_relaxed);
  return ::operator new(kClassSizes[c]);
}

[[gnu::noinline]] void GiveSlow(int c, FreeBlock* block) noexcept {
  if (!Arm()) return ::operator delete(block);
  block->next = cache.heads[c];
  cache.heads[c] = block;
  if (++cache.counts[c] > kThreadLimits[c]) Spill(c);
}

// The hot path: a pop or a push on this thread's list.
inline void* Take(int c) {
  if (cache.heads[c] != nullptr) [[likely]]
    return Pop(c);
  return TakeSlow(c);
}

inline void Give(int c, void* memory) noexcept {
  auto* block = static_cast<FreeBlock*>(memory);
  if (cache.state == ThreadCache::kArmed && cache.counts[c] < kThreadLimits[c])
      [[likely]] {
    block->next = cache.heads[c];
    cache.heads[c] = block;
    ++cache.counts[c];
    return;
  }
  GiveSlow(c, block);
}

void ReleasePooled(void* size_class, std::byte* block) noexcept {
  Give(static_cast<int>(reinterpret_cast<intptr_t>(size_class)), block);
}

}  // namespace

void* PoolAllocate(size_t size) {
  const int c = ClassOf(size);
  return c < 0 ? ::operator new(size) : Take(c);
}

void PoolFree(void* block, size_t size) noexcept {
  const int c = ClassOf(size);
  if (c < 0) {
    ::operator delete(block);
  } else {
    Give(c, block);
  }
}

Buffer PooledBuffer(size_t size) {
  if (size >= kLargeBlockMin) {
    Buffer block = LargeBlock(size, BlockFill::kAnything);
    if (block.size() != size) throw std::bad_alloc();  // As the heap would.
    return block;
  }
  const int c = ClassOf(size);
  if (c < 0 || size == 0) return Buffer::Allocate(size);
  return Buffer(static_cast<std::byte*>(Take(c)), size, &ReleasePooled,
                reinterpret_cast<void*>(static_cast<intptr_t>(c)));
}

size_t PoolHeapAllocations() {
  return heap_allocations.load(std::memory_order_relaxed);
}

}  // namespace rdmarpc
