// Grant blocks are zero-filled whether fresh or reused, a released block is
// reused for the next request of its size class, and the cache is bounded.
#include "transport/rdma/grant_memory.h"

#include <algorithm>
#include <catch2/catch_test_macros.hpp>
#include <cstring>
#include <vector>

#include "base/tunables.h"

namespace rdmarpc::transport::rdma {
namespace {

bool AllZero(const Buffer& block) {
  return std::all_of(block.data(), block.data() + block.size(),
                     [](std::byte b) { return b == std::byte{0}; });
}

TEST_CASE("a reused grant block is zeroed again before it is handed out") {
  const size_t size = (1 << 20) + 100;  // Capacity class 2 MiB.
  std::byte* first_address = nullptr;
  {
    Buffer block = ZeroedGrantBlock(size);
    REQUIRE(block.size() == size);
    REQUIRE(AllZero(block));
    first_address = block.data();
    std::memset(block.data(), 0xab, block.size());  // What a peer wrote.
  }
  REQUIRE(CachedGrantBytes() >= (2u << 20));
  // A smaller request of the same class gets the same memory, zeroed.
  Buffer again = ZeroedGrantBlock((1 << 20) + 7);
  CHECK(again.data() == first_address);
  CHECK(again.size() == (1 << 20) + 7);
  CHECK(AllZero(again));
}

TEST_CASE("small grant blocks come from the heap, zeroed") {
  Buffer block = ZeroedGrantBlock(100);
  REQUIRE(block.size() == 100);
  CHECK(AllZero(block));
}

TEST_CASE("the cache keeps at most kRdmaGrantCacheBytes") {
  const size_t size = 32u << 20;
  std::vector<Buffer> blocks;
  const size_t count = tunables::kRdmaGrantCacheBytes / size + 2;
  for (size_t i = 0; i < count; ++i) {
    blocks.push_back(ZeroedGrantBlock(size));
    REQUIRE(blocks.back().size() == size);
  }
  blocks.clear();  // All released: the cache keeps what fits.
  CHECK(CachedGrantBytes() <= tunables::kRdmaGrantCacheBytes);
  CHECK(CachedGrantBytes() >= tunables::kRdmaGrantCacheBytes - size);
}

}  // namespace
}  // namespace rdmarpc::transport::rdma
