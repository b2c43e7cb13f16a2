// Buffer: an owned, contiguous run of bytes with an explicit release hook.
//
// Every byte that crosses a transport is held in a Buffer, so ownership is
// never implicit: the hook says who gets the memory back when the last user is
// done with it (the heap, a pool, a block cache, a grant's landing block, or
// a user's registered region that may be reused). A Buffer is a window into its
// block; narrowing the window (RemovePrefix, Truncate) does not change what is
// released.
#ifndef RDMARPC_BUFFER_H_
#define RDMARPC_BUFFER_H_

#include <cstddef>
#include <span>
#include <string_view>
#include <utility>

namespace rdmarpc {

class Buffer {
 public:
  // Called once with the block's start when the Buffer is destroyed.
  using ReleaseFn = void (*)(void* context, std::byte* block) noexcept;

  Buffer() noexcept = default;
  Buffer(std::byte* block, size_t size, ReleaseFn release,
         void* context) noexcept
      : block_(block),
        data_(block),
        size_(size),
        release_(release),
        context_(context) {}

  // Uninitialised heap bytes.
  static Buffer Allocate(size_t size);
  static Buffer CopyOf(std::span<const std::byte> bytes);
  static Buffer CopyOf(std::string_view bytes);
  // A window on memory the caller keeps alive and unchanged until every copy
  // of this Buffer is gone; nothing is released.
  static Buffer Borrow(std::span<const std::byte> bytes) noexcept;

  // Takes the fields as they are: a new Buffer has nothing to release.
  Buffer(Buffer&& other) noexcept
      : block_(std::exchange(other.block_, nullptr)),
        data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        release_(std::exchange(other.release_, nullptr)),
        context_(std::exchange(other.context_, nullptr)) {}
  // Always inline, as Reset() is: code added elsewhere in a file once made
  // GCC call an out-of-line copy of it on the receive path, at 35
  // instructions a frame.
  [[gnu::always_inline]] Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      Reset();
      block_ = std::exchange(other.block_, nullptr);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      release_ = std::exchange(other.release_, nullptr);
      context_ = std::exchange(other.context_, nullptr);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Reset(); }

  std::byte* data() noexcept { return data_; }
  const std::byte* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::span<std::byte> span() noexcept { return {data_, size_}; }
  std::span<const std::byte> span() const noexcept { return {data_, size_}; }
  std::string_view view() const noexcept {
    return {reinterpret_cast<const char*>(data_), size_};
  }

  // Narrow the window; `n` must not exceed size().
  void RemovePrefix(size_t n) noexcept {
    data_ += n;
    size_ -= n;
  }
  void Truncate(size_t n) noexcept { size_ = n < size_ ? n : size_; }

  // Cuts the window in two without copying: returns its first `n` bytes
  // (`n` at most size()) as a Buffer of their own and keeps the rest. The
  // block is released once both are gone. Costs one small allocation when
  // the block has a release hook (a shared count); none for a borrowed one.
  Buffer Split(size_t n);

  // Releases the block now; the Buffer becomes empty. Always inline: the hot
  // path destroys and moves many empty Buffers, and GCC's heuristics stopped
  // inlining it into TcpConnection::Send after unrelated changes there
  // (docs/benchmarks.md has what that cost).
  [[gnu::always_inline]] void Reset() noexcept {
    if (release_ != nullptr) release_(context_, block_);
    block_ = data_ = nullptr;
    size_ = 0;
    release_ = nullptr;
    context_ = nullptr;
  }

 private:
  std::byte* block_ = nullptr;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  ReleaseFn release_ = nullptr;
  void* context_ = nullptr;
};

}  // namespace rdmarpc

#endif  // RDMARPC_BUFFER_H_
