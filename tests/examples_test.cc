// The echo and KV examples end to end, with concurrent clients.
#include <boost/asio/use_future.hpp>
#include <catch2/catch_test_macros.hpp>
#include <thread>
#include <vector>

#include "examples/echo/echo_service.h"
#include "examples/kv/kv_service.h"
#include "rdmarpc/client_context.h"
#include "rdmarpc/memory.h"
#include "rdmarpc/server.h"
#include "tests/support/test_support.h"

namespace rdmarpc::examples {
namespace {

using boost::asio::use_future;

TEST_CASE("echo: concurrent clients each get their own payloads back") {
  EchoImpl echo;
  rpc::Server server;
  server.RegisterService(&echo);
  const auto uri = server.Listen(testing::ListenUri());
  REQUIRE(uri.ok());

  constexpr int kClients = 8;
  constexpr int kCalls = 200;
  std::atomic<int> mismatches{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      Echo::Stub stub(std::make_shared<rpc::Channel>(*uri));
      for (int i = 0; i < kCalls; ++i) {
        EchoRequest request;
        // Sizes vary per call, so frames of many sizes interleave.
        request.set_payload(
            std::string(static_cast<size_t>((c * 977 + i * 131) % 70000),
                        static_cast<char>('a' + c)));
        auto [status, reply] = stub.async_Say(request, use_future).get();
        if (!status.ok() || reply.payload() != request.payload()) mismatches++;
      }
    });
  }
  for (auto& t : clients) t.join();
  CHECK(mismatches == 0);
  CHECK(server.stats().calls_started == kClients * kCalls);
}

struct KvFixture {
  explicit KvFixture(uint64_t capacity = 1 << 30) : kv(capacity) {
    server.RegisterService(&kv);
    uri = *server.Listen(testing::ListenUri());
  }
  std::unique_ptr<kv::KeyValue::Stub> NewStub() {
    return std::make_unique<kv::KeyValue::Stub>(
        std::make_shared<rpc::Channel>(uri));
  }
  kv::KeyValueImpl kv;
  rpc::Server server;
  std::string uri;
};

Status Put(kv::KeyValue::Stub& stub, const std::string& key,
           const std::string& value) {
  kv::PutRequest request;
  request.set_key(key);
  request.set_value(value);
  return std::get<0>(stub.async_Put(request, use_future).get());
}

std::pair<Status, std::string> Get(kv::KeyValue::Stub& stub,
                                   const std::string& key) {
  kv::GetRequest request;
  request.set_key(key);
  auto [status, reply] = stub.async_Get(request, use_future).get();
  return {status, reply.value()};
}

Status Delete(kv::KeyValue::Stub& stub, const std::string& key) {
  kv::DeleteRequest request;
  request.set_key(key);
  return std::get<0>(stub.async_Delete(request, use_future).get());
}

TEST_CASE("kv: put, get, delete, scan and their errors") {
  KvFixture f;
  auto stub = f.NewStub();
  REQUIRE(Put(*stub, "fruit/apple", "red").ok());
  REQUIRE(Put(*stub, "fruit/banana", "yellow").ok());
  REQUIRE(Put(*stub, "veg/leek", "green").ok());
  CHECK(Get(*stub, "fruit/apple").second == "red");
  CHECK(Get(*stub, "nope").first.code() == StatusCode::kNotFound);
  CHECK(Put(*stub, "", "x").code() == StatusCode::kInvalidArgument);
  CHECK(Get(*stub, "").first.code() == StatusCode::kInvalidArgument);

  kv::ScanRequest scan;
  scan.set_prefix("fruit/");
  auto [status, reply] = stub->async_Scan(scan, use_future).get();
  REQUIRE(status.ok());
  REQUIRE(reply.entries_size() == 2);
  CHECK(reply.entries(0).key() == "fruit/apple");
  CHECK(reply.entries(1).value_size() == 6);
  CHECK_FALSE(reply.truncated());
  scan.set_prefix("");
  scan.set_limit(2);
  auto [s2, limited] = stub->async_Scan(scan, use_future).get();
  CHECK(limited.entries_size() == 2);
  CHECK(limited.truncated());

  REQUIRE(Delete(*stub, "fruit/apple").ok());
  CHECK(Delete(*stub, "fruit/apple").code() == StatusCode::kNotFound);
  CHECK(Get(*stub, "fruit/apple").first.code() == StatusCode::kNotFound);
}

// Bulk (include/rdmarpc/bulk.h): a Put that lends its value, which the
// server pulls into its registered arena, and a Get whose value lands in the
// caller's memory.
TEST_CASE("kv: a lent value is pulled in, and a value lands where asked") {
  KvFixture f;
  auto stub = f.NewStub();
  auto memory = MemoryRegistration::Allocate(4 << 20);
  REQUIRE(memory.ok());
  std::byte* const lent = (*memory)->data();
  std::byte* const destination = (*memory)->data() + (2 << 20);
  constexpr size_t kSize = (1 << 20) + 3;
  for (size_t i = 0; i < kSize; ++i) lent[i] = std::byte((i * 7) & 0xff);
  const std::string expected(reinterpret_cast<const char*>(lent), kSize);
  const auto put_lent = [&](const std::string& key, size_t size) {
    kv::PutRequest request;
    request.set_key(key);
    rpc::CallOptions options;
    options.bulk.push_back({lent, size, BulkAccess::kRead});
    return std::get<0>(stub->async_Put(request, options, use_future).get());
  };
  const auto get_into = [&](const std::string& key, size_t room,
                            Buffer* attachment) {
    kv::GetRequest request;
    request.set_key(key);
    request.set_value_as_attachment(true);
    ClientContext context;
    context.set_response_destination({destination, room});
    auto [status, reply] = stub->async_Get(context, request, use_future).get();
    CHECK(reply.value().empty());
    *attachment = context.TakeResponseAttachment();
    return status;
  };
  REQUIRE(put_lent("big", kSize).ok());
  CHECK(Get(*stub, "big").second == expected);  // As any value.
  Buffer got;
  REQUIRE(get_into("big", 2 << 20, &got).ok());
  CHECK(got.data() == destination);
  CHECK(got.view() == expected);
  // A value put in its message lands there too.
  REQUIRE(Put(*stub, "small", "tiny").ok());
  REQUIRE(get_into("small", 64, &got).ok());
  CHECK(got.data() == destination);
  CHECK(got.view() == "tiny");
  // Overwritten by a smaller lent value; a destination too small.
  REQUIRE(put_lent("big", 100).ok());
  CHECK(Get(*stub, "big").second == expected.substr(0, 100));
  CHECK(get_into("big", 99, &got).code() == StatusCode::kResourceExhausted);
  CHECK(put_lent("", 10).code() == StatusCode::kInvalidArgument);
}

// The streaming methods, with more values than a stream's initial window
// (16 messages, 4 MiB) holds, so both directions wait on flow control.
TEST_CASE("kv: PutStream and ScanStream move many values both ways") {
  KvFixture f;
  auto stub = f.NewStub();
  constexpr int kKeys = 40;
  const auto value_of = [](int i) {
    return std::string(256 << 10, static_cast<char>('a' + i % 26)) +
           std::to_string(i);
  };
  auto put = stub->OpenPutStream();
  for (int i = 0; i < kKeys; ++i) {
    kv::PutRequest request;
    request.set_key("bulk/" + std::to_string(1000 + i));
    request.set_value(value_of(i));
    REQUIRE(put->async_Write(request, use_future).get().ok());
  }
  put->WritesDone();
  auto [put_status, stored] = put->async_Finish(use_future).get();
  REQUIRE(put_status.ok());
  CHECK(stored.keys() == kKeys);

  kv::ScanRequest scan;
  scan.set_prefix("bulk/");
  auto stream = stub->OpenScanStream(scan);
  int read = 0;
  for (;;) {
    auto [status, entry] = stream->async_Read(use_future).get();
    if (!entry) {
      CHECK(status.ok());
      break;
    }
    CHECK(entry->key() == "bulk/" + std::to_string(1000 + read));
    CHECK(entry->value() == value_of(read));
    ++read;
  }
  CHECK(read == kKeys);

  // A put that fails ends the stream with its error; those before it stay.
  put = stub->OpenPutStream();
  kv::PutRequest request;
  request.set_key("kept");
  REQUIRE(put->async_Write(request, use_future).get().ok());
  request.set_key("");
  // May fail: the server may have ended the call already.
  put->async_Write(request, use_future).get().IgnoreError();
  put->WritesDone();
  CHECK(std::get<0>(put->async_Finish(use_future).get()).code() ==
        StatusCode::kInvalidArgument);
  CHECK(Get(*stub, "kept").first.ok());
}

TEST_CASE("kv: the store refuses to grow past its capacity") {
  KvFixture f(/*capacity=*/1000);
  auto stub = f.NewStub();
  REQUIRE(Put(*stub, "a", std::string(600, 'x')).ok());
  const Status full = Put(*stub, "b", std::string(600, 'y'));
  CHECK(full.code() == StatusCode::kResourceExhausted);
  // Replacing a value only counts the difference.
  CHECK(Put(*stub, "a", std::string(900, 'z')).ok());
  REQUIRE(Delete(*stub, "a").ok());
  CHECK(Put(*stub, "b", std::string(600, 'y')).ok());
}

TEST_CASE("kv: concurrent clients on disjoint and shared keys") {
  KvFixture f;
  constexpr int kClients = 8;
  constexpr int kKeys = 100;
  std::atomic<int> errors{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      auto stub = f.NewStub();
      for (int i = 0; i < kKeys; ++i) {
        const std::string mine =
            "c" + std::to_string(c) + "/" + std::to_string(i);
        if (!Put(*stub, mine, mine + "=v").ok()) errors++;
        // Everyone writes the shared keys too.
        if (!Put(*stub, "shared/" + std::to_string(i % 10), mine).ok())
          errors++;
      }
      for (int i = 0; i < kKeys; ++i) {
        const std::string mine =
            "c" + std::to_string(c) + "/" + std::to_string(i);
        auto [status, value] = Get(*stub, mine);
        if (!status.ok() || value != mine + "=v") errors++;
        if (i % 2 == 0 && !Delete(*stub, mine).ok()) errors++;
      }
    });
  }
  for (auto& t : clients) t.join();
  CHECK(errors == 0);

  auto stub = f.NewStub();
  kv::ScanRequest scan;
  scan.set_limit(10000);
  auto [status, reply] = stub->async_Scan(scan, use_future).get();
  REQUIRE(status.ok());
  // Half of each client's keys remain, plus the ten shared ones.
  CHECK(reply.entries_size() == kClients * kKeys / 2 + 10);
  // The byte count matches what is stored.
  uint64_t bytes = 0;
  for (const auto& entry : reply.entries()) {
    bytes += entry.key().size() + entry.value_size();
  }
  CHECK(f.kv.store().bytes() == bytes);
}

}  // namespace
}  // namespace rdmarpc::examples
