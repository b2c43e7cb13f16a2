// Pooled Buffers for the hot path: the small blocks every call needs (call
// headers, received frames copied out of a transport's ring) come from
// per-thread free lists instead of the heap, so a call in steady state
// allocates nothing.
//
// Blocks come in five size classes (256 B to 32 KiB); larger requests
// go to the heap, and those of kLargeBlockMin (64 KiB) and more are
// LargeBlocks, kept for reuse once released (base/large_block.h). A block may
// be released on any thread: it joins that thread's cache, and a cache that
// grows past its limit hands half its blocks to a shared list, from which a
// thread with an empty cache refills. Memory is bounded: each thread caches at
// most kThreadCacheBytes per class and the shared list holds at most
// kSharedBytes per class; beyond that blocks are freed.
#ifndef RDMARPC_BASE_BUFFER_POOL_H_
#define RDMARPC_BASE_BUFFER_POOL_H_

#include <cstddef>

#include "rdmarpc/buffer.h"

namespace rdmarpc {

// A Buffer of `size` uninitialised bytes, pooled when size <= kLargestPooled
// or size >= kLargeBlockMin. Throws std::bad_alloc as operator new does.
Buffer PooledBuffer(size_t size);

// Raw blocks for allocators (PoolAllocator below); `size` picks the class.
void* PoolAllocate(size_t size);
void PoolFree(void* block, size_t size) noexcept;

inline constexpr size_t kLargestPooled = 32 << 10;

// A std allocator over the pool, for allocate_shared of per-call objects.
template <typename T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() noexcept = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__,
                  "pool blocks have operator new's alignment");
    return static_cast<T*>(PoolAllocate(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept { PoolFree(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const PoolAllocator<U>&) const noexcept {
    return true;
  }
};

// Statistics, for tests: blocks taken from the heap so far.
size_t PoolHeapAllocations();

}  // namespace rdmarpc

#endif  // RDMARPC_BASE_BUFFER_POOL_H_
