#include "transport/rdma/read_depth.h"

#include <algorithm>

#include "rdmarpc/tunables.h"

namespace rdmarpc::transport::rdma {

ReadDepth OfferedReadDepth(ibv_context* device) {
  ibv_device_attr attr{};
  ReadDepth depth;
  if (device == nullptr || ibv_query_device(device, &attr) != 0) return depth;
  const auto cap = [](int device_max) {
    return static_cast<uint8_t>(
        std::clamp<int>(device_max, 1, tunables::kRdmaMaxReadDepth));
  };
  depth.initiator = cap(attr.max_qp_init_rd_atom);
  depth.responder = cap(attr.max_qp_rd_atom);
  return depth;
}

ReadDepth AcceptedReadDepth(ibv_context* device, ReadDepth requested) {
  // The request's view is the listener's: its `initiator` is what the
  // connector lets this side issue (its responder resources), its
  // `responder` what the connector wants to issue.
  ReadDepth depth = OfferedReadDepth(device);
  depth.initiator =
      std::max<uint8_t>(1, std::min(depth.initiator, requested.initiator));
  return depth;
}

}  // namespace rdmarpc::transport::rdma
