// CopyBytes (base/copy_bytes.h): every size up to past its inline limit, at
// every alignment of source and destination, copies exactly its bytes and
// touches nothing around them.
#include "base/copy_bytes.h"

#include <array>
#include <catch2/catch_test_macros.hpp>
#include <cstddef>

namespace rdmarpc {
namespace {

TEST_CASE("CopyBytes: each size and alignment, nothing outside") {
  constexpr size_t kMax = 160;  // Past the 64 copied inline.
  constexpr size_t kGuard = 32;
  std::array<unsigned char, kMax + 2 * kGuard> source{};
  for (size_t i = 0; i < source.size(); ++i) {
    source[i] = static_cast<unsigned char>(i * 7 + 1);
  }
  for (size_t n = 0; n <= kMax; ++n) {
    for (size_t from = 0; from < 16; ++from) {
      for (size_t to = 0; to < 16; ++to) {
        std::array<unsigned char, kMax + 2 * kGuard> dest;
        dest.fill(0xee);
        CopyBytes(dest.data() + kGuard / 2 + to,
                  source.data() + kGuard / 2 + from, n);
        size_t wrong = 0;
        for (size_t i = 0; i < dest.size(); ++i) {
          const size_t at = kGuard / 2 + to;
          const unsigned char want = i >= at && i < at + n
                                         ? source[kGuard / 2 + from + (i - at)]
                                         : 0xee;
          wrong += dest[i] != want;
        }
        INFO("size " << n << ", source offset " << from << ", destination "
                     << to);
        REQUIRE(wrong == 0);
      }
    }
  }
}

}  // namespace
}  // namespace rdmarpc
