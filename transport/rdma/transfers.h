// The large frames (rendezvous, protocol.h) an RdmaConnection has under way:
// its own, from the RTS until the last WRITE WITH IMMEDIATE completes, and
// the peer's, from the RTS until the frame is delivered. Loop thread only.
#ifndef RDMARPC_TRANSPORT_RDMA_TRANSFERS_H_
#define RDMARPC_TRANSPORT_RDMA_TRANSFERS_H_

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "rdmarpc/buffer.h"
#include "rdmarpc/memory.h"
#include "transport/connection.h"
#include "transport/rdma/grant_memory.h"
#include "transport/rdma/protocol.h"
#include "transport/rdma/verbs.h"
#include "transport/rdma/write_plan.h"

namespace rdmarpc::transport::rdma {

// A large frame of ours waiting for its grant, then being written.
struct OutgoingTransfer {
  uint32_t id = 0;
  OutgoingFrame frame;
  bool granted = false;
  ControlMessage grant;
  // Set when the grant arrives.
  WritePlan plan;
  size_t next_write = 0;       // Index into plan.writes.
  uint64_t remote_offset = 0;  // Where the next WRITE lands in the grant.
  // Bytes of the frame its grants have covered (one grant covers all of
  // it; segment grants, protocol.h, one part after another).
  uint64_t covered = 0;
  uint64_t total = 0;     // Bytes the grants will cover, once granted.
  uint64_t last_seq = 0;  // Its last WRITE WITH IMMEDIATE's, once posted.
  // Admission (protocol.h): its header went as a HEADER; refused, it is
  // over with nothing written.
  bool header_sent = false;
  bool refused = false;
  // The registrations the plan reads from stay alive until it is done.
  std::vector<std::shared_ptr<MemoryRegistration>> pins;
};
// A transfer of the peer's to us: once granted, where its frame will land.
struct IncomingTransfer {
  ControlMessage rts;    // Its id (transfer) and header size.
  bool granted = false;  // Else it waits for grant memory (GrantWaiting).
  // Admission (protocol.h): its header was asked for, and has arrived;
  // refused, it is delivered from `block` (the header) with nothing
  // granted.
  bool header_asked = false;
  bool header_arrived = false;
  bool refused = false;
  uint64_t dropped_payload = 0;
  DropReason drop_reason = DropReason::kNone;
  Buffer block;
  // The peer's access to `block`: a memory window on a grant-pool block
  // (bound before the GRANT is sent, invalidated once the frame landed),
  // or a region registered for it alone.
  ibv_mw* window = nullptr;
  ibv_mr* pool_region = nullptr;  // The pool chunk's, to bind on.
  uint32_t window_rkey = 0;
  bool window_bound = false;
  bool invalidate_posted = false;
  // A standing grant given back unused: invalidated, not delivered.
  bool released = false;
  MemoryRegion region;
  GrantCharge charge;  // For the block's bytes.
  // Granted in segments (protocol.h): `block` holds the open segment, and
  // landed segments are copied into `assembled` (the whole frame, not
  // registered); `covered` counts the bytes granted so far, the open
  // segment's last.
  bool segmented = false;
  Buffer assembled;
  uint64_t covered = 0;
  uint64_t Total() const {
    return uint64_t{rts.header_size} + rts.payload_size;
  }
  // A segmented frame not yet covered: no transfer behind it is granted
  // before its last segment is.
  bool Blocking() const { return segmented && covered < Total(); }
};

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_TRANSFERS_H_
