#include "transport/frame.h"

#include <string>

namespace rdmarpc::transport {
namespace {

void PutU32(std::byte* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = std::byte(value >> (8 * i));
}

uint32_t GetU32(const std::byte* in) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i)
    value |= std::to_integer<uint32_t>(in[i]) << (8 * i);
  return value;
}

DecodedPrefix Malformed(std::string why) {
  return {PrefixVerdict::kMalformed,
          {},
          Status(StatusCode::kInternal, "malformed frame: " + why)};
}

}  // namespace

EncodedPrefix EncodeFramePrefix(const FramePrefix& prefix) {
  EncodedPrefix out{};
  for (size_t i = 0; i < kFrameMagic.size(); ++i) out[i] = kFrameMagic[i];
  out[4] = std::byte{kFrameVersion};
  out[5] = std::byte{static_cast<uint8_t>(prefix.type)};
  out[6] = std::byte(prefix.credits & 0xff);
  out[7] = std::byte(prefix.credits >> 8);
  PutU32(&out[8], prefix.header_size);
  PutU32(&out[12], prefix.payload_size);
  return out;
}

DecodedPrefix DecodeFramePrefix(std::span<const std::byte> bytes,
                                uint64_t max_payload_size) {
  if (bytes.size() < tunables::kFramePrefixSize) {
    return Malformed("prefix of " + std::to_string(bytes.size()) +
                     " bytes, need " +
                     std::to_string(tunables::kFramePrefixSize));
  }
  for (size_t i = 0; i < kFrameMagic.size(); ++i) {
    if (bytes[i] != kFrameMagic[i]) return Malformed("bad magic");
  }
  const auto version = std::to_integer<uint8_t>(bytes[4]);
  if (version != kFrameVersion) {
    return Malformed("unsupported version " + std::to_string(version));
  }
  const auto type = std::to_integer<uint8_t>(bytes[5]);
  if (type > static_cast<uint8_t>(FrameType::kControl)) {
    return Malformed("unknown frame type " + std::to_string(type));
  }
  FramePrefix prefix{static_cast<FrameType>(type),
                     static_cast<uint16_t>(std::to_integer<uint16_t>(bytes[6]) |
                                           std::to_integer<uint16_t>(bytes[7]) << 8),
                     GetU32(&bytes[8]), GetU32(&bytes[12])};
  if (prefix.header_size > tunables::kMaxCallHeaderSize) {
    return Malformed("header of " + std::to_string(prefix.header_size) +
                     " bytes exceeds " +
                     std::to_string(tunables::kMaxCallHeaderSize));
  }
  if (prefix.payload_size > max_payload_size) {
    return {PrefixVerdict::kPayloadTooLarge, prefix,
            Status(StatusCode::kResourceExhausted,
                   "payload of " + std::to_string(prefix.payload_size) +
                       " bytes exceeds the receiver's maximum of " +
                       std::to_string(max_payload_size))};
  }
  return {PrefixVerdict::kAccept, prefix, Status()};
}

}  // namespace rdmarpc::transport
