// Large blocks are reused by size class, the cache is bounded, and the pool
// hands out large blocks for large requests.
#include "base/large_block.h"

#include <catch2/catch_test_macros.hpp>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "base/buffer_pool.h"
#include "rdmarpc/tunables.h"

namespace rdmarpc {
namespace {

TEST_CASE("a released large block serves the next request of its class") {
  std::byte* first_address = nullptr;
  const size_t before = CachedLargeBlockBytes();
  {
    Buffer block = LargeBlock(600 * 1024, BlockFill::kAnything);
    REQUIRE(block.size() == 600 * 1024);
    first_address = block.data();
    std::memset(block.data(), 1, block.size());  // All of it is writable.
  }
  CHECK(CachedLargeBlockBytes() == before + (1u << 20));
  Buffer again = LargeBlock(900 * 1024, BlockFill::kAnything);  // Same class.
  CHECK(again.data() == first_address);
  CHECK(CachedLargeBlockBytes() == before);
  Buffer other = LargeBlock(3 << 20, BlockFill::kAnything);  // Another class.
  CHECK(other.data() != first_address);
}

TEST_CASE("the cache keeps at most kLargeBlockCacheBytes") {
  const size_t size = 32u << 20;
  std::vector<Buffer> blocks;
  const size_t count = tunables::kLargeBlockCacheBytes / size + 2;
  for (size_t i = 0; i < count; ++i) {
    blocks.push_back(LargeBlock(size, BlockFill::kAnything));
    REQUIRE(blocks.back().size() == size);
  }
  blocks.clear();  // All released: the cache keeps what fits.
  CHECK(CachedLargeBlockBytes() <= tunables::kLargeBlockCacheBytes);
  CHECK(CachedLargeBlockBytes() >= tunables::kLargeBlockCacheBytes - size);
}

TEST_CASE("PooledBuffer gives large requests a reusable large block") {
  const size_t before = CachedLargeBlockBytes();
  std::byte* first_address = nullptr;
  {
    Buffer block = PooledBuffer(kLargeBlockMin);
    REQUIRE(block.size() == kLargeBlockMin);
    first_address = block.data();
  }
  CHECK(CachedLargeBlockBytes() == before + kLargeBlockMin);
  Buffer again = PooledBuffer(kLargeBlockMin);
  CHECK(again.data() == first_address);
  CHECK(CachedLargeBlockBytes() == before);
}

// A released block is kept for the thread that released it: another thread
// does not get it, and that thread does. This is for latency: through one
// shared cache, the blocks of an echo's client and server would move between
// their cores on every call.
TEST_CASE("a block stays with the thread that released it") {
  const size_t size = 100 * 1024;
  std::promise<std::byte*> released;
  std::promise<void> looked;
  std::promise<std::byte*> reused;
  std::thread other([&] {
    std::byte* address = nullptr;
    {
      Buffer block = LargeBlock(size, BlockFill::kAnything);
      address = block.data();
    }
    released.set_value(address);
    looked.get_future().wait();
    Buffer again = LargeBlock(size, BlockFill::kAnything);
    reused.set_value(again.data());
  });
  std::byte* const theirs = released.get_future().get();
  {
    Buffer mine = LargeBlock(size, BlockFill::kAnything);
    CHECK(mine.data() != theirs);
  }
  looked.set_value();
  CHECK(reused.get_future().get() == theirs);
  other.join();
}

}  // namespace
}  // namespace rdmarpc
