// CopyBytes: memcpy for the small copies on the call path (a frame's header
// and payload into a send slot or a coalescing block, a received frame out of
// its receive buffer), inline. Up to 64 bytes it is at most four overlapping
// 16-byte loads and stores, chosen by two compares; a call to the C
// library's memcpy costs the call and its own dispatch on the size, about 15
// instructions a copy more (tools/bench-cpu). Larger copies call memcpy.
#ifndef RDMARPC_BASE_COPY_BYTES_H_
#define RDMARPC_BASE_COPY_BYTES_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rdmarpc {

namespace copy_bytes_internal {
// The first and the last W bytes of [0, n), n >= W (they overlap as n
// requires). W is a constant: each memcpy is one load or one store.
template <size_t W>
[[gnu::always_inline]] inline void CopyEnds(unsigned char* d,
                                            const unsigned char* s, size_t n) {
  unsigned char head[W], tail[W];
  std::memcpy(head, s, W);
  std::memcpy(tail, s + n - W, W);
  std::memcpy(d, head, W);
  std::memcpy(d + n - W, tail, W);
}
}  // namespace copy_bytes_internal

// As std::memcpy(dst, src, n): the ranges must not overlap.
[[gnu::always_inline]] inline void CopyBytes(void* dst, const void* src,
                                             size_t n) {
  using copy_bytes_internal::CopyEnds;
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (n > 64) {
    std::memcpy(d, s, n);
  } else if (n >= 16) {
    // Past 32, also the 16 after the first and the 16 before the last: the
    // ends of [16, n - 16), which may be shorter than 16 (then they reach
    // into the outer ends, with the same bytes).
    if (n > 32) CopyEnds<16>(d + 16, s + 16, n - 32);
    CopyEnds<16>(d, s, n);
  } else if (n >= 8) {
    CopyEnds<8>(d, s, n);
  } else if (n >= 4) {
    CopyEnds<4>(d, s, n);
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = s[i];
  }
}

}  // namespace rdmarpc

#endif  // RDMARPC_BASE_COPY_BYTES_H_
