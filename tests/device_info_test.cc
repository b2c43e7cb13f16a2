// transport/rdma/device_info.h (`tools/rpc devices`): natively there is no
// device and the reason is given; in the Soft-RoCE VM (tools/softroce/suite)
// the rxe device is listed with its limits, its port and the RoCEv2 GID of
// the address under it, as guest-setup made them (RXE_DEV, RXE_IP,
// RXE_NETDEV, RXE_GID_INDEX).
#include "transport/rdma/device_info.h"

#include <catch2/catch_test_macros.hpp>
#include <cstdlib>
#include <string>

#include "tests/support/test_support.h"

namespace rdmarpc::transport::rdma {
namespace {

TEST_CASE("devices: listed with limits, ports and GIDs, or why not") {
  const auto devices = ListDevices();
  if (std::getenv("RXE_DEV") == nullptr) {
    REQUIRE_FALSE(devices.ok());
    CHECK(devices.status().code() == StatusCode::kFailedPrecondition);
    CHECK(devices.status().message().find("no RDMA device") !=
          std::string::npos);
    return;
  }
  INFO(devices.status().ToString());
  REQUIRE(devices.ok());
  const std::string name = testing::RequireEnv("RXE_DEV");
  const DeviceInfo* rxe = nullptr;
  for (const DeviceInfo& device : *devices) {
    if (device.name == name) rxe = &device;
  }
  REQUIRE(rxe != nullptr);
  CHECK(rxe->max_qp > 0);
  CHECK(rxe->max_cqe > 0);
  CHECK(rxe->max_srq > 0);
  CHECK(rxe->max_srq_wr > 0);
  CHECK(rxe->max_mr_size > 0);
  REQUIRE(rxe->ports.size() == 1);
  const PortInfo& port = rxe->ports[0];
  CHECK(port.number == 1);
  CHECK(port.state == "active");
  CHECK(port.link_layer == "Ethernet");
  CHECK(port.active_mtu >= 256);
  const std::string address = "::ffff:" + testing::RequireEnv("RXE_IP");
  const GidInfo* roce = nullptr;
  for (const GidInfo& gid : port.gids) {
    if (gid.gid == address) roce = &gid;
  }
  REQUIRE(roce != nullptr);
  CHECK(roce->type == "RoCE v2");
  CHECK(roce->netdev == testing::RequireEnv("RXE_NETDEV"));
  CHECK(std::to_string(roce->index) == testing::RequireEnv("RXE_GID_INDEX"));
  const std::string listing = FormatDevices(*devices);
  CHECK(listing.find(name + "  node_guid") != std::string::npos);
  CHECK(listing.find(address) != std::string::npos);
}

}  // namespace
}  // namespace rdmarpc::transport::rdma
