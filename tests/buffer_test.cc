// Buffer::Split: two owners of one block, released once, by the last.
#include "rdmarpc/buffer.h"

#include <catch2/catch_test_macros.hpp>
#include <cstddef>
#include <string_view>
#include <thread>

namespace rdmarpc {
namespace {

struct Releases {
  int count = 0;
  std::byte* block = nullptr;
};

void CountRelease(void* context, std::byte* block) noexcept {
  auto* releases = static_cast<Releases*>(context);
  ++releases->count;
  releases->block = block;
}

Buffer Tracked(std::string& bytes, Releases& releases) {
  return Buffer(reinterpret_cast<std::byte*>(bytes.data()), bytes.size(),
                &CountRelease, &releases);
}

TEST_CASE("Split: each half sees its bytes; the block goes with the last") {
  std::string bytes = "headtail";
  Releases releases;
  Buffer tail = Tracked(bytes, releases);
  Buffer head = tail.Split(4);
  CHECK(head.view() == "head");
  CHECK(tail.view() == "tail");

  SECTION("head released first") {
    head.Reset();
    CHECK(releases.count == 0);
    CHECK(tail.view() == "tail");
    tail.Reset();
  }
  SECTION("tail released first") {
    tail.Reset();
    CHECK(releases.count == 0);
    CHECK(head.view() == "head");
    head.Reset();
  }
  CHECK(releases.count == 1);
  CHECK(releases.block == reinterpret_cast<std::byte*>(bytes.data()));
}

TEST_CASE("Split: a narrowed window splits within the window") {
  std::string bytes = "xxabcdefyy";
  Releases releases;
  Buffer buffer = Tracked(bytes, releases);
  buffer.RemovePrefix(2);
  buffer.Truncate(6);
  Buffer head = buffer.Split(2);
  CHECK(head.view() == "ab");
  CHECK(buffer.view() == "cdef");
  // A half splits again; the block still goes once.
  Buffer middle = buffer.Split(1);
  CHECK(middle.view() == "c");
  CHECK(buffer.view() == "def");
  head.Reset();
  buffer.Reset();
  CHECK(releases.count == 0);
  middle.Reset();
  CHECK(releases.count == 1);
  CHECK(releases.block == reinterpret_cast<std::byte*>(bytes.data()));
}

TEST_CASE("Split: at either end, one half is empty") {
  Buffer whole = Buffer::CopyOf(std::string_view("abc"));
  Buffer none = whole.Split(0);
  CHECK(none.empty());
  CHECK(whole.view() == "abc");
  Buffer all = whole.Split(3);
  CHECK(all.view() == "abc");
  CHECK(whole.empty());
}

TEST_CASE("Split: a borrowed window splits without an owner") {
  const std::string_view bytes = "borrowed";
  Buffer tail = Buffer::Borrow(std::as_bytes(std::span(bytes)));
  Buffer head = tail.Split(3);
  CHECK(head.view() == "bor");
  CHECK(tail.view() == "rowed");
}

TEST_CASE("Split: halves released on two threads release the block once") {
  for (int i = 0; i < 200; ++i) {
    std::string bytes = "0123456789";
    Releases releases;
    Buffer tail = Tracked(bytes, releases);
    Buffer head = tail.Split(5);
    std::thread other([&head] { head.Reset(); });
    tail.Reset();
    other.join();
    REQUIRE(releases.count == 1);
  }
}

}  // namespace
}  // namespace rdmarpc
