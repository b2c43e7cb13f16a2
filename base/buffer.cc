#include "rdmarpc/buffer.h"

#include <atomic>
#include <cassert>
#include <cstring>

namespace rdmarpc {
namespace {

void DeleteBlock(void* /*context*/, std::byte* block) noexcept {
  delete[] block;
}

// The two halves of a split block share one of these; the last to go runs
// the block's own release hook.
struct SplitBlock {
  std::atomic<int> owners{2};
  Buffer::ReleaseFn release;
  void* context;
};

void ReleaseSplitHalf(void* context, std::byte* block) noexcept {
  auto* shared = static_cast<SplitBlock*>(context);
  if (shared->owners.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    shared->release(shared->context, block);
    delete shared;
  }
}

}  // namespace

Buffer Buffer::Split(size_t n) {
  assert(n <= size_);
  Buffer head;
  head.block_ = block_;
  head.data_ = data_;
  head.size_ = n;
  if (release_ != nullptr) {
    auto* shared = new SplitBlock{.release = release_, .context = context_};
    release_ = head.release_ = &ReleaseSplitHalf;
    context_ = head.context_ = shared;
  }
  RemovePrefix(n);
  return head;
}

Buffer Buffer::Allocate(size_t size) {
  if (size == 0) return Buffer();
  return Buffer(new std::byte[size], size, &DeleteBlock, nullptr);
}

Buffer Buffer::CopyOf(std::span<const std::byte> bytes) {
  Buffer buffer = Allocate(bytes.size());
  if (!bytes.empty()) std::memcpy(buffer.data(), bytes.data(), bytes.size());
  return buffer;
}

Buffer Buffer::CopyOf(std::string_view bytes) {
  return CopyOf(std::as_bytes(std::span(bytes.data(), bytes.size())));
}

Buffer Buffer::Borrow(std::span<const std::byte> bytes) noexcept {
  // Never written through: the non-const pointer only satisfies the layout.
  return Buffer(const_cast<std::byte*>(bytes.data()), bytes.size(), nullptr,
                nullptr);
}

}  // namespace rdmarpc
