#include "transport/frame.h"

#include <catch2/catch_test_macros.hpp>
#include <cstring>
#include <string>

#include "rdmarpc/buffer.h"
#include "transport/connection.h"

namespace rdmarpc::transport {
namespace {

constexpr uint64_t kMax = 1 << 20;

TEST_CASE("Frame prefix: round-trips type and lengths") {
  const FramePrefix in{FrameType::kRpc, 77, 1234, 567890};
  const EncodedPrefix bytes = EncodeFramePrefix(in);
  const DecodedPrefix out = DecodeFramePrefix(bytes, kMax);
  REQUIRE(out.verdict == PrefixVerdict::kAccept);
  CHECK(out.prefix.type == FrameType::kRpc);
  CHECK(out.prefix.credits == 77);
  CHECK(out.prefix.header_size == 1234);
  CHECK(out.prefix.payload_size == 567890);
}

TEST_CASE("Frame prefix: layout is little-endian with the RRPC magic") {
  const EncodedPrefix bytes =
      EncodeFramePrefix({FrameType::kControl, 0, 0x01020304, 0x0a0b0c0d});
  CHECK(bytes[0] == std::byte{'R'});
  CHECK(bytes[3] == std::byte{'C'});
  CHECK(bytes[4] == std::byte{kFrameVersion});
  CHECK(bytes[5] == std::byte{1});
  CHECK(bytes[8] == std::byte{0x04});
  CHECK(bytes[11] == std::byte{0x01});
  CHECK(bytes[12] == std::byte{0x0d});
}

TEST_CASE("Frame prefix: the version announcement is an empty frame of ours") {
  const EncodedPrefix bytes = VersionAnnouncement();
  const DecodedPrefix out = DecodeFramePrefix(bytes, kMax);
  REQUIRE(out.verdict == PrefixVerdict::kAccept);
  CHECK(bytes[4] == std::byte{kFrameVersion});
  CHECK(out.prefix.type == FrameType::kControl);
  CHECK(out.prefix.header_size == 0);
  CHECK(out.prefix.payload_size == 0);
}

TEST_CASE("Frame prefix: malformed prefixes are rejected with a reason") {
  EncodedPrefix bytes = EncodeFramePrefix({FrameType::kRpc, 0, 10, 10});

  SECTION("bad magic") {
    bytes[0] = std::byte{'X'};
    const auto out = DecodeFramePrefix(bytes, kMax);
    CHECK(out.verdict == PrefixVerdict::kMalformed);
    CHECK(out.error.message().find("magic") != std::string::npos);
  }
  SECTION("another version: refused, naming both versions") {
    SECTION("older") { bytes[4] = std::byte{kFrameVersion - 1}; }
    SECTION("newer") { bytes[4] = std::byte{kFrameVersion + 1}; }
    const auto out = DecodeFramePrefix(bytes, kMax);
    CHECK(out.verdict == PrefixVerdict::kOtherVersion);
    CHECK(out.error.message() ==
          "the peer speaks rdmarpc frame version " +
              std::to_string(std::to_integer<int>(bytes[4])) +
              "; this build speaks version " + std::to_string(kFrameVersion));
  }
  SECTION("unknown type") {
    bytes[5] = std::byte{9};
    CHECK(DecodeFramePrefix(bytes, kMax).verdict == PrefixVerdict::kMalformed);
  }
  SECTION("credits decode; TCP rejects them") {
    bytes[6] = std::byte{0x34};
    bytes[7] = std::byte{0x12};
    const auto out = DecodeFramePrefix(bytes, kMax);
    CHECK(out.verdict == PrefixVerdict::kAccept);
    CHECK(out.prefix.credits == 0x1234);
  }
  SECTION("header too large") {
    bytes = EncodeFramePrefix(
        {FrameType::kRpc, 0, tunables::kMaxCallHeaderSize + 1, 0});
    CHECK(DecodeFramePrefix(bytes, kMax).verdict == PrefixVerdict::kMalformed);
  }
  SECTION("too short") {
    const auto out = DecodeFramePrefix(std::span(bytes).first(15), kMax);
    CHECK(out.verdict == PrefixVerdict::kMalformed);
  }
}

TEST_CASE("Frame prefix: an oversized payload is recoverable, not malformed") {
  const auto bytes = EncodeFramePrefix({FrameType::kRpc, 0, 8, kMax + 1});
  const auto out = DecodeFramePrefix(bytes, kMax);
  CHECK(out.verdict == PrefixVerdict::kPayloadTooLarge);
  CHECK(out.error.code() == StatusCode::kResourceExhausted);
  CHECK(out.prefix.payload_size == kMax + 1);
  CHECK(
      DecodeFramePrefix(EncodeFramePrefix({FrameType::kRpc, 0, 8, kMax}), kMax)
          .verdict == PrefixVerdict::kAccept);
}

TEST_CASE("Buffer: release hook runs once, windows do not change it") {
  int released = 0;
  std::byte storage[8] = {};
  {
    Buffer buffer(
        storage, sizeof(storage),
        [](void* counter, std::byte*) noexcept {
          ++*static_cast<int*>(counter);
        },
        &released);
    buffer.RemovePrefix(2);
    buffer.Truncate(3);
    CHECK(buffer.size() == 3);
    CHECK(buffer.data() == storage + 2);
    Buffer moved = std::move(buffer);
    CHECK(buffer.empty());
    CHECK(released == 0);
  }
  CHECK(released == 1);
}

// Buffers over storage[i] whose release is counted in count[i].
struct Released {
  int count[4] = {};
  std::byte storage[4][8] = {};
  Buffer Make(int index) {
    return Buffer(
        storage[index], sizeof(storage[index]),
        [](void* counter, std::byte*) noexcept {
          ++*static_cast<int*>(counter);
        },
        &count[index]);
  }
};

TEST_CASE("OutgoingFrame: a move takes the header and the slices in use") {
  Released released;
  OutgoingFrame frame;
  frame.header = released.Make(0);
  frame.AddPayload(released.Make(1));
  frame.AddPayload(released.Make(2));
  OutgoingFrame moved(std::move(frame));
  CHECK(moved.payload_slices() == 2);
  CHECK(moved.header.data() == released.storage[0]);
  CHECK(moved.payload[0].data() == released.storage[1]);
  CHECK(moved.payload[1].data() == released.storage[2]);
  CHECK(moved.payload_size() == 16);
  CHECK(frame.payload_slices() == 0);
  CHECK(frame.header.empty());
  CHECK(released.count[0] + released.count[1] + released.count[2] == 0);
}

TEST_CASE("OutgoingFrame: move-assigning over more slices releases the rest") {
  Released released;
  OutgoingFrame target;
  target.AddPayload(released.Make(0));
  target.AddPayload(released.Make(1));
  target.AddPayload(released.Make(2));
  OutgoingFrame source;
  source.AddPayload(released.Make(3));
  target = std::move(source);
  CHECK(target.payload_slices() == 1);
  CHECK(target.payload[0].data() == released.storage[3]);
  CHECK(released.count[0] == 1);
  CHECK(released.count[1] == 1);
  CHECK(released.count[2] == 1);
  CHECK(released.count[3] == 0);
  CHECK(source.payload_slices() == 0);
  target = OutgoingFrame();
  CHECK(released.count[3] == 1);
}

std::string Pattern(size_t size) {
  std::string out(size, '\0');
  for (size_t i = 0; i < size; ++i) out[i] = static_cast<char>('a' + i % 26);
  return out;
}

// Writes `text` through Prepare/Commit, as the RPC layer encodes a header.
void Write(HeaderBytes& header, std::string_view text, size_t max_size) {
  std::byte* out = header.Prepare(max_size);
  std::memcpy(out, text.data(), text.size());
  header.Commit(text.size());
}

TEST_CASE("HeaderBytes: a small header lives in the frame and moves with it") {
  const std::string text = Pattern(40);
  OutgoingFrame frame;
  Write(frame.header, text, HeaderBytes::kInlineCapacity);
  CHECK(frame.header.is_inline());
  CHECK(frame.header.view() == text);
  OutgoingFrame moved(std::move(frame));
  CHECK(moved.header.view() == text);
  CHECK(frame.header.empty());
  OutgoingFrame assigned;
  Write(assigned.header, "old", 3);
  assigned = std::move(moved);
  CHECK(assigned.header.view() == text);
  CHECK(moved.header.empty());
}

TEST_CASE("HeaderBytes: a header over the capacity is a pooled block") {
  const std::string text = Pattern(HeaderBytes::kInlineCapacity + 1);
  HeaderBytes header;
  // The bound decides, not the bytes written: a bound over the capacity
  // takes a block even for a short header.
  Write(header, "short", HeaderBytes::kInlineCapacity + 1);
  CHECK_FALSE(header.is_inline());
  CHECK(header.view() == "short");
  Write(header, text, text.size());
  CHECK_FALSE(header.is_inline());
  CHECK(header.view() == text);
  const std::byte* block = header.data();
  HeaderBytes moved(std::move(header));
  CHECK(moved.data() == block);  // The block moves, not its bytes.
  CHECK(moved.view() == text);
  // Back inside: a small header replaces the block.
  Write(moved, "tiny", 4);
  CHECK(moved.is_inline());
  CHECK(moved.view() == "tiny");
}

TEST_CASE("HeaderBytes: MoveOutOfLine gives the bytes an address moves keep") {
  const std::string text = Pattern(64);
  HeaderBytes header;
  Write(header, text, text.size());
  REQUIRE(header.is_inline());
  header.MoveOutOfLine();
  CHECK_FALSE(header.is_inline());
  CHECK(header.view() == text);
  const std::byte* address = header.data();
  HeaderBytes moved(std::move(header));
  CHECK(moved.data() == address);
  CHECK(moved.view() == text);
  HeaderBytes empty;
  empty.MoveOutOfLine();  // Nothing to move.
  CHECK(empty.empty());
}

TEST_CASE("Buffer: CopyOf copies") {
  Buffer buffer = Buffer::CopyOf(std::string_view("hello"));
  CHECK(buffer.view() == "hello");
}

}  // namespace
}  // namespace rdmarpc::transport
