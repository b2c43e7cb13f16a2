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

Buffer ZeroedGrantBlock(size_t size) {
  if (size >= kLargeBlockMin) return LargeBlock(size, BlockFill::kZeroed);
  auto* block = new (std::nothrow) std::byte[std::max<size_t>(size, 1)]();
  if (block == nullptr) return Buffer();
  return Buffer(
      block, size, [](void*, std::byte* b) noexcept { delete[] b; }, nullptr);
}

Buffer FrameBlock(size_t size) {
  if (size >= kLargeBlockMin) return LargeBlock(size, BlockFill::kAnything);
  auto* block = new (std::nothrow) std::byte[std::max<size_t>(size, 1)];
  if (block == nullptr) return Buffer();
  return Buffer(
      block, size, [](void*, std::byte* b) noexcept { delete[] b; }, nullptr);
}

}  // namespace rdmarpc::transport::rdma
