// The peer memory budget's accounting (include/rdmarpc/peer_memory.h), for
// the transports.
#ifndef RDMARPC_TRANSPORT_PEER_BUDGET_H_
#define RDMARPC_TRANSPORT_PEER_BUDGET_H_

#include <atomic>
#include <cstdint>

#include "rdmarpc/buffer.h"
#include "rdmarpc/peer_memory.h"

namespace rdmarpc::transport {

// Bytes counted, and the limit.
std::atomic<uint64_t>& PeerBytes();
std::atomic<uint64_t>& PeerBytesLimit();

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
// `block`, whose `charge` bytes are counted until its bytes are let go of.
Buffer ChargedBuffer(Buffer block, uint64_t charge);

}  // namespace rdmarpc::transport

#endif  // RDMARPC_TRANSPORT_PEER_BUDGET_H_
