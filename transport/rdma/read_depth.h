// The RDMA READ depth a connection offers and accepts (rdma_conn_param's
// initiator_depth and responder_resources).
#ifndef RDMARPC_TRANSPORT_RDMA_READ_DEPTH_H_
#define RDMARPC_TRANSPORT_RDMA_READ_DEPTH_H_

#include <infiniband/verbs.h>

#include <cstdint>

namespace rdmarpc::transport::rdma {

// A connection's RDMA READ depth (tunables::kRdmaMaxReadDepth), as
// rdma_conn_param carries it: READs this side may issue, and the peer's it
// serves.
struct ReadDepth {
  uint8_t initiator = 1;
  uint8_t responder = 1;
};
// What a connector offers: the cap, or its device's limits if lower.
ReadDepth OfferedReadDepth(ibv_context* device);
// What a listener accepts, given a request's depths in its own view.
ReadDepth AcceptedReadDepth(ibv_context* device, ReadDepth requested);

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_READ_DEPTH_H_
