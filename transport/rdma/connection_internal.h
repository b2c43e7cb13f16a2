// Private to the RdmaConnection sources (rdma_*.cc), which split one class by
// concern: setup (rdma_connection.cc), completions (rdma_completions.cc),
// the send path and credits (rdma_send.cc), large transfers received
// (rdma_rendezvous.cc) and sent (rdma_writes.cc), standing grants
// (rdma_standing.cc) and close (rdma_close.cc).
#ifndef RDMARPC_TRANSPORT_RDMA_CONNECTION_INTERNAL_H_
#define RDMARPC_TRANSPORT_RDMA_CONNECTION_INTERNAL_H_

#include <cstdint>

#include "transport/rdma/loop_state.h"
#include "transport/rdma/rdma_connection.h"

namespace rdmarpc::transport::rdma {

// wr_id: a tag in the top two bits, a slot or sequence number below.
enum WrTag : uint64_t { kRecvTag = 1, kSendTag = 2, kWriteTag = 3 };
constexpr uint64_t kTagShift = 62;
constexpr uint64_t kValueMask = (uint64_t{1} << kTagShift) - 1;
constexpr uint64_t WrId(WrTag tag, uint64_t value) {
  return (uint64_t{tag} << kTagShift) | value;
}

// The connection delivering the last received message of the batch this
// thread polled. A frame sent meanwhile (a handler's reply) is posted inside
// Send: nothing else in hand could join it, and the handler's bookkeeping
// after Send (metrics, releasing the call) need not delay it.
inline thread_local RdmaConnection* delivering_last = nullptr;

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_CONNECTION_INTERNAL_H_
