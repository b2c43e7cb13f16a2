// The fixed 16-byte prefix in front of every frame, and its codec.
//
//   offset  size  field
//        0     4  magic       "RRPC" (bytes 0x52 0x52 0x50 0x43)
//        4     1  version     kFrameVersion (8)
//        5     1  type        FrameType
//        6     2  credits     RDMA only: receive credits returned; zero on TCP
//        8     4  header_size little-endian; at most kMaxCallHeaderSize
//       12     4  payload_size little-endian; at most the receiver's maximum
//
// The header that follows is a call header (proto/wire.proto,
// rpc/wire/call_header.h); the payload follows the header. Lengths are
// validated before anything is allocated for them.
//
// Versions: bytes 0-4 (magic and version) keep this layout in every version,
// so a receiver can always tell a frame of another rdmarpc version from
// garbage. It refuses one with an error naming both versions and, on a
// stream, answers it with VersionAnnouncement() so that the peer's error
// names both too (docs/protocol.md, "Versions").
#ifndef RDMARPC_TRANSPORT_FRAME_H_
#define RDMARPC_TRANSPORT_FRAME_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "base/little_endian.h"
#include "rdmarpc/status.h"
#include "rdmarpc/tunables.h"

namespace rdmarpc::transport {

inline constexpr std::array<std::byte, 4> kFrameMagic = {
    std::byte{'R'}, std::byte{'R'}, std::byte{'P'}, std::byte{'C'}};
// 3: a CallHeader may carry attachment_size (proto/wire.proto), which a
// version-2 receiver would read as part of the message.
// 4: streams: MESSAGE, HALF_CLOSE and WINDOW frames, and a REQUEST's stream
// kind and window (docs/protocol.md, "Streams"); a version-3 receiver would
// take a streaming REQUEST for a unary one.
// 5: GOAWAY (docs/protocol.md, "Going away"), which a version-4 receiver
// would take for a protocol error and close the connection.
// 6: TOO_MANY_PINGS, TCP keepalive's control kind 3 (transport/keepalive.h).
// 7: bulk loans: a REQUEST's `bulk` field, which a version-6 server would
// ignore and run the call without them, and TCP's bulk control frames.
// 8: the call header starts with a fixed block of 40 bytes (kind, call id,
// method id, timeout, status code, sizes), the other fields after it as a
// CallHeaderExtension; version 7 sent them all as one protobuf message.
inline constexpr uint8_t kFrameVersion = 8;

enum class FrameType : uint8_t {
  // Carries an RPC: header is a CallHeader. The only type the RPC layer sees.
  kRpc = 0,
  // Transport control (credits, grants); consumed inside the transport.
  kControl = 1,
};

// Why a receiver discarded a frame's payload (its header still arrives, so
// the call can be answered).
enum class DropReason : uint8_t {
  kNone = 0,
  kTooLarge = 1,     // Over the receiver's max_payload_size.
  kMemoryLimit = 2,  // RDMA: over the receiver's max_grant_bytes.
  kPeerMemory = 3,   // Over the process's peer memory limit (peer_memory.h).
};

struct FramePrefix {
  FrameType type = FrameType::kRpc;
  uint16_t credits = 0;
  uint32_t header_size = 0;
  uint32_t payload_size = 0;
};

using EncodedPrefix = std::array<std::byte, tunables::kFramePrefixSize>;

// Writes `prefix` into out[0, kFramePrefixSize): the sender's registered
// slot or staging area directly, without a copy through an EncodedPrefix.
inline void EncodeFramePrefixInto(const FramePrefix& prefix, std::byte* out) {
  std::memcpy(out, kFrameMagic.data(), kFrameMagic.size());
  out[4] = std::byte{kFrameVersion};
  out[5] = std::byte{static_cast<uint8_t>(prefix.type)};
  PutLe<uint16_t>(out + 6, prefix.credits);
  PutLe<uint32_t>(out + 8, prefix.header_size);
  PutLe<uint32_t>(out + 12, prefix.payload_size);
}

inline EncodedPrefix EncodeFramePrefix(const FramePrefix& prefix) {
  EncodedPrefix out;
  EncodeFramePrefixInto(prefix, out.data());
  return out;
}

// What a receiver does with a prefix.
enum class PrefixVerdict {
  kAccept,
  // Well formed, but the payload exceeds the receiver's maximum: read the
  // header, discard the payload, and answer RESOURCE_EXHAUSTED.
  kPayloadTooLarge,
  // Not a frame this version understands: close the connection.
  kMalformed,
  // A frame of another rdmarpc version (its magic matches, its version does
  // not): close the connection; the error names both versions.
  kOtherVersion,
};

struct DecodedPrefix {
  PrefixVerdict verdict = PrefixVerdict::kMalformed;
  FramePrefix prefix;
  Status error;  // Why, unless kAccept.
};

DecodedPrefix DecodeFramePrefix(std::span<const std::byte> bytes,
                                uint64_t max_payload_size);

// The verdict kAccept alone, inline for the receive paths: true, with
// `*prefix` set, when bytes[0, kFramePrefixSize) is a prefix of this version
// of a known type whose header and payload are within the limits. On false
// `*prefix` is unspecified, and DecodeFramePrefix says what is wrong. No
// Status is built either way.
inline bool AcceptFramePrefix(const std::byte* bytes, uint64_t max_payload_size,
                              FramePrefix* prefix) {
  if (std::memcmp(bytes, kFrameMagic.data(), kFrameMagic.size()) != 0 ||
      std::to_integer<uint8_t>(bytes[4]) != kFrameVersion ||
      std::to_integer<uint8_t>(bytes[5]) >
          static_cast<uint8_t>(FrameType::kControl)) [[unlikely]] {
    return false;
  }
  prefix->type = static_cast<FrameType>(std::to_integer<uint8_t>(bytes[5]));
  prefix->credits = GetLe<uint16_t>(bytes + 6);
  prefix->header_size = GetLe<uint32_t>(bytes + 8);
  prefix->payload_size = GetLe<uint32_t>(bytes + 12);
  return prefix->header_size <= tunables::kMaxCallHeaderSize &&
         prefix->payload_size <= max_payload_size;
}

// A prefix of this version with nothing after it (a control frame of zero
// lengths): what a side writes, and the last thing it writes, to a peer of
// another version, so that the peer's own check names this side's version.
EncodedPrefix VersionAnnouncement();

}  // namespace rdmarpc::transport

#endif  // RDMARPC_TRANSPORT_FRAME_H_
