// Grant blocks are zero-filled whether fresh or reused.
#include "transport/rdma/grant_memory.h"

#include <algorithm>
#include <catch2/catch_test_macros.hpp>
#include <cstring>

#include "base/large_block.h"

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
  REQUIRE(CachedLargeBlockBytes() >= (2u << 20));
  // A smaller request of the same class gets the same memory, zeroed.
  Buffer again = ZeroedGrantBlock((1 << 20) + 7);
  CHECK(again.data() == first_address);
  CHECK(again.size() == (1 << 20) + 7);
  CHECK(AllZero(again));
}

TEST_CASE("a grant block reused after an unzeroed frame is zeroed") {
  // Received tcp frames share the cache and are not zeroed: a grant must
  // never see what one of them held.
  std::byte* first_address = nullptr;
  {
    Buffer frame = LargeBlock(200 * 1024, BlockFill::kAnything);
    REQUIRE(frame.size() == 200 * 1024);
    first_address = frame.data();
    std::memset(frame.data(), 0xcd, frame.size());
  }
  Buffer grant = ZeroedGrantBlock(150 * 1024);  // Same class, 256 KiB.
  CHECK(grant.data() == first_address);
  CHECK(AllZero(grant));
}

TEST_CASE("small grant blocks come from the heap, zeroed") {
  Buffer block = ZeroedGrantBlock(100);
  REQUIRE(block.size() == 100);
  CHECK(AllZero(block));
}

}  // namespace
}  // namespace rdmarpc::transport::rdma
