// The peer memory budget: one limit, over every connection of the process,
// on what peers make it hold.
//
// Counted: frames queued for peers and not yet written (at what each
// costs: its bytes and its place in the queue), and large frames being
// received (over the transport's staging block, 128 KiB on TCP) until the
// application lets go of their bytes. Past the limit, a connection refuses a
// frame that cannot wait (a response: RESOURCE_EXHAUSTED, as a full send
// queue does), and a large frame arriving has its payload discarded unread
// and its call answered RESOURCE_EXHAUSTED. So a process is slowed, never
// killed, by peers that stop reading or send more than it can hold. TCP only
// so far (RDMA grants have their own limit, max_grant_bytes).
//
//   rdmarpc::SetPeerMemoryLimit(1ull << 30);  // 1 GiB; before serving.
#ifndef RDMARPC_PEER_MEMORY_H_
#define RDMARPC_PEER_MEMORY_H_

#include <cstdint>

namespace rdmarpc {

// The limit: by default a quarter of the machine's physical memory.
uint64_t PeerMemoryLimit();
void SetPeerMemoryLimit(uint64_t bytes);
// Bytes counted against it now.
uint64_t PeerMemoryUsed();

}  // namespace rdmarpc

#endif  // RDMARPC_PEER_MEMORY_H_
