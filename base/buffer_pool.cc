#include "base/buffer_pool.h"

#include <array>
#include <atomic>
#include <mutex>
#include <new>
#include <vector>

#include "base/large_block.h"

namespace rdmarpc {
namespace {

constexpr std::array<size_t, 5> kClassSizes = {256, 4096, 8192, 16384,
                                               kLargestPooled};
constexpr size_t kThreadCacheBytes = 256 * 1024;
constexpr size_t kSharedBytes = 4 * 1024 * 1024;

static_assert(kClassSizes.back() == kLargestPooled);
static_assert(kThreadCacheBytes / kLargestPooled >= 4,
              "a thread must cache a few of the largest blocks");

// A free block holds the link to the next one.
struct FreeBlock {
  FreeBlock* next;
};

std::atomic<size_t> heap_allocations{0};

int ClassOf(size_t size) {
  for (size_t i = 0; i < kClassSizes.size(); ++i) {
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

// Set when this thread's cache has been destroyed (thread exit): blocks
// released later, by other thread_local or static destructors, go straight
// to the heap. Trivially destructible, so it outlives every destructor.
thread_local bool cache_gone = false;

struct ThreadCache {
  std::array<FreeBlock*, kClassSizes.size()> heads{};
  std::array<size_t, kClassSizes.size()> counts{};

  ~ThreadCache() {  // The thread ends: its blocks go back to the heap.
    cache_gone = true;
    for (size_t c = 0; c < heads.size(); ++c) {
      while (FreeBlock* block = heads[c]) {
        heads[c] = block->next;
        ::operator delete(block);
      }
    }
  }
  static size_t Limit(int c) { return kThreadCacheBytes / kClassSizes[c]; }

  void* Take(int c) {
    if (heads[c] == nullptr) Refill(c);
    if (FreeBlock* block = heads[c]) {
      heads[c] = block->next;
      --counts[c];
      return block;
    }
    heap_allocations.fetch_add(1, std::memory_order_relaxed);
    return ::operator new(kClassSizes[c]);
  }
  void Give(int c, void* memory) {
    auto* block = static_cast<FreeBlock*>(memory);
    block->next = heads[c];
    heads[c] = block;
    if (++counts[c] > Limit(c)) Spill(c);
  }
  // Half the limit from the shared list, under one lock.
  void Refill(int c) {
    Shared& shared = TheShared();
    std::lock_guard lock(shared.mu);
    for (size_t n = Limit(c) / 2; n > 0 && shared.heads[c] != nullptr; --n) {
      FreeBlock* block = shared.heads[c];
      shared.heads[c] = block->next;
      --shared.counts[c];
      block->next = heads[c];
      heads[c] = block;
      ++counts[c];
    }
  }
  // Half the cache to the shared list (or the heap when that is full).
  void Spill(int c) {
    Shared& shared = TheShared();
    std::lock_guard lock(shared.mu);
    const size_t shared_limit = kSharedBytes / kClassSizes[c];
    for (size_t n = counts[c] / 2; n > 0; --n) {
      FreeBlock* block = heads[c];
      heads[c] = block->next;
      --counts[c];
      if (shared.counts[c] < shared_limit) {
        block->next = shared.heads[c];
        shared.heads[c] = block;
        ++shared.counts[c];
      } else {
        ::operator delete(block);
      }
    }
  }
};

thread_local ThreadCache cache;

void* Take(int c) {
  if (cache_gone) return ::operator new(kClassSizes[c]);
  return cache.Take(c);
}
void Give(int c, void* block) noexcept {
  if (cache_gone) return ::operator delete(block);
  cache.Give(c, block);
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
