// The peer memory budget's accounting (include/rdmarpc/peer_memory.h), for
// the transports.
#ifndef RDMARPC_TRANSPORT_PEER_BUDGET_H_
#define RDMARPC_TRANSPORT_PEER_BUDGET_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "rdmarpc/buffer.h"
#include "rdmarpc/peer_memory.h"
#include "rdmarpc/status.h"

namespace rdmarpc::transport {

// A quarter of the machine's physical memory: the default limit.
uint64_t DefaultPeerBytesLimit();

// Bytes counted, and the limit. Inline: checked on the call path (a frame
// that goes through a send queue).
inline std::atomic<uint64_t> peer_bytes{0};
inline std::atomic<uint64_t> peer_bytes_limit{DefaultPeerBytesLimit()};
inline std::atomic<uint64_t>& PeerBytes() { return peer_bytes; }
inline std::atomic<uint64_t>& PeerBytesLimit() { return peer_bytes_limit; }

// Counts `n` bytes; false (and nothing counted) if that would pass the
// limit.
bool TryChargePeerBytes(uint64_t n);
// Counts `n` bytes whatever the limit: what was let through anyway.
inline void ChargePeerBytes(uint64_t n) {
  PeerBytes().fetch_add(n, std::memory_order_relaxed);
}
inline void ReleasePeerBytes(uint64_t n) {
  PeerBytes().fetch_sub(n, std::memory_order_relaxed);
}
// Whether `n` more bytes would pass the limit.
inline bool PeerBytesFull(uint64_t n) {
  return PeerBytes().load(std::memory_order_relaxed) + n >
         PeerBytesLimit().load(std::memory_order_relaxed);
}
// Flow control's marks: past 7/8 of the limit a reader whose peer has not
// read what was sent to it pauses; below 3/4 it resumes.
inline bool PeerMemoryHigh() {
  const uint64_t limit = PeerBytesLimit().load(std::memory_order_relaxed);
  return PeerBytes().load(std::memory_order_relaxed) > limit - limit / 8;
}
inline bool PeerMemoryLow() {
  const uint64_t limit = PeerBytesLimit().load(std::memory_order_relaxed);
  return PeerBytes().load(std::memory_order_relaxed) < limit - limit / 4;
}
// The error of a frame of `bytes` refused for the limit, queued for `peer`.
Status PeerMemoryFullError(uint64_t bytes, const std::string& peer);
// `block`, whose `charge` bytes are counted until its bytes are let go of.
Buffer ChargedBuffer(Buffer block, uint64_t charge);

}  // namespace rdmarpc::transport

#endif  // RDMARPC_TRANSPORT_PEER_BUDGET_H_
