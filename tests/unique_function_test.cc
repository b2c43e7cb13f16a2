// UniqueFunction stores a small callable inline (with its own move and
// destructor) and a large one on the heap, and must move, call and destroy
// each exactly as the callable asks.
#include "rdmarpc/unique_function.h"

#include <array>
#include <catch2/catch_test_macros.hpp>
#include <iterator>
#include <memory>
#include <string>
#include <utility>

namespace rdmarpc {
namespace {

// Counts its live copies, so a test sees each destroyed exactly once, and
// its moves.
struct Tracked {
  explicit Tracked(int* live, int* moves = nullptr) : live(live), moves(moves) {
    ++*live;
  }
  Tracked(Tracked&& other) noexcept : live(other.live), moves(other.moves) {
    ++*live;
    if (moves != nullptr) ++*moves;
  }
  Tracked(const Tracked&) = delete;
  ~Tracked() { --*live; }
  int* live;
  int* moves;
};

// Moves `f` through a move-constructed and a move-assigned function, as a
// call's handler moves through the channel and its call table.
template <typename Sig>
UniqueFunction<Sig> Relay(UniqueFunction<Sig> f) {
  UniqueFunction<Sig> constructed(std::move(f));
  CHECK_FALSE(f);  // NOLINT: a moved-from function is empty.
  UniqueFunction<Sig> assigned;
  assigned = std::move(constructed);
  CHECK_FALSE(constructed);  // NOLINT
  return assigned;
}

TEST_CASE(
    "UniqueFunction: a callable capturing a pointer and a value survives its "
    "moves") {
  int a = 3;
  long b = 4;
  const int* where = &a;
  UniqueFunction<long(int)> f = [where, b](int x) { return *where * x + b; };
  auto g = Relay(std::move(f));
  REQUIRE(g);
  CHECK(g(5) == 19);
  a = 10;
  CHECK(g(1) == 14);  // Still reads through the captured pointer.
}

TEST_CASE(
    "UniqueFunction: a callable that fills the inline storage moves "
    "whole") {
  struct Wide {
    long v[UniqueFunction<long()>::kInlineSize / sizeof(long)];
    long operator()() const {
      long sum = 0;
      for (long x : v) sum = sum * 3 + x;
      return sum;
    }
  };
  Wide w{};
  for (size_t i = 0; i < std::size(w.v); ++i) w.v[i] = static_cast<long>(i + 1);
  const long expected = w();
  auto g = Relay(UniqueFunction<long()>(w));
  CHECK(g() == expected);
}

TEST_CASE(
    "UniqueFunction: an inline callable with a destructor is destroyed "
    "once") {
  int live = 0;
  {
    UniqueFunction<int()> f = [t = Tracked(&live)] { return *t.live; };
    CHECK(live == 1);
    auto g = Relay(std::move(f));
    CHECK(live == 1);  // Every move destroyed its source.
    CHECK(g() == 1);
    g = nullptr;
    CHECK(live == 0);  // Assigning over it destroyed it.
    CHECK_FALSE(g);
  }
  CHECK(live == 0);
}

TEST_CASE(
    "UniqueFunction: a callable on the heap moves by pointer and is "
    "destroyed once") {
  int live = 0;
  int moves = 0;
  {
    std::string big(200, 'x');
    UniqueFunction<size_t()> f = [t = Tracked(&live, &moves), big,
                                  pad = std::array<char, 64>{}] {
      return big.size() + pad.size();
    };
    CHECK(live == 1);
    const int moves_to_store = moves;  // Into its heap block.
    auto g = Relay(std::move(f));
    CHECK(moves == moves_to_store);  // Only the pointer moved.
    CHECK(live == 1);
    CHECK(g() == 264);
  }
  CHECK(live == 0);
}

TEST_CASE("UniqueFunction: move-only callables and arguments") {
  auto owned = std::make_unique<int>(7);
  UniqueFunction<int(std::unique_ptr<int>)> f =
      [mine = std::move(owned)](std::unique_ptr<int> theirs) {
        return *mine + *theirs;
      };
  auto g = Relay(std::move(f));
  CHECK(g(std::make_unique<int>(5)) == 12);
}

}  // namespace
}  // namespace rdmarpc
