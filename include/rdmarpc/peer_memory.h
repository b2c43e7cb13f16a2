// The peer memory budget: one limit, over every connection of the process,
// on what peers make it hold.
//
// Counted: frames queued for peers and not yet written or posted (at what
// each costs: its bytes and its place in the queue; both transports), and
// large frames being received on TCP (over its 128 KiB staging block) until
// the application lets go of their bytes (RDMA's grants have their own
// limit, TransportOptions::max_grant_bytes). Past the limit, a connection
// refuses a frame that cannot wait (a response: RESOURCE_EXHAUSTED, as a
// full send queue does), and a large frame arriving has its payload
// discarded unread and its call answered RESOURCE_EXHAUSTED. Past 7/8 of
// it, a TCP connection whose peer has not read what is being written to it
// stops reading that peer's requests (flow control) until the peer has read
// it or the memory is below 3/4. So a process is slowed, never killed, by
// peers that stop reading or send more than it can hold.
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
