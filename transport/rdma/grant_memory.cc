#include "transport/rdma/grant_memory.h"

#include <algorithm>
#include <new>

#include "base/large_block.h"

namespace rdmarpc::transport::rdma {

Buffer ZeroedGrantBlock(size_t size) {
  if (size >= kLargeBlockMin) return LargeBlock(size, BlockFill::kZeroed);
  auto* block = new (std::nothrow) std::byte[std::max<size_t>(size, 1)]();
  if (block == nullptr) return Buffer();
  return Buffer(
      block, size, [](void*, std::byte* b) noexcept { delete[] b; }, nullptr);
}

}  // namespace rdmarpc::transport::rdma
