#include "transport/rdma/device_info.h"

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <net/if.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <tuple>

#include "transport/rdma/verbs.h"

namespace rdmarpc::transport::rdma {
namespace {

struct DeviceListDeleter {
  void operator()(ibv_device** list) const { ibv_free_device_list(list); }
};
struct ContextDeleter {
  void operator()(ibv_context* context) const { ibv_close_device(context); }
};

std::string Gid(const ibv_gid& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, gid.raw, text, sizeof(text));
  return text;
}

std::string GidType(uint32_t type) {
  switch (type) {
    case IBV_GID_TYPE_IB:
      return "IB";
    case IBV_GID_TYPE_ROCE_V1:
      return "RoCE v1";
    case IBV_GID_TYPE_ROCE_V2:
      return "RoCE v2";
    default:
      return "type " + std::to_string(type);
  }
}

std::string LinkLayer(uint8_t layer) {
  switch (layer) {
    case IBV_LINK_LAYER_ETHERNET:
      return "Ethernet";
    case IBV_LINK_LAYER_INFINIBAND:
    case IBV_LINK_LAYER_UNSPECIFIED:
      return "InfiniBand";
    default:
      return "unknown";
  }
}

std::string Guid(uint64_t big_endian) {
  const uint64_t guid = be64toh(big_endian);
  char text[20];
  std::snprintf(text, sizeof(text), "%04x:%04x:%04x:%04x",
                static_cast<unsigned>(guid >> 48),
                static_cast<unsigned>((guid >> 32) & 0xffff),
                static_cast<unsigned>((guid >> 16) & 0xffff),
                static_cast<unsigned>(guid & 0xffff));
  return text;
}

StatusOr<DeviceInfo> Describe(ibv_device* device) {
  DeviceInfo info;
  info.name = ibv_get_device_name(device);
  std::unique_ptr<ibv_context, ContextDeleter> context(ibv_open_device(device));
  if (!context) return ErrnoStatus("ibv_open_device " + info.name, errno);
  ibv_device_attr attr{};
  if (ibv_query_device(context.get(), &attr) != 0) {
    return ErrnoStatus("ibv_query_device " + info.name, errno);
  }
  info.node_guid = Guid(attr.node_guid);
  info.firmware = attr.fw_ver;
  info.max_qp = attr.max_qp;
  info.max_qp_wr = attr.max_qp_wr;
  info.max_sge = attr.max_sge;
  info.max_cq = attr.max_cq;
  info.max_cqe = attr.max_cqe;
  info.max_mr = attr.max_mr;
  info.max_mr_size = attr.max_mr_size;
  info.max_srq = attr.max_srq;
  info.max_srq_wr = attr.max_srq_wr;
  info.max_mw = attr.max_mw;
  size_t gid_slots = 0;
  for (uint32_t number = 1; number <= attr.phys_port_cnt; ++number) {
    ibv_port_attr port{};
    if (ibv_query_port(context.get(), number, &port) != 0) {
      return ErrnoStatus("ibv_query_port " + info.name, errno);
    }
    PortInfo& out = info.ports.emplace_back();
    out.number = number;
    out.state = ibv_port_state_str(port.state);
    out.link_layer = LinkLayer(port.link_layer);
    out.active_mtu = 128u << port.active_mtu;  // IBV_MTU_256 is 1.
    gid_slots += port.gid_tbl_len;
  }
  std::vector<ibv_gid_entry> entries(gid_slots);
  const ssize_t valid = entries.empty()
                            ? 0
                            : ibv_query_gid_table(context.get(), entries.data(),
                                                  entries.size(), 0);
  if (valid < 0)
    return ErrnoStatus("ibv_query_gid_table " + info.name,
                       static_cast<int>(-valid));
  for (ssize_t i = 0; i < valid; ++i) {
    const ibv_gid_entry& entry = entries[i];
    for (PortInfo& port : info.ports) {
      if (port.number != entry.port_num) continue;
      GidInfo& gid = port.gids.emplace_back();
      gid.index = entry.gid_index;
      gid.gid = Gid(entry.gid);
      gid.type = GidType(entry.gid_type);
      char name[IF_NAMESIZE] = {};
      if (entry.ndev_ifindex != 0 &&
          if_indextoname(entry.ndev_ifindex, name) != nullptr) {
        gid.netdev = name;
      }
    }
  }
  return info;
}

}  // namespace

StatusOr<std::vector<DeviceInfo>> ListDevices() {
  int count = 0;
  std::unique_ptr<ibv_device*, DeviceListDeleter> list(
      ibv_get_device_list(&count));
  if (!list || count == 0) {
    Status why = CheckRdmaAvailable();  // Says why there is none.
    if (why.ok()) why = Status(StatusCode::kUnavailable, "no RDMA device");
    return why;
  }
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    StatusOr<DeviceInfo> device = Describe(list.get()[i]);
    if (!device.ok()) return device.status();
    devices.push_back(std::move(*device));
  }
  return devices;
}

std::string FormatDevices(const std::vector<DeviceInfo>& devices) {
  std::string out;
  char line[256];
  for (const DeviceInfo& d : devices) {
    std::snprintf(line, sizeof(line), "%s  node_guid %s  firmware %s\n",
                  d.name.c_str(), d.node_guid.c_str(),
                  d.firmware.empty() ? "-" : d.firmware.c_str());
    out += line;
    std::snprintf(line, sizeof(line),
                  "  limits: qp %u (wr %u, sge %u)  cq %u (cqe %u)  mr %u "
                  "(size %" PRIu64 ")  srq %u (wr %u)  mw %u\n",
                  d.max_qp, d.max_qp_wr, d.max_sge, d.max_cq, d.max_cqe,
                  d.max_mr, d.max_mr_size, d.max_srq, d.max_srq_wr, d.max_mw);
    out += line;
    for (const PortInfo& p : d.ports) {
      std::snprintf(line, sizeof(line),
                    "  port %u: %s  link_layer %s  active_mtu %u\n", p.number,
                    p.state.c_str(), p.link_layer.c_str(), p.active_mtu);
      out += line;
      for (const GidInfo& g : p.gids) {
        std::snprintf(line, sizeof(line), "    gid %u  %-39s  %-8s %s\n",
                      g.index, g.gid.c_str(), g.type.c_str(), g.netdev.c_str());
        out += line;
      }
    }
  }
  return out;
}

namespace {

// "::ffff:10.0.0.1" (an IPv4-mapped GID) as "10.0.0.1"; empty otherwise.
std::string MappedIpv4(const std::string& gid) {
  constexpr std::string_view kPrefix = "::ffff:";
  if (gid.size() <= kPrefix.size() ||
      gid.compare(0, kPrefix.size(), kPrefix) != 0 ||
      gid.find('.') == std::string::npos) {
    return "";
  }
  return gid.substr(kPrefix.size());
}

std::string DescribeGids(const PortInfo& port) {
  std::string text;
  for (const GidInfo& gid : port.gids) {
    text += (text.empty() ? "" : ", ") + std::to_string(gid.index) + " " +
            gid.gid + " (" + gid.type + ")";
  }
  return text.empty() ? "none" : text;
}

}  // namespace

StatusOr<ChosenGid> ChooseGid(const std::string& device, uint32_t port,
                              int gid_index) {
  StatusOr<std::vector<DeviceInfo>> devices = ListDevices();
  if (!devices.ok()) return devices.status();
  const DeviceInfo* found = nullptr;
  std::string names;
  for (const DeviceInfo& info : *devices) {
    if (info.name == device) found = &info;
    names += (names.empty() ? "" : ", ") + info.name;
  }
  if (found == nullptr) {
    return Status(
        StatusCode::kInvalidArgument,
        "no RDMA device named '" + device + "' (devices: " + names + ")");
  }
  const PortInfo* on = nullptr;
  for (const PortInfo& candidate : found->ports) {
    if (candidate.number == port) on = &candidate;
  }
  if (on == nullptr) {
    return Status(StatusCode::kInvalidArgument,
                  device + " has no port " + std::to_string(port) +
                      " (it has " + std::to_string(found->ports.size()) + ")");
  }
  const std::string where = device + " port " + std::to_string(port);
  if (gid_index >= 0) {
    for (const GidInfo& gid : on->gids) {
      if (gid.index != static_cast<uint32_t>(gid_index)) continue;
      const std::string address = MappedIpv4(gid.gid);
      if (address.empty()) {
        return Status(StatusCode::kInvalidArgument,
                      "GID " + std::to_string(gid_index) + " of " + where +
                          " is " + gid.gid +
                          ", not an IPv4 address (rdmarpc's RDMA addresses "
                          "are IPv4)");
      }
      return ChosenGid{gid.index, address, gid.type};
    }
    return Status(StatusCode::kInvalidArgument,
                  where + " has no valid GID " + std::to_string(gid_index) +
                      " (its GIDs: " + DescribeGids(*on) + ")");
  }
  for (const bool v2_only : {true, false}) {
    for (const GidInfo& gid : on->gids) {
      const std::string address = MappedIpv4(gid.gid);
      if (!address.empty() && (!v2_only || gid.type == "RoCE v2")) {
        return ChosenGid{gid.index, address, gid.type};
      }
    }
  }
  return Status(StatusCode::kInvalidArgument,
                where + " has no GID holding an IPv4 address (its GIDs: " +
                    DescribeGids(*on) + ")");
}

std::vector<PortCounter> ReadPortCounters(const std::string& root) {
  namespace fs = std::filesystem;
  std::vector<PortCounter> out;
  std::error_code error;
  for (const auto& device : fs::directory_iterator(root, error)) {
    for (const auto& port :
         fs::directory_iterator(device.path() / "ports", error)) {
      uint32_t number = 0;
      const std::string port_name = port.path().filename().string();
      if (std::sscanf(port_name.c_str(), "%" SCNu32, &number) != 1) continue;
      for (const auto& counter :
           fs::directory_iterator(port.path() / "hw_counters", error)) {
        std::ifstream in(counter.path());
        uint64_t value = 0;
        // lifespan (a setting) and anything unreadable are not counters.
        if (counter.path().filename() == "lifespan" || !(in >> value)) {
          continue;
        }
        out.push_back({device.path().filename().string(), number,
                       counter.path().filename().string(), value});
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::tie(a.device, a.port, a.name) <
           std::tie(b.device, b.port, b.name);
  });
  return out;
}

}  // namespace rdmarpc::transport::rdma
