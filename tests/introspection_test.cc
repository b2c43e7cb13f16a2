// Metrics (histogram, per-method counts by status, per-connection counters)
// and the rdmarpc.Introspection service, over the configured transport.
#include "rdmarpc/introspection.h"

#include <google/protobuf/descriptor.h>

#include <boost/asio/use_future.hpp>
#include <catch2/catch_test_macros.hpp>
#include <cmath>
#include <cstring>
#include <random>

#include "base/log.h"
#include "base/log_throttle.h"
#include "proto/introspection.rdmarpc.h"
#include "rdmarpc/memory.h"
#include "rpc/server/metrics.h"
#include "tests/proto/multi.rdmarpc.h"
#include "tests/support/test_support.h"

namespace rdmarpc::test {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using rpc::LatencyHistogram;

TEST_CASE("histogram: every latency lies inside its bucket") {
  for (int64_t ns :
       {int64_t{0}, int64_t{1}, int64_t{999}, int64_t{1000}, int64_t{1124},
        int64_t{1125}, int64_t{2000}, int64_t{123456789}, int64_t{1} << 50}) {
    const int bucket = LatencyHistogram::BucketOf(std::chrono::nanoseconds(ns));
    INFO(ns << " ns -> bucket " << bucket);
    REQUIRE(bucket >= 0);
    REQUIRE(bucket < LatencyHistogram::kBuckets);
    if (bucket < LatencyHistogram::kBuckets - 1) {
      CHECK(ns / 1000.0 < LatencyHistogram::UpperBoundUs(bucket));
    }
    if (bucket > 0)
      CHECK(ns / 1000.0 >= LatencyHistogram::UpperBoundUs(bucket - 1));
  }
  for (int b = 1; b < LatencyHistogram::kBuckets; ++b) {
    REQUIRE(LatencyHistogram::UpperBoundUs(b) >
            LatencyHistogram::UpperBoundUs(b - 1));
  }
}

TEST_CASE("histogram: percentiles are within one bucket (12.5%)") {
  LatencyHistogram histogram;
  std::mt19937_64 random(7);
  std::lognormal_distribution<double> distribution(std::log(20000.0), 1.0);
  std::vector<int64_t> values;
  for (int i = 0; i < 100000; ++i) {
    values.push_back(static_cast<int64_t>(distribution(random)));
    histogram.Record(std::chrono::nanoseconds(values.back()));
  }
  std::sort(values.begin(), values.end());
  const auto snapshot = histogram.Read();
  CHECK(snapshot.total == values.size());
  CHECK(snapshot.max_ns == static_cast<uint64_t>(values.back()));
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    const double exact =
        values[static_cast<size_t>(std::ceil(q * values.size())) - 1] / 1000.0;
    const double estimate = snapshot.PercentileUs(q);
    INFO("q " << q << " exact " << exact << " estimate " << estimate);
    CHECK(estimate >= exact);
    CHECK(estimate <= exact * 1.125 + 0.001);
  }
}

// Calculator (typed_services.h), test.Test (built by hand: no descriptor)
// and rdmarpc.Introspection on a TestServer: in this process, or on the
// other host in the two-host suite, so metrics are read over RPC.
struct Fixture {
  // `pooled_grants`: TransportOptions::rdma_pooled_grants on both ends.
  explicit Fixture(bool pooled_grants = false)
      : server(ServerOptionsWith(pooled_grants), "",
               testing::kHostCalculator | testing::kHostIntrospection |
                   testing::kHostBlob),
        channel(std::make_shared<rpc::Channel>(
            server.uri, ChannelOptionsWith(pooled_grants))) {}
  static rpc::ServerOptions ServerOptionsWith(bool pooled_grants) {
    rpc::ServerOptions options;
    options.transport.rdma_pooled_grants = pooled_grants;
    return options;
  }
  static rpc::ChannelOptions ChannelOptionsWith(bool pooled_grants) {
    rpc::ChannelOptions options;
    options.transport.rdma_pooled_grants = pooled_grants;
    return options;
  }
  testing::TestServer server;
  std::shared_ptr<rpc::Channel> channel;
};

ServerMetrics GetMetrics(Fixture& f) {
  Introspection::Stub stub(f.channel);
  auto [status, metrics] = stub.async_GetMetrics({}, asio::use_future).get();
  REQUIRE(status.ok());
  return metrics;
}

Status Add(Fixture& f, int64_t a, int64_t b) {
  Pair pair;
  pair.set_a(a);
  pair.set_b(b);
  Calculator::Stub stub(f.channel);
  return std::get<0>(stub.async_Add(pair, asio::use_future).get());
}

TEST_CASE("metrics: calls are counted per method, by status, with latency") {
  Fixture f;
  for (int i = 0; i < 7; ++i) REQUIRE(Add(f, i, 1).ok());
  for (int i = 0; i < 3; ++i) {
    CHECK(Add(f, -1, 1).code() == StatusCode::kOutOfRange);
  }
  CHECK(testing::CallSync(*f.channel, "Nope", "").status.code() ==
        StatusCode::kUnimplemented);
  const ServerMetrics metrics = GetMetrics(f);
  const MethodMetrics* add = nullptr;
  for (const auto& m : metrics.methods()) {
    if (m.service() == "rdmarpc.test.Calculator" && m.method() == "Add") {
      add = &m;
    }
  }
  REQUIRE(add != nullptr);
  CHECK(add->started() == 10);
  std::map<std::string, uint64_t> by_status;
  uint64_t in_histogram = 0;
  for (const auto& s : add->finished()) by_status[s.name()] = s.count();
  for (const auto& b : add->latency()) in_histogram += b.count();
  CHECK(by_status ==
        std::map<std::string, uint64_t>{{"OK", 7}, {"OUT_OF_RANGE", 3}});
  CHECK(in_histogram == 10);
  CHECK(add->p50_us() > 0);
  CHECK(add->p50_us() <= add->p99_us());
  CHECK(add->p99_us() <= add->max_us());
  CHECK(add->request_bytes() > 0);
  CHECK(metrics.unknown_method_calls() == 1);
  // This connection, seen from the server.
  REQUIRE(metrics.connections_size() == 1);
  const ConnectionMetrics& connection = metrics.connections(0);
  // The 11 calls, and the GetMetrics call reading them.
  CHECK(connection.frames_received() == 12);
  CHECK(connection.frames_sent() >= 10);
  CHECK(connection.bytes_received() > 0);
  if (f.server.uri.rfind("rdma://", 0) == 0) {
    CHECK(connection.peer().rfind("rdma://", 0) == 0);
    CHECK(connection.inline_sends() > 0);
    CHECK(connection.rnr_errors() == 0);
  } else {
    CHECK(connection.peer().rfind("tcp://", 0) == 0);
    CHECK(connection.write_calls() > 0);
  }
}

TEST_CASE("introspection: lists services, reflects descriptors, over RPC") {
  Fixture f;
  Introspection::Stub stub(f.channel);
  auto [status, list] = stub.async_ListServices({}, asio::use_future).get();
  REQUIRE(status.ok());
  std::map<std::string, const ServiceInfo*> services;
  for (const auto& s : list.services()) services[s.name()] = &s;
  REQUIRE(services.count("rdmarpc.test.Calculator"));
  REQUIRE(services.count("test.Test"));
  REQUIRE(services.count("rdmarpc.Introspection"));
  CHECK(services["rdmarpc.test.Calculator"]->has_descriptor());
  CHECK_FALSE(services["test.Test"]->has_descriptor());
  CHECK(services["rdmarpc.test.Calculator"]->methods_size() == 3);

  // The descriptors build a pool in which the service and its message
  // types (with their imports) resolve.
  GetFileDescriptorsRequest request;
  request.set_service("rdmarpc.test.Calculator");
  auto [got, files] =
      stub.async_GetFileDescriptors(request, asio::use_future).get();
  REQUIRE(got.ok());
  google::protobuf::DescriptorPool pool;
  for (const auto& file : files.files().file()) {
    REQUIRE(pool.BuildFile(file) != nullptr);
  }
  const auto* calculator = pool.FindServiceByName("rdmarpc.test.Calculator");
  REQUIRE(calculator != nullptr);
  CHECK(calculator->FindMethodByName("Add")->input_type()->full_name() ==
        "rdmarpc.test.Pair");
  CHECK(pool.FindMessageTypeByName("google.protobuf.Timestamp") != nullptr);

  request.set_service("test.Test");
  CHECK(std::get<0>(
            stub.async_GetFileDescriptors(request, asio::use_future).get())
            .code() == StatusCode::kFailedPrecondition);
  request.set_service("no.Such");
  CHECK(std::get<0>(
            stub.async_GetFileDescriptors(request, asio::use_future).get())
            .code() == StatusCode::kNotFound);

  auto [metrics_status, metrics] =
      stub.async_GetMetrics({}, asio::use_future).get();
  REQUIRE(metrics_status.ok());
  CHECK(metrics.calls_started() >= 4);
  CHECK(metrics.connections_size() == 1);
}

// The server process's RDMA resources in GetMetrics; and the warm pools at
// work: a thousand small calls register no memory at all.
TEST_CASE("metrics: RDMA resources, and no registration per small call") {
  Fixture f;
  // Warm-up. A GetMetrics answer is no small call: past the inline limit,
  // it is the first to need the server's send pool (registered as it is
  // sent, so after the count it carries).
  REQUIRE(testing::CallSync(*f.channel, "Echo", "warm").status.ok());
  GetMetrics(f);
  const ServerMetrics before = GetMetrics(f);
  for (int i = 0; i < 1000; ++i) {
    REQUIRE(testing::CallSync(*f.channel, "Echo", "small").status.ok());
  }
  const ServerMetrics after = GetMetrics(f);
  const RdmaResources& rdma = after.rdma();
  INFO(rdma.ShortDebugString());
  if (testing::OverRdma()) {
    CHECK(rdma.queue_pairs() >= 1);
    CHECK(rdma.pooled_bytes() > 0);
    CHECK(rdma.registered_bytes() >= rdma.pooled_bytes());
    CHECK(rdma.completions_polled() >=
          before.rdma().completions_polled() + 1000);
  } else {
    CHECK(rdma.queue_pairs() == 0);
    CHECK(rdma.registered_bytes() == 0);
  }
  CHECK(rdma.registrations() == before.rdma().registrations());
}

// Large calls too: requests and responses past the receive buffer size go by
// rendezvous, into grant-pool blocks behind memory windows (transport/rdma/
// grant_pool.h), and are sent from the loop's bounce chunks. Once those have
// grown, 200 large calls register nothing, on either side (both run in this
// process, and the count is the process's). (One registration a call would
// count 200; more calls add time, 40 s in the emulated VM, and no check.)
TEST_CASE("metrics: no registration per large call") {
  Fixture f(/*pooled_grants=*/true);
  const std::vector<std::string> payloads = {std::string(20 << 10, 'a'),
                                             std::string(64 << 10, 'b'),
                                             std::string(100 << 10, 'c')};
  for (const std::string& payload : payloads) {  // Warm-up.
    REQUIRE(testing::CallSync(*f.channel, "Echo", payload).status.ok());
  }
  GetMetrics(f);  // Its answer may grow the server's send pool (see above).
  const ServerMetrics before = GetMetrics(f);
  for (int i = 0; i < 200; ++i) {
    const std::string& payload = payloads[i % payloads.size()];
    const testing::CallResult result =
        testing::CallSync(*f.channel, "Echo", payload);
    REQUIRE(result.status.ok());
    REQUIRE(result.response.size() == payload.size());
  }
  const ServerMetrics after = GetMetrics(f);
  INFO(after.rdma().ShortDebugString());
  CHECK(after.rdma().registrations() == before.rdma().registrations());
}

// The same with the bulk as typed attachments (include/rdmarpc/payload.h): sent
// from a MemoryRegistration (registered once), bounced back by the handler from
// the grant block it landed in, 200 calls register nothing.
TEST_CASE("metrics: no registration per call with large attachments") {
  Fixture f(/*pooled_grants=*/true);
  Blob::Stub stub(f.channel);
  constexpr size_t kSize = 256 << 10;
  auto arena = transport::MemoryRegistration::Allocate(2 * kSize);
  REQUIRE(arena.ok());
  std::memset((*arena)->Slice(0, 2 * kSize).data(), 'q', 2 * kSize);
  const auto bounce = [&](size_t offset) {
    rpc::ClientContext context;
    context.set_request_attachment((*arena)->Slice(offset, kSize));
    BlobInfo info;
    info.set_label("bulk");
    auto [status, seen] =
        stub.async_Bounce(context, info, asio::use_future).get();
    REQUIRE(status.ok());
    REQUIRE(seen.attachment_size() == kSize);
    REQUIRE(context.response_attachment().size() == kSize);
  };
  for (size_t i = 0; i < 8; ++i) bounce((i % 2) * kSize);  // Warm-up.
  GetMetrics(f);  // Its answer may grow the server's send pool.
  const ServerMetrics before = GetMetrics(f);
  for (size_t i = 0; i < 200; ++i) bounce((i % 2) * kSize);
  const ServerMetrics after = GetMetrics(f);
  INFO(after.rdma().ShortDebugString());
  CHECK(after.rdma().registrations() == before.rdma().registrations());
}

// What this process logs as a client and as a server: both ends run here,
// in the two-host suite too.
TEST_CASE("logs: connection lifecycle at info, calls at debug only") {
  const auto level = Log().level();
  for (const auto at : {spdlog::level::info, spdlog::level::debug}) {
    Log().set_level(at);
    ForgetThrottledLogs();  // Each level sees the first lines of a host.
    testing::LogCapture logs;
    {
      testing::TestService generic;
      std::vector<std::unique_ptr<rpc::Service>> hosted;
      rpc::Server server;
      testing::HostServices(server, generic, testing::kHostCalculator, hosted);
      const StatusOr<std::string> uri = server.Listen(testing::ListenUri());
      REQUIRE(uri.ok());
      Calculator::Stub stub(std::make_shared<rpc::Channel>(*uri));
      Pair pair;
      pair.set_a(1);
      pair.set_b(2);
      REQUIRE(std::get<0>(stub.async_Add(pair, asio::use_future).get()).ok());
    }  // Channel, then server, go away: the connection closes.
    INFO("level " << spdlog::level::to_string_view(at).data());
    CHECK(logs.Contains(spdlog::level::info, "server listening on"));
    CHECK(logs.Contains(spdlog::level::info, ": accepted"));
    CHECK(logs.Contains(spdlog::level::info, ": connected ("));
    CHECK(logs.Contains(spdlog::level::info, "connection closed: "));
    // Per call: debug, and only when debug is on.
    const bool per_call = logs.Contains(
        spdlog::level::debug, "rdmarpc.test.Calculator/Add finished OK");
    CHECK(per_call == (at == spdlog::level::debug));
    CHECK_FALSE(logs.Contains(spdlog::level::info, "Calculator/Add"));
  }
  Log().set_level(level);
}

}  // namespace
}  // namespace rdmarpc::test
