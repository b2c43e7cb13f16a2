#include "transport/frame.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "base/little_endian.h"

namespace rdmarpc::transport {
namespace {

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

EncodedPrefix VersionAnnouncement() {
  return EncodeFramePrefix({FrameType::kControl, 0, 0, 0});
}

DecodedPrefix DecodeFramePrefix(std::span<const std::byte> bytes,
                                uint64_t max_payload_size) {
  // Every frame passes here: the checks are plain compares, and anything
  // that fails one goes to Reject for the reason.
  FramePrefix prefix;
  if (bytes.size() >= tunables::kFramePrefixSize &&
      AcceptFramePrefix(bytes.data(), max_payload_size, &prefix)) [[likely]] {
    return {PrefixVerdict::kAccept, prefix, Status()};
  }
  return Reject(bytes, max_payload_size);
}

}  // namespace rdmarpc::transport
