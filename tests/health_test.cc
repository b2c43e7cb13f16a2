// The health service (include/rdmarpc/health.h) through its generated stubs,
// and a cluster channel's active health checks (ClusterOptions::health_check).
#include "rdmarpc/health.h"

#include <boost/asio/use_future.hpp>
#include <catch2/catch_test_macros.hpp>
#include <thread>

#include "proto/health.rdmarpc.h"
#include "tests/support/test_support.h"

namespace rdmarpc::testing {
namespace {

using boost::asio::use_future;
using health::v1::Health;
using health::v1::HealthCheckRequest;
using health::v1::HealthCheckResponse;

// A TestServer's service with health, on a server of this process.
struct HealthyServer {
  HealthyServer() {
    server.RegisterService(&service);
    status = rpc::EnableHealth(server);
    auto bound = server.Listen(ListenUri());
    if (!bound.ok()) throw std::runtime_error(bound.status().ToString());
    uri = *bound;
  }
  TestService service;
  rpc::Server server;
  rpc::HealthStatus* status;
  std::string uri;
};

HealthCheckRequest For(const std::string& service) {
  HealthCheckRequest request;
  request.set_service(service);
  return request;
}

TEST_CASE("health: Check answers each service's status") {
  HealthyServer server;
  Health::Stub stub(std::make_shared<rpc::Channel>(server.uri));
  auto check = [&](const std::string& service) {
    return stub
        .async_Check(For(service), rpc::CallOptions::WithTimeout(5s),
                     use_future)
        .get();
  };
  auto [status, reply] = check("");
  CHECK(status.ok());
  CHECK(reply.status() == HealthCheckResponse::SERVING);
  CHECK(std::get<1>(check("test.Test")).status() ==
        HealthCheckResponse::SERVING);
  CHECK(std::get<0>(check("no.Such")).code() == StatusCode::kNotFound);
  server.status->Set("test.Test", HealthCheckResponse::NOT_SERVING);
  CHECK(std::get<1>(check("test.Test")).status() ==
        HealthCheckResponse::NOT_SERVING);
  CHECK(std::get<1>(check("")).status() == HealthCheckResponse::SERVING);
}

TEST_CASE("health: Watch streams each change") {
  HealthyServer server;
  Health::Stub stub(std::make_shared<rpc::Channel>(server.uri));
  auto watch = stub.OpenWatch(For("test.Test"));
  auto next = [&] {
    auto [status, message] = watch->async_Read(use_future).get();
    REQUIRE(status.ok());
    REQUIRE(message.has_value());
    return message->status();
  };
  CHECK(next() == HealthCheckResponse::SERVING);
  server.status->Set("test.Test", HealthCheckResponse::NOT_SERVING);
  CHECK(next() == HealthCheckResponse::NOT_SERVING);
  server.status->Set("other.Service", HealthCheckResponse::NOT_SERVING);
  server.status->Set("test.Test", HealthCheckResponse::SERVING);
  CHECK(next() == HealthCheckResponse::SERVING);
  // A shutting-down server is not serving: said before it goes.
  std::thread stopping([&] { server.server.Shutdown(2s); });
  CHECK(next() == HealthCheckResponse::NOT_SERVING);
  watch->Cancel();
  stopping.join();

  // A service the server does not know (yet): SERVICE_UNKNOWN.
  HealthyServer other;
  Health::Stub other_stub(std::make_shared<rpc::Channel>(other.uri));
  auto unknown = other_stub.OpenWatch(For("later.Service"));
  auto [status, message] = unknown->async_Read(use_future).get();
  REQUIRE(message.has_value());
  CHECK(message->status() == HealthCheckResponse::SERVICE_UNKNOWN);
  other.status->Set("later.Service", HealthCheckResponse::SERVING);
  auto [status2, message2] = unknown->async_Read(use_future).get();
  REQUIRE(message2.has_value());
  CHECK(message2->status() == HealthCheckResponse::SERVING);
  unknown->Cancel();
}

TEST_CASE("health: a cluster sends no call to an endpoint not serving") {
  HealthyServer a;
  HealthyServer b;
  TestServer plain;  // No health service: counts as serving.
  rpc::ChannelOptions options;
  options.cluster.health_check.enabled = true;
  options.cluster.health_check.interval = 50ms;
  rpc::Channel channel("list://" + a.uri + "," + b.uri + "," + plain.uri,
                       options);
  REQUIRE(CallSync(channel, "Echo", "first").status.ok());
  REQUIRE(WaitFor([&] {
    size_t connected = 0;
    for (const auto& endpoint : channel.endpoints()) {
      connected += endpoint.connected;
    }
    return connected == 3;
  }));
  b.status->Set("", HealthCheckResponse::NOT_SERVING);
  REQUIRE(WaitFor([&] {
    for (const auto& endpoint : channel.endpoints()) {
      if (endpoint.uri == b.uri) return !endpoint.healthy;
    }
    return false;
  }));
  const int before = b.service.calls_started.load();
  for (int i = 0; i < 60; ++i) {
    REQUIRE(CallSync(channel, "Echo", "x").status.ok());
  }
  CHECK(b.service.calls_started.load() == before);
  CHECK(plain.calls_started() > 0);
  b.status->Set("", HealthCheckResponse::SERVING);
  REQUIRE(WaitFor([&] {
    for (const auto& endpoint : channel.endpoints()) {
      if (endpoint.uri == b.uri) return endpoint.healthy;
    }
    return false;
  }));
  for (int i = 0; i < 30; ++i) {
    REQUIRE(CallSync(channel, "Echo", "x").status.ok());
  }
  CHECK(b.service.calls_started.load() == before + 10);
}

}  // namespace
}  // namespace rdmarpc::testing
