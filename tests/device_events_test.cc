// Device and port events under a running server and client, neither
// restarted:
//  - The port goes down (`ip link set NETDEV down` under rdma_rxe, as a cable
//    pulled or a switch port failing): a call in flight fails UNAVAILABLE
//    naming the port, new calls fail fast, TCP keeps serving, and once the
//    port is up and the device works again the same channel works. (rxe in
//    Linux 6.1 receives nothing more once its port has flapped with
//    connections on it, rping's too, until the device is created anew:
//    docs/reliability.md. The test does that, as an operator would.) While
//    the port is down, the closed connections' rdma_cm ids wait, undestroyed
//    (CmChannel::Park), for it to come back.
//  - The device is removed (`rdma link delete`, as a hot-unplug or a driver
//    unload): the removal completes instead of waiting forever for the
//    processes to let go, a call in flight fails UNAVAILABLE naming the
//    removal, every registered byte is freed, and once the device is back
//    the same channel works.
//
// Needs root and a Soft-RoCE device it may take down, delete and re-create:
// it runs last in the Soft-RoCE VM's suite (tools/softroce/suite), never
// natively.
#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "tests/support/test_support.h"

namespace rdmarpc::testing {
namespace {

// Runs `command` in a thread of its own: `rdma link delete` blocks in the
// kernel, unkillable, for as long as a process holds the device.
std::future<int> RunDetached(std::string command) {
  std::promise<int> promise;
  auto future = promise.get_future();
  std::thread([command = std::move(command),
               promise = std::move(promise)]() mutable {
    promise.set_value(std::system(command.c_str()));
  }).detach();
  return future;
}

// Runs `command`, which must succeed.
void Shell(const std::string& command) {
  INFO(command);
  REQUIRE(std::system(command.c_str()) == 0);
}

// A server listening on the device's address and on TCP loopback, a channel
// to each (backing off briefly), and a first call on both.
struct Served {
  Served() {
    server.RegisterService(&service);
    const StatusOr<std::string> rdma_uri = server.Listen("rdma://" + ip + ":0");
    REQUIRE(rdma_uri.ok());
    const StatusOr<std::string> tcp_uri = server.Listen("tcp://127.0.0.1:0");
    REQUIRE(tcp_uri.ok());
    rpc::ChannelOptions quick;
    quick.initial_backoff = std::chrono::milliseconds(200);
    quick.max_backoff = std::chrono::milliseconds(500);
    rdma = std::make_unique<rpc::Channel>(*rdma_uri, quick);
    tcp = std::make_unique<rpc::Channel>(*tcp_uri);
    REQUIRE(CallSync(*rdma, "Echo", "before").status.ok());
    REQUIRE(CallSync(*tcp, "Echo", "before").status.ok());
  }

  // A call the server answers only after 20 s (60 s deadline), under way
  // once this returns: nothing moves on its connection meanwhile.
  std::future<CallResult> SleepingCall() {
    auto promise = std::make_shared<std::promise<CallResult>>();
    rdma->Call("test.Test", "SleepMs", Buffer::CopyOf("20000"),
               rpc::CallOptions::WithTimeout(std::chrono::seconds(60)),
               [promise](const Status& status, Buffer response) {
                 promise->set_value({status, std::string(response.view())});
               });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return promise->get_future();
  }

  // Once the device works again: the same channel's next call, waiting for
  // the connection, succeeds.
  void CheckRdmaBack() {
    rpc::CallOptions patient =
        rpc::CallOptions::WithTimeout(std::chrono::seconds(30));
    patient.wait_for_ready = true;
    const CallResult after = CallSync(*rdma, "Echo", "after", patient);
    INFO(after.status.ToString());
    CHECK(after.status.ok());
    CHECK(after.response == "after");
  }

  const std::string ip = RequireEnv("RXE_IP");
  const std::string device = RequireEnv("RXE_DEV");
  const std::string netdev = RequireEnv("RXE_NETDEV");
  TestService service;
  rpc::Server server;
  std::unique_ptr<rpc::Channel> rdma;
  std::unique_ptr<rpc::Channel> tcp;
};

TEST_CASE("a port that goes down fails its calls, and works once it is up",
          "[port]") {
  Served served;
  // Only the port event can tell the sleeping call's connection its port is
  // gone (the keepalive, 10 s by default, comes later).
  auto in_flight = served.SleepingCall();

  const auto start = std::chrono::steady_clock::now();
  Shell("ip link set " + served.netdev + " down");
  REQUIRE(in_flight.wait_for(std::chrono::seconds(9)) ==
          std::future_status::ready);
  const CallResult result = in_flight.get();
  INFO(result.status.ToString());
  CHECK(result.status.code() == StatusCode::kUnavailable);
  // "port 1 of rxe0 is down" when the grace ends; or, when something was
  // sent meanwhile (a keepalive PING), its completion error, naming the
  // port's event: "...; port 1 of rxe0 went down".
  const std::string& why = result.status.message();
  CHECK(why.find("port 1 of ") != std::string::npos);
  CHECK((why.find(" is down") != std::string::npos ||
         why.find(" went down") != std::string::npos));

  // While it is down: a new call fails fast, and TCP serves on.
  const auto call_start = std::chrono::steady_clock::now();
  const CallResult down = CallSync(*served.rdma, "Echo", "during");
  INFO(down.status.ToString());
  CHECK(down.status.code() == StatusCode::kUnavailable);
  CHECK(std::chrono::steady_clock::now() - call_start <
        std::chrono::seconds(3));
  CHECK(CallSync(*served.tcp, "Echo", "during").status.ok());
  // Both ends' ids wait for the port: destroying them now would send each
  // peer a DREQ on a port that cannot carry it, which rxe in Linux 6.1 can
  // leave uncompleted, and rdma_destroy_id then never returns.
  CHECK(ParkedCmIds() == 2);

  Shell("ip link set " + served.netdev + " up");
  // Once it is up, they go (on the port's IBV_EVENT_PORT_ACTIVE).
  for (int i = 0; i < 100 && ParkedCmIds() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(ParkedCmIds() == 0);
  Shell("rdma link delete " + served.device + " && rdma link add " +
        served.device + " type rxe netdev " + served.netdev);
  served.CheckRdmaBack();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
}

TEST_CASE("a removed device is let go of, and used again when it is back",
          "[removal]") {
  Served served;
  REQUIRE(RegisteredBytes() > 0);
  auto in_flight = served.SleepingCall();

  const auto start = std::chrono::steady_clock::now();
  auto removed = RunDetached("rdma link delete " + served.device);
  // Without rdmarpc letting go of the device this never returns.
  REQUIRE(removed.wait_for(std::chrono::seconds(30)) ==
          std::future_status::ready);
  CHECK(removed.get() == 0);

  REQUIRE(in_flight.wait_for(std::chrono::seconds(10)) ==
          std::future_status::ready);
  const CallResult result = in_flight.get();
  INFO(result.status.ToString());
  CHECK(result.status.code() == StatusCode::kUnavailable);
  CHECK(result.status.message().find("was removed") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));

  // The server serves on; nothing registered with the device is left.
  CHECK(CallSync(*served.tcp, "Echo", "during").status.ok());
  CHECK(RegisteredBytes() == 0);

  // The device comes back: the listener listens again and the channel
  // reconnects.
  Shell("rdma link add " + served.device + " type rxe netdev " + served.netdev);
  served.CheckRdmaBack();
  CHECK(CallSync(*served.tcp, "Echo", "after").status.ok());
}

}  // namespace
}  // namespace rdmarpc::testing
