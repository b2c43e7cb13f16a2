#include "rpc/wire/call_header.h"

#include <bit>
#include <cassert>
#include <cstdint>
#include <cstring>

#include "base/little_endian.h"
#include "rdmarpc/stream.h"
#include "rdmarpc/tunables.h"

namespace rdmarpc::rpc {

// The call header's stream kinds are StreamKind's values.
static_assert(static_cast<int>(StreamKind::kClientStreaming) ==
                  CallHeader::kClientStreaming &&
              static_cast<int>(StreamKind::kServerStreaming) ==
                  CallHeader::kServerStreaming &&
              static_cast<int>(StreamKind::kBidiStreaming) ==
                  CallHeader::kBidiStreaming);

namespace {

// The fixed block (docs/protocol.md, "The call header"): each field's offset.
enum FixedOffset : size_t {
  kKindOffset = 0,             // u8
  kStreamOffset = 1,           // u8
  kReservedOffset = 2,         // u16, zero
  kStatusCodeOffset = 4,       // i32
  kCallIdOffset = 8,           // u64
  kMethodIdOffset = 16,        // u64
  kTimeoutOffset = 24,         // u64
  kPayloadSizeOffset = 32,     // u32
  kAttachmentSizeOffset = 36,  // u32
};
static_assert(kAttachmentSizeOffset + 4 == CallHeader::kFixedSize);

// Field numbers and wire types of proto/wire.proto's CallHeaderExtension.
enum Field : uint32_t {
  kServiceField = 3,
  kMethodField = 4,
  kStatusMessageField = 7,
  kOutOfBandField = 9,
  kWindowMessagesField = 13,
  kWindowBytesField = 14,
  kMetadataField = 15,
  kTrailersField = 16,
  kBulkField = 17,
  kPlacedSizeField = 18,
};
// Metadata's field, and MetadataEntry's.
enum MetadataField : uint32_t { kEntryField = 1 };
enum EntryField : uint32_t { kKeyField = 1, kValueField = 2 };
enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kBytes = 2,
  kFixed32 = 5
};

// Seven bits a byte; 0 takes one.
constexpr size_t VarintSize(uint64_t value) {
  return (static_cast<size_t>(std::bit_width(value | 1)) + 6) / 7;
}
static_assert(VarintSize(0) == 1 && VarintSize(127) == 1 &&
              VarintSize(128) == 2 && VarintSize(~uint64_t{0}) == 10);

std::byte* PutVarintLoop(std::byte* out, uint64_t value) {
  while (value >= 0x80) {
    *out++ = std::byte(static_cast<uint8_t>(value) | 0x80);
    value >>= 7;
  }
  *out++ = std::byte(static_cast<uint8_t>(value));
  return out;
}

// A varint of two bytes or more; may write up to 8 bytes even for a shorter
// one, which the caller's room (MaxEncodedSize) allows. Values under 2^56
// (call ids, timeouts, sizes) are spread into seven-bit groups with three
// shift-and-mask steps and stored at once.
[[gnu::noinline]] std::byte* PutLongVarint(std::byte* out, uint64_t value) {
  if (std::endian::native != std::endian::little || value >> 56 != 0) {
    return PutVarintLoop(out, value);
  }
  uint64_t x = value;
  x = (x & 0x000000000fffffffu) | ((x & 0x00fffffff0000000u) << 4);
  x = (x & 0x00003fff00003fffu) | ((x & 0x0fffc0000fffc000u) << 2);
  x = (x & 0x007f007f007f007fu) | ((x & 0x3f803f803f803f80u) << 1);
  const size_t length = VarintSize(value);  // 2 to 8.
  // Every byte but the last carries the continuation bit.
  x |= 0x8080808080808080u & ((uint64_t{1} << (8 * (length - 1))) - 1);
  std::memcpy(out, &x, sizeof(x));
  return out + length;
}

// Tags and most values are one byte: that case stays inline.
[[gnu::always_inline]] inline std::byte* PutVarint(std::byte* out,
                                                   uint64_t value) {
  if (value < 0x80) {
    *out = std::byte(static_cast<uint8_t>(value));
    return out + 1;
  }
  return PutLongVarint(out, value);
}

constexpr uint64_t Tag(uint32_t field, WireType type) {
  return (uint64_t{field} << 3) | type;
}

size_t VarintFieldSize(Field field, uint64_t value) {
  return value == 0 ? 0 : VarintSize(Tag(field, kVarint)) + VarintSize(value);
}
size_t BytesFieldSize(uint32_t field, std::string_view value) {
  return value.empty() ? 0
                       : VarintSize(Tag(field, kBytes)) +
                             VarintSize(value.size()) + value.size();
}

std::byte* PutVarintField(std::byte* out, Field field, uint64_t value) {
  if (value == 0) return out;
  return PutVarint(PutVarint(out, Tag(field, kVarint)), value);
}
std::byte* PutBytesField(std::byte* out, Field field, std::string_view value) {
  if (value.empty()) return out;
  out = PutVarint(PutVarint(out, Tag(field, kBytes)), value.size());
  std::memcpy(out, value.data(), value.size());
  return out + value.size();
}

class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes)
      : at_(bytes.data()), end_(bytes.data() + bytes.size()) {}
  bool done() const { return at_ == end_; }
  // Consumes the next byte if it is `byte`.
  bool Take(uint8_t byte) {
    if (at_ == end_ || static_cast<uint8_t>(*at_) != byte) return false;
    ++at_;
    return true;
  }
  // Consumes the next two bytes if they are the varint `tag` (128 to
  // 16383).
  bool Take2(uint64_t tag) {
    if (end_ - at_ < 2 ||
        static_cast<uint8_t>(at_[0]) != ((tag & 0x7f) | 0x80) ||
        static_cast<uint8_t>(at_[1]) != (tag >> 7)) {
      return false;
    }
    at_ += 2;
    return true;
  }
  bool Varint(uint64_t& value) {
    if (at_ != end_ && static_cast<uint8_t>(*at_) < 0x80) {  // One byte: most.
      value = static_cast<uint8_t>(*at_++);
      return true;
    }
    // Call ids (a slot's generation sits in the high half) take six or
    // seven bytes, timeouts three or four: read up to eight at once.
    if constexpr (std::endian::native == std::endian::little) {
      if (end_ - at_ >= 8) {
        uint64_t word;
        std::memcpy(&word, at_, sizeof(word));
        // A byte without its continuation bit ends the varint.
        const uint64_t ends = ~word & 0x8080808080808080u;
        if (ends != 0) {
          const int last_bit = std::countr_zero(ends);  // 8 * length - 1.
          at_ += (last_bit + 1) / 8;
          // Keep the varint's bytes; drop the continuation bits, then
          // close the gaps between the 7-bit groups pairwise.
          uint64_t x = word & (ends ^ (ends - 1)) & 0x7f7f7f7f7f7f7f7fu;
          x = (x & 0x007f007f007f007fu) | ((x & 0x7f007f007f007f00u) >> 1);
          x = (x & 0x00003fff00003fffu) | ((x & 0x3fff00003fff0000u) >> 2);
          x = (x & 0x000000000fffffffu) | ((x & 0x0fffffff00000000u) >> 4);
          value = x;
          return true;
        }
      }
    }
    value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ == end_) return false;
      const auto byte = static_cast<uint8_t>(*at_++);
      // As protobuf: a tenth byte's excess bits are dropped; an eleventh
      // byte is an error.
      value |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }
  // As protobuf reads tags and lengths: a varint of at most 5 bytes (an
  // overlong encoding of a small value in six is an error too).
  bool ShortVarint(uint64_t& value) {
    const std::byte* start = at_;
    return Varint(value) && at_ - start <= 5;
  }
  // A tag is a 32-bit short varint.
  bool Tag(uint64_t& tag) { return ShortVarint(tag) && tag <= 0xffffffffu; }
  bool Skip(uint64_t n) {
    if (n > static_cast<uint64_t>(end_ - at_)) return false;
    at_ += n;
    return true;
  }
  // A length-delimited field: its length is a short varint.
  bool Bytes(std::string_view& value) {
    uint64_t length = 0;
    if (!ShortVarint(length) || length > static_cast<uint64_t>(end_ - at_)) {
      return false;
    }
    value = std::string_view(reinterpret_cast<const char*>(at_), length);
    at_ += length;
    return true;
  }

 private:
  const std::byte* at_;
  const std::byte* end_;
};

// Skips a field of wire type `type` whose tag was read; false for a
// malformed one or a group.
bool SkipField(Reader& in, uint32_t type) {
  uint64_t value = 0;
  std::string_view text;
  switch (type) {
    case kVarint:
      return in.Varint(value);
    case kFixed64:
      return in.Skip(8);
    case kFixed32:
      return in.Skip(4);
    case kBytes:
      return in.Bytes(text);
    default:
      return false;
  }
}

bool DecodeEntry(std::string_view bytes, Metadata& out) {
  Reader in(std::as_bytes(std::span(bytes)));
  std::string_view key;
  std::string_view value;
  while (!in.done()) {
    uint64_t tag = 0;
    if (!in.Tag(tag) || (tag >> 3) == 0) return false;
    const auto type = static_cast<uint32_t>(tag & 7);
    const uint64_t field = tag >> 3;
    if (type == kBytes && (field == kKeyField || field == kValueField)) {
      if (!in.Bytes(field == kKeyField ? key : value)) return false;
    } else if (!SkipField(in, type)) {
      return false;
    }
  }
  out.Add(std::string(key), std::string(value));
  return true;
}

// Appends `value` as a varint.
void AppendVarint(std::string& out, uint64_t value) {
  std::byte bytes[10];
  const std::byte* end = PutVarintLoop(bytes, value);
  out.append(reinterpret_cast<const char*>(bytes), end - bytes);
}

}  // namespace

std::string EncodeBulkField(std::span<const std::byte> descriptors) {
  std::string out;
  AppendVarint(out, Tag(kBulkField, kBytes));
  AppendVarint(out, descriptors.size());
  out.append(reinterpret_cast<const char*>(descriptors.data()),
             descriptors.size());
  return out;
}

std::string EncodePlacedSizeField(uint64_t bytes) {
  std::string out;
  AppendVarint(out, Tag(kPlacedSizeField, kVarint));
  AppendVarint(out, bytes);
  return out;
}

std::string EncodeMetadata(const Metadata& metadata) {
  std::string out;
  const auto put_varint = [&out](uint64_t value) { AppendVarint(out, value); };
  for (const auto& [key, value] : metadata) {
    const size_t entry =
        BytesFieldSize(kKeyField, key) + BytesFieldSize(kValueField, value);
    put_varint(Tag(kEntryField, kBytes));
    put_varint(entry);
    if (!key.empty()) {
      put_varint(Tag(kKeyField, kBytes));
      put_varint(key.size());
      out += key;
    }
    if (!value.empty()) {
      put_varint(Tag(kValueField, kBytes));
      put_varint(value.size());
      out += value;
    }
  }
  return out;
}

bool DecodeMetadata(std::string_view block, Metadata& out) {
  Reader in(std::as_bytes(std::span(block)));
  while (!in.done()) {
    uint64_t tag = 0;
    if (!in.Tag(tag) || (tag >> 3) == 0) return false;
    const auto type = static_cast<uint32_t>(tag & 7);
    if ((tag >> 3) == kEntryField && type == kBytes) {
      std::string_view entry;
      if (!in.Bytes(entry) || !DecodeEntry(entry, out)) return false;
    } else if (!SkipField(in, type)) {
      return false;
    }
  }
  return true;
}

size_t CallHeader::EncodedSize() const {
  return kFixedSize + BytesFieldSize(kServiceField, service_) +
         BytesFieldSize(kMethodField, method_) +
         BytesFieldSize(kStatusMessageField, status_message_) +
         VarintFieldSize(kWindowMessagesField, window_messages_) +
         VarintFieldSize(kWindowBytesField, window_bytes_) +
         BytesFieldSize(kMetadataField, metadata_) +
         BytesFieldSize(kTrailersField, trailers_);
}

void CallHeader::EncodeFixed(std::byte* out, Kind kind, int32_t status_code,
                             uint64_t call_id, uint64_t method_id,
                             uint64_t timeout_us, uint64_t payload_size,
                             uint64_t attachment_size, StreamKind stream) {
  static_assert(tunables::kMaxPayloadSizeLimit <= UINT32_MAX);
  assert(payload_size <= tunables::kMaxPayloadSizeLimit);
  out[kKindOffset] = std::byte(static_cast<uint8_t>(kind));
  out[kStreamOffset] = std::byte(static_cast<uint8_t>(stream));
  PutLe<uint16_t>(out + kReservedOffset, 0);
  PutLe<int32_t>(out + kStatusCodeOffset, status_code);
  PutLe<uint64_t>(out + kCallIdOffset, call_id);
  PutLe<uint64_t>(out + kMethodIdOffset, method_id);
  PutLe<uint64_t>(out + kTimeoutOffset, timeout_us);
  PutLe<uint32_t>(out + kPayloadSizeOffset,
                  static_cast<uint32_t>(payload_size));
  PutLe<uint32_t>(out + kAttachmentSizeOffset,
                  static_cast<uint32_t>(attachment_size));
}

std::byte* CallHeader::EncodeExtension(std::byte* out) const {
  out = PutBytesField(out, kServiceField, service_);
  out = PutBytesField(out, kMethodField, method_);
  out = PutBytesField(out, kStatusMessageField, status_message_);
  out = PutVarintField(out, kWindowMessagesField, window_messages_);
  out = PutVarintField(out, kWindowBytesField, window_bytes_);
  out = PutBytesField(out, kMetadataField, metadata_);
  return PutBytesField(out, kTrailersField, trailers_);
}

bool CallHeader::DecodeFixed(std::span<const std::byte> bytes) {
  if (bytes.size() < kFixedSize) return false;
  const std::byte* in = bytes.data();
  if (GetLe<uint16_t>(in + kReservedOffset) != 0) return false;
  kind_ = static_cast<Kind>(std::to_integer<uint8_t>(in[kKindOffset]));
  stream_ =
      static_cast<StreamKind>(std::to_integer<uint8_t>(in[kStreamOffset]));
  status_code_ = GetLe<int32_t>(in + kStatusCodeOffset);
  call_id_ = GetLe<uint64_t>(in + kCallIdOffset);
  method_id_ = GetLe<uint64_t>(in + kMethodIdOffset);
  timeout_us_ = GetLe<uint64_t>(in + kTimeoutOffset);
  payload_size_ = GetLe<uint32_t>(in + kPayloadSizeOffset);
  attachment_size_ = GetLe<uint32_t>(in + kAttachmentSizeOffset);
  return true;
}

bool CallHeader::DecodeInto(std::span<const std::byte> bytes,
                            CallHeader& header) {
  if (!header.DecodeFixed(bytes)) return false;
  if (bytes.size() == kFixedSize) return true;  // Nearly every frame.
  const auto extension = bytes.subspan(kFixedSize);
  return header.DecodeCanonical(extension) || header.DecodeAny(extension);
}

// The extension as EncodeExtension writes it: each field at most once, in
// field order, nothing unknown; and the fields appended after it
// (EncodeBulkField, EncodePlacedSizeField). Every header rdmarpc sends, read
// straight through. Anything else, valid or not, returns false and is read
// again by DecodeAny, which for these bytes would give the same header.
bool CallHeader::DecodeCanonical(std::span<const std::byte> extension) {
  Reader in(extension);
  if (in.Take(Tag(kServiceField, kBytes)) && !in.Bytes(service_)) {
    return false;
  }
  if (in.Take(Tag(kMethodField, kBytes)) && !in.Bytes(method_)) return false;
  if (in.Take(Tag(kStatusMessageField, kBytes)) && !in.Bytes(status_message_)) {
    return false;
  }
  if (in.Take(Tag(kWindowMessagesField, kVarint)) &&
      !in.Varint(window_messages_)) {
    return false;
  }
  if (in.Take(Tag(kWindowBytesField, kVarint)) && !in.Varint(window_bytes_)) {
    return false;
  }
  if (in.Take(Tag(kMetadataField, kBytes)) && !in.Bytes(metadata_)) {
    return false;
  }
  // Tags of fields 16 and up take two bytes.
  if (in.Take2(Tag(kTrailersField, kBytes)) && !in.Bytes(trailers_)) {
    return false;
  }
  if (in.Take2(Tag(kBulkField, kBytes)) && !in.Bytes(bulk_)) return false;
  if (in.Take2(Tag(kPlacedSizeField, kVarint)) && !in.Varint(placed_size_)) {
    return false;
  }
  return in.done();
}

void CallHeader::SetField(uint64_t field, bool varint, uint64_t value,
                          std::string_view text) {
  // A known field with another wire type is, to protobuf, an unknown
  // field: skipped like any other. So are the numbers the fixed block's
  // fields had before it (reserved in proto/wire.proto).
  switch (field) {
    case kServiceField:
      if (!varint) service_ = text;
      break;
    case kMethodField:
      if (!varint) method_ = text;
      break;
    case kStatusMessageField:
      if (!varint) status_message_ = text;
      break;
    case kWindowMessagesField:
      if (varint) window_messages_ = value;
      break;
    case kWindowBytesField:
      if (varint) window_bytes_ = value;
      break;
    case kOutOfBandField:
      if (!varint) ++out_of_band_count_;
      break;
    case kMetadataField:
      if (!varint) metadata_ = text;
      break;
    case kTrailersField:
      if (!varint) trailers_ = text;
      break;
    case kBulkField:
      if (!varint) bulk_ = text;
      break;
    case kPlacedSizeField:
      if (varint) placed_size_ = value;
      break;
    default:
      break;
  }
}

// Any well-formed extension: fields in any order, repeated (the last one
// wins), unknown ones skipped, as protobuf reads it. Starts over from the
// fixed block's fields alone, whatever DecodeCanonical stored.
bool CallHeader::DecodeAny(std::span<const std::byte> extension) {
  service_ = method_ = status_message_ = metadata_ = trailers_ = bulk_ = {};
  window_messages_ = window_bytes_ = placed_size_ = 0;
  out_of_band_count_ = 0;
  Reader in(extension);
  while (!in.done()) {
    uint64_t tag = 0;
    if (!in.Tag(tag)) return false;
    const uint64_t field = tag >> 3;
    const auto type = static_cast<uint32_t>(tag & 7);
    if (field == 0) return false;
    uint64_t value = 0;
    std::string_view text;
    switch (type) {
      case kVarint:
        if (!in.Varint(value)) return false;
        break;
      case kFixed64:  // No extension field is fixed64.
        if (!in.Skip(8)) return false;
        continue;
      case kFixed32:
        if (!in.Skip(4)) return false;
        continue;
      case kBytes:
        if (!in.Bytes(text)) return false;
        break;
      default:  // Groups (3, 4) and wire types 6, 7.
        return false;
    }
    SetField(field, type == kVarint, value, text);
  }
  return true;
}

}  // namespace rdmarpc::rpc
