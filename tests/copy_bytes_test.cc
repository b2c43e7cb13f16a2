// CopyBytes takes a different path for each range of lengths up to 64 and
// memcpy beyond: every length, at every alignment, must copy exactly its
// bytes and touch nothing around them.
#include "base/copy_bytes.h"

#include <catch2/catch_test_macros.hpp>
#include <cstddef>
#include <vector>

namespace rdmarpc {
namespace {

TEST_CASE("CopyBytes: every length up to 130, at every alignment") {
  constexpr size_t kMax = 130;
  constexpr size_t kPad = 40;  // Guard bytes around the destination.
  std::vector<std::byte> src(kMax + 16);
  for (size_t i = 0; i < src.size(); ++i) {
    src[i] = std::byte(static_cast<unsigned char>(i * 7 + 3));
  }
  for (size_t n = 0; n <= kMax; ++n) {
    for (size_t src_off = 0; src_off < 8; ++src_off) {
      for (size_t dst_off = 0; dst_off < 8; ++dst_off) {
        std::vector<std::byte> dst(kPad + dst_off + n + kPad, std::byte{0xee});
        CopyBytes(dst.data() + kPad + dst_off, src.data() + src_off, n);
        bool ok = true;
        for (size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= kPad + dst_off && i < kPad + dst_off + n;
          const std::byte want =
              inside ? src[src_off + (i - kPad - dst_off)] : std::byte{0xee};
          ok = ok && dst[i] == want;
        }
        INFO("n " << n << " src offset " << src_off << " dst offset "
                  << dst_off);
        REQUIRE(ok);
      }
    }
  }
}

TEST_CASE("CopyBytes: a zero-length copy accepts null pointers") {
  CopyBytes(nullptr, nullptr, 0);  // As frames with no header or payload do.
  SUCCEED();
}

}  // namespace
}  // namespace rdmarpc
