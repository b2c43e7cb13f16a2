// What this host's RDMA devices are and can do: what `tools/rpc devices`
// prints, as `ibv_devinfo -v` or `ucx_info -d` would, for choosing a device,
// port and GID index and for sizing queues against the device's limits.
#ifndef RDMARPC_TRANSPORT_RDMA_DEVICE_INFO_H_
#define RDMARPC_TRANSPORT_RDMA_DEVICE_INFO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "rdmarpc/status.h"

namespace rdmarpc::transport::rdma {

struct GidInfo {
  uint32_t index = 0;
  std::string gid;     // As an IPv6 address: "::ffff:10.0.0.1" for RoCEv2.
  std::string type;    // "IB", "RoCE v1" or "RoCE v2".
  std::string netdev;  // The network interface it belongs to, if any.
};

struct PortInfo {
  uint32_t number = 0;
  std::string state;          // "ACTIVE", "DOWN", ...
  std::string link_layer;     // "Ethernet" (RoCE) or "InfiniBand".
  uint32_t active_mtu = 0;    // Bytes.
  std::vector<GidInfo> gids;  // The valid entries of its GID table.
};

struct DeviceInfo {
  std::string name;  // "rxe0", "mlx5_0".
  std::string node_guid;
  std::string firmware;
  // Limits (ibv_device_attr).
  uint32_t max_qp = 0;
  uint32_t max_qp_wr = 0;
  uint32_t max_sge = 0;
  uint32_t max_cq = 0;
  uint32_t max_cqe = 0;
  uint32_t max_mr = 0;
  uint64_t max_mr_size = 0;
  uint32_t max_srq = 0;
  uint32_t max_srq_wr = 0;
  uint32_t max_mw = 0;
  std::vector<PortInfo> ports;
};

// Every device and port; the reason (CheckRdmaAvailable's) when there is
// none or they cannot be opened.
StatusOr<std::vector<DeviceInfo>> ListDevices();

// The GID a connection or listener on `device`'s port `port` uses as its
// address (TransportOptions::rdma_device and friends): entry `gid_index`,
// or with -1 the port's first RoCE v2 GID that holds an IPv4 address (else
// its first such GID of any type). An error names what exists instead: the
// devices, the ports, or the GIDs with their addresses.
struct ChosenGid {
  uint32_t index = 0;
  std::string address;  // IPv4, dotted: the source or bind address.
  std::string type;
};
StatusOr<ChosenGid> ChooseGid(const std::string& device, uint32_t port,
                              int gid_index);

// A port's counters as the driver keeps them, what `rdma statistic` shows
// (retransmits, sequence errors, RNR NAKs...): every file under
// ROOT/DEVICE/ports/PORT/hw_counters, ROOT being /sys/class/infiniband.
// Empty where there is no device, or the driver keeps none.
struct PortCounter {
  std::string device;
  uint32_t port = 0;
  std::string name;  // The driver's: "out_of_seq_request", "rcvd_rnr_err".
  uint64_t value = 0;
};
std::vector<PortCounter> ReadPortCounters(
    const std::string& root = "/sys/class/infiniband");

// A human-readable listing, one block per device.
std::string FormatDevices(const std::vector<DeviceInfo>& devices);

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_DEVICE_INFO_H_
