#include "transport/frame.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "base/little_endian.h"

namespace rdmarpc::transport {
namespace {

// The magic, then the version (memcmp of 4 bytes is one 32-bit compare).
bool MagicAndVersionMatch(const std::byte* in) {
  return std::memcmp(in, kFrameMagic.data(), kFrameMagic.size()) == 0 &&
         std::to_integer<uint8_t>(in[4]) == kFrameVersion;
}

DecodedPrefix Malformed(const std::string& why) {
  return {PrefixVerdict::kMalformed,
          {},
          Status(StatusCode::kInternal, "malformed frame: " + why)};
}

// Says what is wrong with a prefix the fast path did not accept. Out of line
// so that the fast path builds no strings and saves no registers for them.
[[gnu::noinline, gnu::cold]] DecodedPrefix Reject(
    std::span<const std::byte> bytes, uint64_t max_payload_size) {
  if (bytes.size() < tunables::kFramePrefixSize) {
    return Malformed("prefix of " + std::to_string(bytes.size()) +
                     " bytes, need " +
                     std::to_string(tunables::kFramePrefixSize));
  }
  if (!std::equal(kFrameMagic.begin(), kFrameMagic.end(), bytes.begin())) {
    return Malformed("bad magic");
  }
  const auto version = std::to_integer<uint8_t>(bytes[4]);
  if (version != kFrameVersion) {
    return {
        PrefixVerdict::kOtherVersion,
        {},
        Status(StatusCode::kUnimplemented,
               "the peer speaks rdmarpc frame version " +
                   std::to_string(version) + "; this build speaks version " +
                   std::to_string(kFrameVersion))};
  }
  const auto type = std::to_integer<uint8_t>(bytes[5]);
  if (type > static_cast<uint8_t>(FrameType::kControl)) {
    return Malformed("unknown frame type " + std::to_string(type));
  }
  const FramePrefix prefix{
      static_cast<FrameType>(type), GetLe<uint16_t>(&bytes[6]),
      GetLe<uint32_t>(&bytes[8]), GetLe<uint32_t>(&bytes[12])};
  if (prefix.header_size > tunables::kMaxCallHeaderSize) {
    return Malformed("header of " + std::to_string(prefix.header_size) +
                     " bytes exceeds " +
                     std::to_string(tunables::kMaxCallHeaderSize));
  }
  // Well formed; only the payload is too large (the fast path checked
  // everything else the same way).
  return {PrefixVerdict::kPayloadTooLarge, prefix,
          Status(StatusCode::kResourceExhausted,
                 "payload of " + std::to_string(prefix.payload_size) +
                     " bytes exceeds the receiver's maximum of " +
                     std::to_string(max_payload_size))};
}

}  // namespace

EncodedPrefix EncodeFramePrefix(const FramePrefix& prefix) {
  EncodedPrefix out;
  std::copy(kFrameMagic.begin(), kFrameMagic.end(), out.begin());
  out[4] = std::byte{kFrameVersion};
  out[5] = std::byte{static_cast<uint8_t>(prefix.type)};
  PutLe<uint16_t>(&out[6], prefix.credits);
  PutLe<uint32_t>(&out[8], prefix.header_size);
  PutLe<uint32_t>(&out[12], prefix.payload_size);
  return out;
}

EncodedPrefix VersionAnnouncement() {
  return EncodeFramePrefix({FrameType::kControl, 0, 0, 0});
}

DecodedPrefix DecodeFramePrefix(std::span<const std::byte> bytes,
                                uint64_t max_payload_size) {
  // Every frame passes here: the checks are plain compares, and anything
  // that fails one goes to Reject for the reason.
  if (bytes.size() >= tunables::kFramePrefixSize &&
      MagicAndVersionMatch(bytes.data()) &&
      std::to_integer<uint8_t>(bytes[5]) <=
          static_cast<uint8_t>(FrameType::kControl)) {
    const FramePrefix prefix{
        static_cast<FrameType>(std::to_integer<uint8_t>(bytes[5])),
        GetLe<uint16_t>(&bytes[6]), GetLe<uint32_t>(&bytes[8]),
        GetLe<uint32_t>(&bytes[12])};
    if (prefix.header_size <= tunables::kMaxCallHeaderSize &&
        prefix.payload_size <= max_payload_size) [[likely]] {
      return {PrefixVerdict::kAccept, prefix, Status()};
    }
  }
  return Reject(bytes, max_payload_size);
}

}  // namespace rdmarpc::transport
