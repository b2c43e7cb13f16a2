#include "transport/rdma/grant_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "base/tunables.h"

namespace rdmarpc::transport::rdma {
namespace {

// Smaller blocks come from the heap; larger ones are mapped in power-of-two
// capacities, so a released block fits any later request of its class.
constexpr size_t kMapFrom = 64 * 1024;
constexpr int kMinClass = std::countr_zero(kMapFrom);
constexpr int kClasses = 64 - kMinClass;

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
    if (cache.bytes + capacity <= tunables::kRdmaGrantCacheBytes) {
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

Buffer ZeroedGrantBlock(size_t size) {
  if (size < kMapFrom) {
    auto* block = new (std::nothrow) std::byte[std::max<size_t>(size, 1)]();
    if (block == nullptr) return Buffer();
    return Buffer(
        block, size, [](void*, std::byte* b) noexcept { delete[] b; }, nullptr);
  }
  const size_t capacity = std::bit_ceil(size);
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
  if (block != nullptr) {
    // Only `size` bytes are ever granted and handed out; the rest of the
    // capacity stays unreachable.
    std::memset(block, 0, size);
  } else {
    block = mmap(nullptr, capacity, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (block == MAP_FAILED) return Buffer();
  }
  return Buffer(static_cast<std::byte*>(block), size, &Release,
                reinterpret_cast<void*>(capacity));
}

size_t CachedGrantBytes() {
  Cache& cache = TheCache();
  std::lock_guard lock(cache.mu);
  return cache.bytes;
}

}  // namespace rdmarpc::transport::rdma
