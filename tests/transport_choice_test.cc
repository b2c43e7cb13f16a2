// Choosing a transport: rdma:// needs a usable device and says so at once
// when there is none; auto:// takes rdma when it can and tcp otherwise.
// Runs natively (no device) and in the Soft-RoCE VM (a device). A process
// out of file descriptors hears that, not "no device".
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch_test_macros.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "rpc/common/event_loop.h"
#include "tests/support/test_support.h"
#include "transport/factory/factory.h"
#include "transport/rdma/verbs.h"

namespace rdmarpc::transport {
namespace {

TEST_CASE("transport choice: rdma:// and auto:// follow the device") {
  rpc::EventLoop loop;
  auto pick = [&]() -> boost::asio::io_context& { return loop.context(); };
  auto ignore = [](std::shared_ptr<Connection>) {};
  const Status device = rdma::CheckRdmaAvailable();
  const char* rxe_ip = std::getenv("RXE_IP");
  if (!device.ok()) {
    INFO("no RDMA device here: " << device.message());
    CHECK(device.message().find("no RDMA device") != std::string::npos);
    const auto start = std::chrono::steady_clock::now();
    auto rdma = Listen(loop.context(), "rdma://127.0.0.1:0", {}, pick, ignore);
    REQUIRE_FALSE(rdma.ok());
    CHECK(rdma.status().code() == StatusCode::kFailedPrecondition);
    CHECK(rdma.status().message().find("no RDMA device") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
    auto fallback =
        Listen(loop.context(), "auto://127.0.0.1:0", {}, pick, ignore);
    REQUIRE(fallback.ok());
    CHECK((*fallback)->uri().rfind("tcp://", 0) == 0);
    // A channel to rdma:// fails fast (UNAVAILABLE, as a channel reports
    // every connect failure) and names the cause.
    rpc::Channel channel("rdma://127.0.0.1:1");
    const auto result = testing::CallSync(channel, "Echo", "");
    CHECK(result.status.code() == StatusCode::kUnavailable);
    CHECK(result.status.message().find("no RDMA device") != std::string::npos);
  } else {
    REQUIRE(rxe_ip != nullptr);
    auto chosen = Listen(loop.context(), std::string("auto://") + rxe_ip + ":0",
                         {}, pick, ignore);
    REQUIRE(chosen.ok());
    CHECK((*chosen)->uri().rfind("rdma://", 0) == 0);
  }
  loop.Stop();
}

// auto:// says which transport it took, and why, once: not again on every
// listen or reconnect that makes the same choice.
TEST_CASE("transport choice: auto:// logs its choice once") {
  rpc::EventLoop loop;
  auto pick = [&]() -> boost::asio::io_context& { return loop.context(); };
  auto ignore = [](std::shared_ptr<Connection>) {};
  const char* rxe_ip = std::getenv("RXE_IP");
  const std::string uri = std::string("auto://") +
                          (rxe_ip != nullptr ? rxe_ip : "127.0.0.1") + ":0";
  REQUIRE(Listen(loop.context(), uri, {}, pick, ignore).ok());
  testing::LogCapture log;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(Listen(loop.context(), uri, {}, pick, ignore).ok());
  }
  CHECK_FALSE(log.Contains(spdlog::level::info, ": using "));
  loop.Stop();
}

// A process out of file descriptors is told so, with the limit to raise,
// not that the machine has no RDMA device (rdma-core reports its failure to
// open sysfs as "no devices").
TEST_CASE("transport choice: out of file descriptors is said as such") {
  rlimit old{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &old) == 0);
  rlimit low = old;
  low.rlim_cur = std::min<rlim_t>(old.rlim_cur, 256);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &low) == 0);
  std::vector<int> taken;
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) {
    taken.push_back(fd);
  }
  const Status status = rdma::CheckRdmaAvailable();
  for (const int fd : taken) close(fd);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &old) == 0);
  INFO(status.ToString());
  CHECK(status.code() == StatusCode::kResourceExhausted);
  CHECK(status.message().find("Too many open files") != std::string::npos);
  CHECK(status.message().find("limit is " + std::to_string(low.rlim_cur)) !=
        std::string::npos);
  CHECK(status.message().find("ulimit -n") != std::string::npos);
  // With descriptors free again, the answer is the machine's.
  const Status again = rdma::CheckRdmaAvailable();
  CHECK(again.code() != StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace rdmarpc::transport
