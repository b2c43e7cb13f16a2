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

// As std::memcpy(dst, src, n): the ranges must not overlap.
[[gnu::always_inline]] inline void CopyBytes(void* dst, const void* src,
                                             size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (n > 64) {
    std::memcpy(d, s, n);
    return;
  }
  // Every load of a case comes before its stores; sizes are constants, so
  // each memcpy below is one load or one store.
  if (n >= 16) {
    // 16 to 64: the first and last 16 bytes, and past 32 the 16 after the
    // first and the 16 before the last (they overlap as n requires).
    unsigned char head[16], tail[16];
    std::memcpy(head, s, 16);
    std::memcpy(tail, s + n - 16, 16);
    if (n > 32) {
      unsigned char second[16], third[16];
      std::memcpy(second, s + 16, 16);
      std::memcpy(third, s + n - 32, 16);
      std::memcpy(d + 16, second, 16);
      std::memcpy(d + n - 32, third, 16);
    }
    std::memcpy(d, head, 16);
    std::memcpy(d + n - 16, tail, 16);
  } else if (n >= 8) {
    uint64_t head, tail;
    std::memcpy(&head, s, 8);
    std::memcpy(&tail, s + n - 8, 8);
    std::memcpy(d, &head, 8);
    std::memcpy(d + n - 8, &tail, 8);
  } else if (n >= 4) {
    uint32_t head, tail;
    std::memcpy(&head, s, 4);
    std::memcpy(&tail, s + n - 4, 4);
    std::memcpy(d, &head, 4);
    std::memcpy(d + n - 4, &tail, 4);
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = s[i];
  }
}

}  // namespace rdmarpc

#endif  // RDMARPC_BASE_COPY_BYTES_H_
