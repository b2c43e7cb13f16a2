#include "base/buffer.h"

#include <cstring>

namespace rdmarpc {
namespace {

void DeleteBlock(void* /*context*/, std::byte* block) noexcept {
  delete[] block;
}

}  // namespace

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
