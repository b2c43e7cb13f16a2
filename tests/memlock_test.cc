// A process without CAP_IPC_LOCK may pin only RLIMIT_MEMLOCK bytes (8 MiB by
// Debian's default), and each RDMA connection still pins MiBs: when a
// registration fails for that, the error names the limit and how to raise it
// instead of a bare "Cannot allocate memory". Needs a device, and a process
// started the way a non-root server is (the capability must be gone before
// it opens the device: verbs refuse a file opened under other credentials):
// tools/softroce/suite runs it under `setpriv --bounding-set -ipc_lock` and
// `prlimit --memlock=8388608`.
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <memory>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace rdmarpc::testing {
namespace {

constexpr rpc::MethodRef kEcho("test.Test", "Echo");

bool HasIpcLock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  REQUIRE(syscall(SYS_capget, &header, data) == 0);
  return (data[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32))) != 0;
}

TEST_CASE("memlock: a registration over the limit names it") {
  REQUIRE(OverRdma());
  REQUIRE_FALSE(HasIpcLock());
  rlimit limit{};
  REQUIRE(getrlimit(RLIMIT_MEMLOCK, &limit) == 0);
  REQUIRE(limit.rlim_cur <= 64ull << 20);
  TestServer server;
  // Each connection pins its rings on both ends, both in this process: the
  // limit is reached within a few.
  std::vector<std::unique_ptr<rpc::Channel>> channels;
  Status failed;
  int connected = 0;
  for (int i = 0; i < 32 && failed.ok(); ++i) {
    channels.push_back(std::make_unique<rpc::Channel>(server.uri));
    failed = CallSync(*channels.back(), kEcho, "hi").status;
    if (failed.ok()) ++connected;
  }
  INFO(connected << " connections, then: " << failed.ToString());
  REQUIRE_FALSE(failed.ok());
  CHECK(connected >= 1);
  CHECK(failed.message().find("RLIMIT_MEMLOCK") != std::string::npos);
  CHECK(failed.message().find("may lock " + std::to_string(limit.rlim_cur)) !=
        std::string::npos);
  CHECK(failed.message().find("ulimit -l") != std::string::npos);
  CHECK(failed.message().find("CAP_IPC_LOCK") != std::string::npos);
  // The connections made before the limit still work.
  channels.pop_back();
  CHECK(CallSync(*channels.front(), kEcho, "still").status.ok());
}

}  // namespace
}  // namespace rdmarpc::testing
