#include "transport/rdma/grant_memory.h"

#include <algorithm>
#include <atomic>
#include <new>

#include "base/large_block.h"

namespace rdmarpc::transport::rdma {

namespace {
std::atomic<uint64_t> granted_bytes{0};
}  // namespace

uint64_t GrantedBytes() {
  return granted_bytes.load(std::memory_order_relaxed);
}

GrantCharge::GrantCharge(uint64_t bytes) : bytes_(bytes) {
  granted_bytes.fetch_add(bytes, std::memory_order_relaxed);
}

GrantCharge& GrantCharge::operator=(GrantCharge&& other) noexcept {
  if (this != &other) {
    Release();
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void GrantCharge::Release() {
  granted_bytes.fetch_sub(std::exchange(bytes_, 0), std::memory_order_relaxed);
}

namespace {

// A large block, or a heap block below kLargeBlockMin; empty when memory is
// exhausted.
Buffer Block(size_t size, BlockFill fill) {
  if (size >= kLargeBlockMin) return LargeBlock(size, fill);
  const size_t bytes = std::max<size_t>(size, 1);
  auto* block = fill == BlockFill::kZeroed
                    ? new (std::nothrow) std::byte[bytes]()
                    : new (std::nothrow) std::byte[bytes];
  if (block == nullptr) return Buffer();
  return Buffer(
      block, size, [](void*, std::byte* b) noexcept { delete[] b; }, nullptr);
}

}  // namespace

Buffer ZeroedGrantBlock(size_t size) { return Block(size, BlockFill::kZeroed); }

Buffer FrameBlock(size_t size) { return Block(size, BlockFill::kAnything); }

}  // namespace rdmarpc::transport::rdma
