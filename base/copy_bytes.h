// CopyBytes: memcpy for the short, variable-length copies of the hot path.
//
// A frame's prefix, call header and small payload are copied on every call,
// and each is a few dozen bytes whose length the compiler cannot see, so
// std::memcpy becomes a call into libc through the PLT. Under emulation
// (the Soft-RoCE VM) that call and its indirect jump cost about 28 ns for
// 16 bytes, several times the copy itself. Up to 64 bytes, this copies inline
// with two possibly overlapping loads and stores of the widest size that
// fits; longer copies go to memcpy.
#ifndef RDMARPC_BASE_COPY_BYTES_H_
#define RDMARPC_BASE_COPY_BYTES_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rdmarpc {

namespace copy_bytes_internal {
// Copies the first and the last N bytes of [src, src + n), N <= n <= 2N:
// together they cover it. All loads come before the stores.
template <size_t N>
[[gnu::always_inline]] inline void CopyEnds(std::byte* dst,
                                            const std::byte* src, size_t n) {
  unsigned char head[N], tail[N];
  std::memcpy(head, src, N);
  std::memcpy(tail, src + n - N, N);
  std::memcpy(dst, head, N);
  std::memcpy(dst + n - N, tail, N);
}
}  // namespace copy_bytes_internal

// As std::memcpy(dst, src, n): the ranges must not overlap.
[[gnu::always_inline]] inline void CopyBytes(void* dst, const void* src,
                                             size_t n) {
  using copy_bytes_internal::CopyEnds;
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  if (n >= 16) {
    if (n <= 32) return CopyEnds<16>(d, s, n);
    if (n <= 64) return CopyEnds<32>(d, s, n);
    std::memcpy(d, s, n);
  } else if (n >= 8) {
    CopyEnds<8>(d, s, n);
  } else if (n >= 4) {
    CopyEnds<4>(d, s, n);
  } else if (n >= 2) {
    CopyEnds<2>(d, s, n);
  } else if (n == 1) {
    *d = *s;
  }
}

}  // namespace rdmarpc

#endif  // RDMARPC_BASE_COPY_BYTES_H_
