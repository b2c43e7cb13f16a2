#include "base/large_block.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "base/tunables.h"

namespace rdmarpc {
namespace {

constexpr int kMinClass = std::countr_zero(kLargeBlockMin);
constexpr int kClasses = 64 - kMinClass;
static_assert(std::has_single_bit(kLargeBlockMin));

struct Cache {
  std::mutex mu;
  std::array<std::vector<void*>, kClasses> blocks;  // By capacity class.
  size_t bytes = 0;
};

// Never destroyed: a payload may be released after static destructors ran.
Cache& TheCache() {
  static Cache* const cache = new Cache;
  return *cache;
}

int ClassOf(size_t capacity) { return std::countr_zero(capacity) - kMinClass; }

void Release(void* capacity_context, std::byte* block) noexcept {
  const auto capacity = reinterpret_cast<size_t>(capacity_context);
  Cache& cache = TheCache();
  {
    std::lock_guard lock(cache.mu);
    auto& blocks = cache.blocks[ClassOf(capacity)];
    if (cache.bytes + capacity <= tunables::kLargeBlockCacheBytes) {
      try {
        blocks.push_back(block);
        cache.bytes += capacity;
        return;
      } catch (const std::bad_alloc&) {
        // Unmapped below.
      }
    }
  }
  munmap(block, capacity);
}

}  // namespace

Buffer LargeBlock(size_t size, BlockFill fill) {
  const size_t capacity = std::bit_ceil(std::max(size, kLargeBlockMin));
  void* block = nullptr;
  {
    Cache& cache = TheCache();
    std::lock_guard lock(cache.mu);
    auto& blocks = cache.blocks[ClassOf(capacity)];
    if (!blocks.empty()) {
      block = blocks.back();
      blocks.pop_back();
      cache.bytes -= capacity;
    }
  }
  if (block == nullptr) {
    block = mmap(nullptr, capacity, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (block == MAP_FAILED) return Buffer();
  } else if (fill == BlockFill::kZeroed) {
    // Only `size` bytes are ever handed out; the rest of the capacity stays
    // unreachable.
    std::memset(block, 0, size);
  }
  return Buffer(static_cast<std::byte*>(block), size, &Release,
                reinterpret_cast<void*>(capacity));
}

size_t CachedLargeBlockBytes() {
  Cache& cache = TheCache();
  std::lock_guard lock(cache.mu);
  return cache.bytes;
}

}  // namespace rdmarpc
