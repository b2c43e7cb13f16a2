// The hand-written CallHeader codec: its fixed block against bytes written
// here, its extension against protobuf's own codec, both ways; and the pool
// that header and frame buffers come from.
#include "rpc/wire/call_header.h"

#include <algorithm>
#include <catch2/catch_test_macros.hpp>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/buffer_pool.h"
#include "base/ring_queue.h"
#include "proto/wire.pb.h"

namespace rdmarpc::rpc {
namespace {

std::string RandomBytes(std::mt19937_64& random, size_t max) {
  std::string out(random() % (max + 1), '\0');
  for (char& c : out) c = static_cast<char>(random());
  return out;
}

uint64_t RandomNumber(std::mt19937_64& random) {
  switch (random() % 4) {
    case 0:
      return 0;
    case 1:
      return random() % 128;
    case 2:
      return random() % 100000;
    default:
      return random();
  }
}

// A fixed block (docs/protocol.md, "The call header"), written here byte by
// byte, apart from the codec.
std::string Fixed(uint8_t kind, uint64_t call_id, int32_t status_code = 0,
                  uint64_t method_id = 0, uint64_t timeout_us = 0,
                  uint32_t payload_size = 0, uint32_t attachment_size = 0,
                  uint8_t stream = 0) {
  std::string out;
  const auto put = [&out](uint64_t value, size_t size) {
    for (size_t i = 0; i < size; ++i) {
      out += static_cast<char>(value >> (8 * i));
    }
  };
  put(kind, 1);
  put(stream, 1);
  put(0, 2);
  put(static_cast<uint32_t>(status_code), 4);
  put(call_id, 8);
  put(method_id, 8);
  put(timeout_us, 8);
  put(payload_size, 4);
  put(attachment_size, 4);
  return out;
}

// A decoded header's strings are views into `bytes`, which must outlive it.
std::optional<CallHeader> Decode(const std::string& bytes) {
  return CallHeader::Decode(std::as_bytes(std::span(bytes)));
}
std::optional<CallHeader> Decode(std::string&& bytes) = delete;

TEST_CASE("call header: the fixed block, then what protobuf parses, and back") {
  std::mt19937_64 random(42);
  for (int i = 0; i < 20000; ++i) {
    const std::string service = RandomBytes(random, 40);
    const std::string method = RandomBytes(random, 20);
    const std::string message = RandomBytes(random, 300);
    // Most frames have no extension at all.
    const bool extension = random() % 2 == 0;
    const std::string metadata = extension ? RandomBytes(random, 200) : "";
    const std::string trailers = extension ? RandomBytes(random, 200) : "";
    CallHeader ours;
    ours.set_kind(static_cast<CallHeader::Kind>(random() % 8))
        .set_call_id(RandomNumber(random))
        .set_timeout_us(RandomNumber(random))
        .set_status_code(static_cast<int32_t>(RandomNumber(random)))
        .set_payload_size(RandomNumber(random) & 0xffffffffu)
        .set_method_id(RandomNumber(random))
        .set_attachment_size(RandomNumber(random) & 0xffffffffu)
        .set_stream(static_cast<CallHeader::StreamKind>(random() % 5))
        .set_metadata(metadata)
        .set_trailers(trailers);
    if (extension) {
      ours.set_service(service)
          .set_method(method)
          .set_status_message(message)
          .set_window(RandomNumber(random), RandomNumber(random));
    }
    // The bound senders size their space by holds every header.
    REQUIRE(ours.MaxEncodedSize() >= ours.EncodedSize());
    std::string encoded(ours.MaxEncodedSize(), '\0');
    auto* const start = reinterpret_cast<std::byte*>(encoded.data());
    REQUIRE(ours.Encode(start) == start + ours.EncodedSize());
    encoded.resize(ours.EncodedSize());

    REQUIRE(encoded.size() >= CallHeader::kFixedSize);
    CHECK(encoded.substr(0, CallHeader::kFixedSize) ==
          Fixed(static_cast<uint8_t>(ours.kind()), ours.call_id(),
                ours.status_code(), ours.method_id(), ours.timeout_us(),
                static_cast<uint32_t>(ours.payload_size()),
                static_cast<uint32_t>(ours.attachment_size()),
                static_cast<uint8_t>(ours.stream())));
    const std::string rest = encoded.substr(CallHeader::kFixedSize);
    CHECK(rest.empty() ==
          !(extension &&
            (!service.empty() || !method.empty() || !message.empty() ||
             ours.window_messages() != 0 || ours.window_bytes() != 0 ||
             !metadata.empty() || !trailers.empty())));
    wire::CallHeaderExtension theirs;
    REQUIRE(theirs.ParseFromString(rest));
    CHECK(theirs.service() == ours.service());
    CHECK(theirs.method() == ours.method());
    CHECK(theirs.status_message() == ours.status_message());
    CHECK(theirs.window_messages() == ours.window_messages());
    CHECK(theirs.window_bytes() == ours.window_bytes());
    CHECK(theirs.metadata() == metadata);
    CHECK(theirs.trailers() == trailers);
    // Byte for byte what protobuf writes.
    REQUIRE(theirs.SerializeAsString() == rest);

    const auto decoded = Decode(encoded);
    REQUIRE(decoded.has_value());
    CHECK(decoded->kind() == ours.kind());
    CHECK(decoded->call_id() == ours.call_id());
    CHECK(decoded->service() == ours.service());
    CHECK(decoded->method() == ours.method());
    CHECK(decoded->timeout_us() == ours.timeout_us());
    CHECK(decoded->status_code() == ours.status_code());
    CHECK(decoded->status_message() == ours.status_message());
    CHECK(decoded->payload_size() == ours.payload_size());
    CHECK(decoded->method_id() == ours.method_id());
    CHECK(decoded->attachment_size() == ours.attachment_size());
    CHECK(decoded->stream() == ours.stream());
    CHECK(decoded->window_messages() == ours.window_messages());
    CHECK(decoded->window_bytes() == ours.window_bytes());
    CHECK(decoded->metadata() == metadata);
    CHECK(decoded->trailers() == trailers);
  }
}

TEST_CASE("metadata: our block is what protobuf parses, and back") {
  std::mt19937_64 random(11);
  for (int i = 0; i < 5000; ++i) {
    Metadata ours;
    for (int n = static_cast<int>(random() % 6); n > 0; --n) {
      ours.Add(RandomBytes(random, 12), RandomBytes(random, 300));
    }
    const std::string block = EncodeMetadata(ours);
    wire::Metadata theirs;
    REQUIRE(theirs.ParseFromString(block));
    REQUIRE(theirs.entry_size() == static_cast<int>(ours.size()));
    int at = 0;
    for (const auto& [key, value] : ours) {
      CHECK(theirs.entry(at).key() == key);
      CHECK(theirs.entry(at).value() == value);
      ++at;
    }
    REQUIRE(theirs.SerializeAsString() == block);
    Metadata decoded;
    REQUIRE(DecodeMetadata(block, decoded));
    CHECK(decoded == ours);
  }
}

TEST_CASE("metadata: what protobuf accepts decodes, what it refuses fails") {
  // An entry with its fields reversed, repeated (the last counts) and an
  // unknown field, then an unknown field of the block.
  wire::MetadataEntry entry;
  entry.set_value("v1");
  std::string inner = entry.SerializeAsString();
  entry.Clear();
  entry.set_key("k");
  inner += entry.SerializeAsString();
  inner += std::string("\x18\x07", 2);  // Field 3, a varint: unknown.
  entry.Clear();
  entry.set_value("v2");
  inner += entry.SerializeAsString();
  std::string block = std::string("\x0a") + static_cast<char>(inner.size()) +
                      inner + std::string("\x15", 1) + std::string(4, 'z');
  wire::Metadata theirs;
  REQUIRE(theirs.ParseFromString(block));
  Metadata ours;
  REQUIRE(DecodeMetadata(block, ours));
  REQUIRE(ours.size() == 1);
  CHECK(ours.Get("k") == theirs.entry(0).value());
  CHECK(theirs.entry(0).value() == "v2");

  // Cut anywhere inside, the block is refused by both.
  for (size_t cut = 1; cut < block.size() - 5; ++cut) {
    const std::string part = block.substr(0, cut);
    Metadata partial;
    CHECK(wire::Metadata().ParseFromString(part) ==
          DecodeMetadata(part, partial));
  }
}

TEST_CASE("call header: a ten-byte varint reads as protobuf reads it") {
  // window_messages (field 13).
  const std::string extension =
      std::string("\x68") + std::string(9, '\xff') + "\x7f";
  wire::CallHeaderExtension theirs;
  REQUIRE(theirs.ParseFromString(extension));
  const std::string bytes = Fixed(CallHeader::kWindow, 1) + extension;
  const auto ours = Decode(bytes);
  REQUIRE(ours.has_value());
  CHECK(ours->window_messages() == theirs.window_messages());
}

TEST_CASE("call header: what protobuf writes (unknown fields too) decodes") {
  wire::CallHeaderExtension theirs;
  theirs.set_status_message("no");
  theirs.add_out_of_band()->set_size(9);
  // An unknown field of every wire type, as a newer peer might send; the
  // numbers the fixed block's fields had in frame version 7 among them.
  std::string extension = theirs.SerializeAsString();
  extension += std::string("\x50\x01", 2);  // 10 (method_id) as a varint
  extension += std::string("\x59", 1) + std::string(8, 'x');  // 11: fixed64
  extension += std::string("\x62\x02hi", 4);                  // 12: bytes
  extension += std::string("\x6d", 1) + std::string(4, 'y');  // 13: fixed32
  extension += std::string("\x08\x02", 2);  // 1 (kind) as a varint
  REQUIRE(wire::CallHeaderExtension().ParseFromString(extension));
  const std::string bytes =
      Fixed(CallHeader::kResponse, 77, -5, 0, 0, 0, 0) + extension;
  const auto ours = Decode(bytes);
  REQUIRE(ours.has_value());
  CHECK(ours->kind() == CallHeader::kResponse);
  CHECK(ours->call_id() == 77);
  CHECK(ours->status_code() == -5);
  CHECK(ours->status_message() == "no");
  CHECK(ours->out_of_band_count() == 1);
  CHECK(ours->method_id() == 0);
  CHECK(ours->attachment_size() == 0);
  // Known fields in another wire type are, to protobuf, unknown ones.
  CHECK(ours->window_messages() == 0);
}

// Decode reads rdmarpc's own field order on a fast path; any other order,
// or a field repeated (the last one counts), must read as protobuf reads it.
TEST_CASE(
    "call header: extension fields in any order, repeated or not, read as "
    "protobuf") {
  std::mt19937_64 random(7);
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::string> fields;
    for (int f = 0, n = static_cast<int>(random() % 10); f < n; ++f) {
      wire::CallHeaderExtension one;  // One field set: its bytes are that
                                      // field's.
      switch (random() % 8) {
        case 0:
          one.set_service(RandomBytes(random, 10) + "s");
          break;
        case 1:
          one.set_method(RandomBytes(random, 10) + "m");
          break;
        case 2:
          one.set_status_message(RandomBytes(random, 10) + "!");
          break;
        case 3:
          one.set_window_messages(RandomNumber(random) | 1);
          break;
        case 4:
          one.set_window_bytes(RandomNumber(random) | 1);
          break;
        case 5:
          one.set_metadata(RandomBytes(random, 10) + "!");
          break;
        case 6:
          one.set_placed_size(RandomNumber(random) | 1);
          break;
        default:
          one.set_bulk(RandomBytes(random, 10) + "!");
          break;
      }
      fields.push_back(one.SerializeAsString());
    }
    if (random() % 2 == 0) std::sort(fields.begin(), fields.end());
    std::string extension;
    for (const std::string& field : fields) extension += field;

    wire::CallHeaderExtension theirs;
    REQUIRE(theirs.ParseFromString(extension));
    const std::string bytes = Fixed(CallHeader::kRequest, 9) + extension;
    const auto ours = Decode(bytes);
    REQUIRE(ours.has_value());
    CHECK(ours->call_id() == 9);
    CHECK(ours->service() == theirs.service());
    CHECK(ours->method() == theirs.method());
    CHECK(ours->status_message() == theirs.status_message());
    CHECK(ours->window_messages() == theirs.window_messages());
    CHECK(ours->window_bytes() == theirs.window_bytes());
    CHECK(ours->metadata() == theirs.metadata());
    CHECK(ours->placed_size() == theirs.placed_size());
    CHECK(ours->bulk() == theirs.bulk());
  }
}

// Protobuf reads a length as a varint of at most five bytes, so an overlong
// encoding of a small length is fine in five bytes and an error in six.
TEST_CASE("call header: a length takes at most five bytes, as protobuf's") {
  const std::string five(
      "\x1a\x83\x80\x80\x80\x00"
      "abc",
      9);
  wire::CallHeaderExtension theirs;
  REQUIRE(theirs.ParseFromString(five));
  const std::string bytes = Fixed(CallHeader::kRequest, 1) + five;
  const auto ours = Decode(bytes);
  REQUIRE(ours.has_value());
  CHECK(ours->service() == "abc");
  CHECK(theirs.service() == "abc");
}

TEST_CASE(
    "call header: a fixed block cut short or with its reserved bytes set "
    "is refused") {
  const std::string block = Fixed(CallHeader::kRequest, 5, 0, 7, 0, 3);
  REQUIRE(Decode(block).has_value());
  for (size_t cut = 0; cut < block.size(); ++cut) {
    INFO("cut at " << cut);
    const std::string part = block.substr(0, cut);
    CHECK_FALSE(Decode(part).has_value());
  }
  for (size_t at : {2, 3}) {
    std::string reserved = block;
    reserved[at] = '\x01';
    CHECK_FALSE(Decode(reserved).has_value());
  }
}

TEST_CASE(
    "call header: malformed extensions are refused as protobuf refuses "
    "them") {
  const std::vector<std::string> bad = {
      std::string("\x68", 1),  // Varint cut short.
      std::string("\x1a\x05"
                  "abc",
                  5),          // Bytes longer than the rest.
      std::string("\x0b", 1),  // Group start.
      std::string("\x51", 1) + std::string(7, 'i'),  // fixed64 cut short.
      std::string("\x0e\x00", 2),                    // Wire type 6.
      std::string("\x00\x01", 2),                    // Field 0.
      std::string("\x68") + std::string(10, '\xff') +
          "\x01",  // 11-byte varint.
      // Tag of field 13 (varint) in 6 bytes, value 1.
      std::string("\xe8\x80\x80\x80\x80\x00\x01", 7),
      // Field 3 (service) with its length, 0, in 6 bytes.
      std::string("\x1a\x80\x80\x80\x80\x80\x00", 7),
      // Field 1 as bytes (unknown to both), its length, 0, in eight bytes:
      // the input fuzzing found (corpus "overlong_length").
      std::string("\x0a\x00\x0a\x80\x80\x80\x80\x80\x80\x80\x00", 11),
      // The same with the length in ten bytes.
      std::string("\x0a\x00\x0a\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00", 13),
  };
  for (const std::string& extension : bad) {
    INFO("extension of size " << extension.size());
    CHECK_FALSE(wire::CallHeaderExtension().ParseFromString(extension));
    const std::string bytes = Fixed(CallHeader::kResponse, 3) + extension;
    CHECK_FALSE(Decode(bytes).has_value());
  }
}

TEST_CASE("buffer pool: blocks are reused, across threads too") {
  // Warm this thread's cache, then take and give back many times.
  for (int i = 0; i < 100; ++i) PooledBuffer(200);
  const size_t before = PoolHeapAllocations();
  for (int i = 0; i < 100000; ++i) {
    Buffer a = PooledBuffer(100);
    Buffer b = PooledBuffer(3000);
    a.data()[0] = std::byte{1};
    b.data()[2999] = std::byte{2};
  }
  CHECK(PoolHeapAllocations() - before <= 2);
  // Buffers made here and released on another thread (a connection's loop
  // releasing what a caller's thread allocated) stay bounded.
  std::vector<Buffer> made;
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < 200; ++i) made.push_back(PooledBuffer(256));
    std::thread([&] { made.clear(); }).join();
  }
  CHECK(made.empty());
  // A size beyond the largest class still works (from the heap).
  Buffer large = PooledBuffer(kLargestPooled + 1);
  CHECK(large.size() == kLargestPooled + 1);
}

TEST_CASE("ring queue: FIFO order across growth and wrap-around") {
  RingQueue<std::unique_ptr<int>> queue;
  int next_in = 0, next_out = 0;
  std::mt19937_64 random(3);
  for (int step = 0; step < 100000; ++step) {
    if (random() % 3 != 0 || queue.empty()) {
      queue.push_back(std::make_unique<int>(next_in++));
    } else {
      REQUIRE(*queue.front() == next_out++);
      queue.pop_front();
    }
    REQUIRE(queue.size() == static_cast<size_t>(next_in - next_out));
  }
  queue.clear();
  CHECK(queue.empty());
}

TEST_CASE(
    "ring queue: indexing, push_front and pop_back agree with std::deque") {
  RingQueue<std::unique_ptr<int>> queue;
  std::deque<int> model;
  std::mt19937_64 random(5);
  for (int step = 0; step < 20000; ++step) {
    const auto op = random() % 5;
    if (op == 4) {
      queue.push_front(std::make_unique<int>(step));
      model.push_front(step);
    } else if (op <= 1 || model.empty()) {
      queue.push_back(std::make_unique<int>(step));
      model.push_back(step);
    } else if (op == 2) {
      queue.pop_front();
      model.pop_front();
    } else {
      REQUIRE(*queue.back() == model.back());
      queue.pop_back();
      model.pop_back();
    }
    REQUIRE(queue.size() == model.size());
    for (size_t i = 0; i < model.size(); ++i) REQUIRE(*queue[i] == model[i]);
  }
}

}  // namespace
}  // namespace rdmarpc::rpc
