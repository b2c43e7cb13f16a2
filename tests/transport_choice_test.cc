// Choosing a transport: rdma:// needs a usable device and says so at once
// when there is none; auto:// takes rdma when it can and tcp otherwise.
// Runs natively (no device) and in the Soft-RoCE VM (a device).
#include <catch2/catch_test_macros.hpp>
#include <cstdlib>

#include "rpc/event_loop.h"
#include "tests/test_support.h"
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

}  // namespace
}  // namespace rdmarpc::transport
