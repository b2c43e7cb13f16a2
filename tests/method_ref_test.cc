// MethodId, the id a request can name its method by, and MethodIndex, the
// server's table of methods by id.
#include "rdmarpc/method_ref.h"

#include <catch2/catch_test_macros.hpp>

#include "rpc/wire/method_index.h"

namespace rdmarpc::rpc {
namespace {

// The wire format fixes the function: 64-bit FNV-1a of "service/method".
// Expected values computed apart from this code (Python, from the FNV spec).
static_assert(MethodId("rdmarpc.bench.Bench", "Echo") == 0x83ed70a7da487db4u);
static_assert(MethodId("", "") == 0xaf63a24c860189feu);  // FNV-1a of "/".

TEST_CASE("method id: a MethodRef carries its names and their id") {
  constexpr MethodRef kSay("pkg.Echo", "Say");
  static_assert(kSay.id() == MethodId("pkg.Echo", "Say"));
  CHECK(kSay.service() == "pkg.Echo");
  CHECK(kSay.method() == "Say");
  CHECK(kSay.id() != 0);
}

TEST_CASE("method id: where the names split changes the id") {
  CHECK(MethodId("a.b", "c") != MethodId("a", "b.c"));
  CHECK(MethodId("pkg.Echo", "Say") != MethodId("pkg.Echo", "Sax"));
  CHECK(MethodId("pkg.Echo", "Say") != MethodId("pkg.Echa", "Say"));
}

TEST_CASE("method index: ids find their entries; a shared id finds none") {
  MethodIndex<int> index;
  int a = 1, b = 2, c = 3;
  MethodIndex<int>::Found found;
  CHECK(index.Add(10, &a));
  CHECK(index.Add(20, &b));
  CHECK(index.Add(10, &a));  // The same entry again is no collision.
  CHECK(index.Find(10, &found) == &a);
  CHECK(found == MethodIndex<int>::Found::kOne);
  CHECK(index.Find(30, &found) == nullptr);
  CHECK(found == MethodIndex<int>::Found::kNone);

  // A second entry with id 20: neither is found by it any more, and a third
  // does not make it unambiguous.
  CHECK_FALSE(index.Add(20, &c));
  CHECK(index.Find(20, &found) == nullptr);
  CHECK(found == MethodIndex<int>::Found::kAmbiguous);
  CHECK_FALSE(index.Add(20, &b));
  CHECK(index.Find(20, &found) == nullptr);
  CHECK(found == MethodIndex<int>::Found::kAmbiguous);
  CHECK(index.Find(10, &found) == &a);  // Others are unaffected.

  index.Clear();
  CHECK(index.Find(10, &found) == nullptr);
  CHECK(found == MethodIndex<int>::Found::kNone);
}

}  // namespace
}  // namespace rdmarpc::rpc
