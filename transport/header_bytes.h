// HeaderBytes: the encoded call header of an outgoing frame.
//
// Every call sends a header of a few dozen bytes. Keeping it inside the frame
// saves taking and releasing a pooled block per frame; a header too large
// for the frame (long names, a long status message) is a Buffer instead.
// Either way data() is the bytes. The inline bytes move with the frame, so
// code that keeps a pointer to them across a move of the frame must first
// call MoveOutOfLine().
#ifndef RDMARPC_TRANSPORT_HEADER_BYTES_H_
#define RDMARPC_TRANSPORT_HEADER_BYTES_H_

#include <array>
#include <cassert>
#include <cstddef>
#include <cstring>
#include <span>
#include <string_view>
#include <utility>

#include "base/buffer_pool.h"
#include "rdmarpc/buffer.h"
#include "rdmarpc/tunables.h"

namespace rdmarpc::transport {

class HeaderBytes {
 public:
  static constexpr size_t kInlineCapacity = tunables::kInlineHeaderCapacity;

  HeaderBytes() noexcept = default;
  // Takes bytes already encoded elsewhere (tests, raw frames).
  HeaderBytes(Buffer bytes) noexcept  // NOLINT: implicit, as an assignment.
      : buffer_(std::move(bytes)) {}

  // Copies the inline array whole when it is in use: a fixed-size copy is a
  // few vector moves, cheaper than a memcpy of the used length.
  HeaderBytes(HeaderBytes&& other) noexcept
      : buffer_(std::move(other.buffer_)),
        inline_size_(std::exchange(other.inline_size_, 0)) {
    if (inline_size_ != 0) CopyInline(other);
  }
  HeaderBytes& operator=(HeaderBytes&& other) noexcept {
    if (this != &other) {
      buffer_ = std::move(other.buffer_);
      inline_size_ = std::exchange(other.inline_size_, 0);
      if (inline_size_ != 0) CopyInline(other);
    }
    return *this;
  }
  HeaderBytes(const HeaderBytes&) = delete;
  HeaderBytes& operator=(const HeaderBytes&) = delete;

  // Room for at most `max_size` bytes: inside the frame when they fit, else
  // a pooled block. Write them, then Commit how many were written.
  std::byte* Prepare(size_t max_size) {
    buffer_.Reset();
    inline_size_ = 0;
    if (max_size <= kInlineCapacity) return inline_.data();
    buffer_ = PooledBuffer(max_size);
    return buffer_.data();
  }
  void Commit(size_t size) noexcept {
    if (buffer_.empty()) {
      assert(size <= kInlineCapacity);
      inline_size_ = static_cast<uint32_t>(size);
    } else {
      buffer_.Truncate(size);
    }
  }

  // Prepare and Commit in one, for a header of exactly `kSize` bytes known
  // to fit inline, in a HeaderBytes nothing was prepared in yet (a new
  // frame's): no check, no reset. Returns where to write the `kSize` bytes.
  template <size_t kSize>
  std::byte* CommitInline() noexcept {
    static_assert(kSize > 0 && kSize <= kInlineCapacity);
    assert(buffer_.empty() && inline_size_ == 0);
    inline_size_ = static_cast<uint32_t>(kSize);
    return inline_.data();
  }

  // Moves inline bytes to a pooled block, whose address no move of the
  // frame changes (the RDMA transport's write plans point into it).
  void MoveOutOfLine() {
    if (inline_size_ == 0) return;
    buffer_ = PooledBuffer(inline_size_);
    std::memcpy(buffer_.data(), inline_.data(), inline_size_);
    inline_size_ = 0;
  }

  const std::byte* data() const noexcept {
    return inline_size_ != 0 ? inline_.data() : buffer_.data();
  }
  size_t size() const noexcept {
    return inline_size_ != 0 ? inline_size_ : buffer_.size();
  }
  bool empty() const noexcept { return size() == 0; }
  std::span<const std::byte> span() const noexcept { return {data(), size()}; }
  std::string_view view() const noexcept {
    return {reinterpret_cast<const char*>(data()), size()};
  }
  bool is_inline() const noexcept { return inline_size_ != 0; }

 private:
  void CopyInline(const HeaderBytes& other) noexcept {
    std::memcpy(inline_.data(), other.inline_.data(), kInlineCapacity);
  }

  Buffer buffer_;  // The bytes when they are not inline.
  uint32_t inline_size_ = 0;
  alignas(16) std::array<std::byte, kInlineCapacity> inline_;
};

}  // namespace rdmarpc::transport

#endif  // RDMARPC_TRANSPORT_HEADER_BYTES_H_
