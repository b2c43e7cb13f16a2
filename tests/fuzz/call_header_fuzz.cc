// Fuzzes the hand-written CallHeader decoder: whatever ours accepts has the
// fixed block's fields at their offsets (read here byte by byte), and an
// extension protobuf's own parser accepts with the same field values; and
// re-encoding what ours decoded gives the same header back. Its metadata
// blocks go through both Metadata parsers too.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "proto/wire.pb.h"
#include "rpc/wire/call_header.h"
#include "rpc/wire/wire_codec.h"
#include "tests/fuzz/fuzz_check.h"

using rdmarpc::rpc::CallHeader;

namespace {

bool SameFields(const CallHeader& a, const CallHeader& b) {
  return a.kind() == b.kind() && a.call_id() == b.call_id() &&
         a.service() == b.service() && a.method() == b.method() &&
         a.timeout_us() == b.timeout_us() &&
         a.status_code() == b.status_code() &&
         a.status_message() == b.status_message() &&
         a.payload_size() == b.payload_size() &&
         a.method_id() == b.method_id() &&
         a.attachment_size() == b.attachment_size() &&
         a.stream() == b.stream() &&
         a.window_messages() == b.window_messages() &&
         a.window_bytes() == b.window_bytes() && a.metadata() == b.metadata() &&
         a.trailers() == b.trailers();
}

// A metadata block: what ours decodes, protobuf parses to the same entries.
// (Ours refuses some blocks protobuf reads, as for the header: a tag above
// 32 bits, say. Nothing rdmarpc or protobuf writes.)
void CheckMetadata(std::string_view block) {
  rdmarpc::rpc::Metadata ours;
  if (!rdmarpc::rpc::DecodeMetadata(block, ours)) return;
  rdmarpc::wire::Metadata theirs;
  FUZZ_CHECK(
      theirs.ParseFromArray(block.data(), static_cast<int>(block.size())));
  FUZZ_CHECK(ours.size() == static_cast<size_t>(theirs.entry_size()));
  int at = 0;
  for (const auto& [key, value] : ours) {
    FUZZ_CHECK(theirs.entry(at).key() == key);
    FUZZ_CHECK(theirs.entry(at).value() == value);
    ++at;
  }
  // And it encodes back to what protobuf writes (ours keeps no unknown
  // fields).
  theirs.DiscardUnknownFields();
  FUZZ_CHECK(rdmarpc::rpc::EncodeMetadata(ours) == theirs.SerializeAsString());
}

// A bulk field (include/rdmarpc/bulk.h): what the server accepts is whole
// descriptors within the cap, at most one of them the response's
// destination (writable), each of which encodes back to its bytes.
void CheckBulk(std::string_view field) {
  std::vector<rdmarpc::BulkDescriptor> descriptors;
  std::optional<rdmarpc::BulkDescriptor> destination;
  if (!rdmarpc::rpc::ReadBulk(field, descriptors, destination).ok()) return;
  const size_t count = descriptors.size() + (destination ? 1 : 0);
  FUZZ_CHECK(count <= rdmarpc::tunables::kMaxBulkLoansPerCall);
  if (destination) {
    FUZZ_CHECK(destination->response_destination && destination->writable());
  }
  size_t next = 0;
  size_t offset = 0;
  const auto* bytes = reinterpret_cast<const std::byte*>(field.data());
  for (size_t i = 0; i < count; ++i) {
    const std::byte* at = bytes + offset;
    const bool is_destination = (std::to_integer<uint8_t>(at[2]) & 1) != 0;
    FUZZ_CHECK(!is_destination || destination.has_value());
    const rdmarpc::BulkDescriptor& descriptor =
        is_destination ? *destination : descriptors[next++];
    FUZZ_CHECK(descriptor.response_destination == is_destination);
    const auto encoded = descriptor.Encode();
    FUZZ_CHECK(offset + encoded.size() <= field.size());
    FUZZ_CHECK(std::memcmp(encoded.data(), at, encoded.size()) == 0);
    offset += encoded.size();
    for (size_t r = 1; r < descriptor.rail_count; ++r) {
      FUZZ_CHECK(descriptor.rails[r].rail > descriptor.rails[r - 1].rail);
    }
    FUZZ_CHECK(descriptor.length > 0 &&
               descriptor.length <= rdmarpc::tunables::kMaxBulkLength);
  }
  FUZZ_CHECK(offset == field.size());  // Whole descriptors, nothing else.
}

// `size` little-endian bytes at `at`, independently of the codec's own
// reading.
uint64_t Le(const uint8_t* at, size_t size) {
  uint64_t value = 0;
  for (size_t i = size; i-- > 0;) value = (value << 8) | at[i];
  return value;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  const auto ours = CallHeader::Decode(bytes);
  if (!ours) return 0;
  // The fixed block (docs/protocol.md, "The call header").
  FUZZ_CHECK(size >= CallHeader::kFixedSize && Le(data + 2, 2) == 0);
  FUZZ_CHECK(static_cast<uint64_t>(ours->kind()) == data[0]);
  FUZZ_CHECK(static_cast<uint64_t>(ours->stream()) == data[1]);
  FUZZ_CHECK(static_cast<uint32_t>(ours->status_code()) == Le(data + 4, 4));
  FUZZ_CHECK(ours->call_id() == Le(data + 8, 8));
  FUZZ_CHECK(ours->method_id() == Le(data + 16, 8));
  FUZZ_CHECK(ours->timeout_us() == Le(data + 24, 8));
  FUZZ_CHECK(ours->payload_size() == Le(data + 32, 4));
  FUZZ_CHECK(ours->attachment_size() == Le(data + 36, 4));
  rdmarpc::wire::CallHeaderExtension theirs;
  const bool theirs_ok =
      theirs.ParseFromArray(data + CallHeader::kFixedSize,
                            static_cast<int>(size - CallHeader::kFixedSize));
  // Out-of-band entries are reserved: ours counts them without looking
  // inside, protobuf parses them; the rest must agree.
  if (ours->out_of_band_count() == 0) {
    FUZZ_CHECK(theirs_ok);
    FUZZ_CHECK(theirs.service() == ours->service());
    FUZZ_CHECK(theirs.method() == ours->method());
    FUZZ_CHECK(theirs.status_message() == ours->status_message());
    FUZZ_CHECK(theirs.window_messages() == ours->window_messages());
    FUZZ_CHECK(theirs.window_bytes() == ours->window_bytes());
    FUZZ_CHECK(theirs.metadata() == ours->metadata());
    FUZZ_CHECK(theirs.trailers() == ours->trailers());
    FUZZ_CHECK(theirs.bulk() == ours->bulk());
    FUZZ_CHECK(theirs.placed_size() == ours->placed_size());
  }
  CheckBulk(ours->bulk());
  CheckMetadata(ours->metadata());
  CheckMetadata(ours->trailers());
  std::string encoded(ours->MaxEncodedSize(), '\0');
  auto* const start = reinterpret_cast<std::byte*>(encoded.data());
  FUZZ_CHECK(ours->Encode(start) == start + ours->EncodedSize());
  encoded.resize(ours->EncodedSize());
  const auto again = CallHeader::Decode(
      std::as_bytes(std::span(encoded.data(), encoded.size())));
  FUZZ_CHECK(again.has_value());
  FUZZ_CHECK(SameFields(*ours, *again));
  FUZZ_CHECK(again->EncodedSize() == encoded.size());
  return 0;
}
