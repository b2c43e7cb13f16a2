// Large blocks: the memory whole received frames and RDMA receive grants of
// 64 KiB and more live in.
//
// A block that size from the heap is a fresh mapping each time (glibc maps
// anything over 32 MiB, and unmaps it on free), so every large frame paid
// one page fault per 4 KiB and the kernel's zeroing: 64 MiB frames over
// tcp:// on the development VM took 16,400 faults each and ran at 0.54-0.69
// of the raw socket's bandwidth (0.93-1.23 with reuse). Instead, blocks are
// mapped in power-of-two capacities and, once released, kept for the next
// request of their class: a few per thread (released on the thread that will
// likely reuse them), then up to tunables::kLargeBlockCacheBytes shared.
#ifndef RDMARPC_BASE_LARGE_BLOCK_H_
#define RDMARPC_BASE_LARGE_BLOCK_H_

#include <cstddef>

#include "rdmarpc/buffer.h"

namespace rdmarpc {

// Smallest size LargeBlock maps; smaller ones belong to the heap or the pool.
inline constexpr size_t kLargeBlockMin = 64 << 10;

enum class BlockFill {
  kAnything,  // The caller overwrites every byte before anyone reads one.
  kZeroed,    // A reused block is zeroed again (a fresh mapping already is).
};

// A Buffer of `size` >= kLargeBlockMin bytes; an empty Buffer when the
// kernel has no memory to map. Releasing it, on any thread, returns the
// block to the cache or unmaps it.
Buffer LargeBlock(size_t size, BlockFill fill);

// Bytes of released blocks kept for reuse, by mapped capacity: the shared
// cache's and the calling thread's own (for tests).
size_t CachedLargeBlockBytes();

}  // namespace rdmarpc

#endif  // RDMARPC_BASE_LARGE_BLOCK_H_
