// No heap allocation per call in steady state, on either side: counts
// operator new per thread (the client's event loop, the server's worker)
// across thousands of echo calls after a warm-up, over the transport under
// test (tcp natively, rdma in the Soft-RoCE VM).
#pragma GCC diagnostic ignored \
    "-Wmismatched-new-delete"  // Replaces new/delete.
#include <atomic>
#include <boost/asio/post.hpp>
#include <catch2/catch_test_macros.hpp>
#include <cstdlib>
#include <future>
#include <new>
#include <thread>
#include <vector>

#include "examples/echo/echo.rdmarpc.h"
#include "tests/support/test_support.h"

namespace {
thread_local uint64_t allocations = 0;
std::atomic<bool> counting{false};
}  // namespace

void* operator new(size_t size) {
  if (counting.load(std::memory_order_relaxed)) ++allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace rdmarpc::testing {
namespace {

TEST_CASE("allocation: a call allocates nothing on either side") {
  std::atomic<uint64_t> server_count{0};
  rpc::ServerOptions options;
  options.workers = 1;
  rpc::Service echo("alloc.Echo");
  echo.AddMethod("Say", [](std::shared_ptr<rpc::ServerCall> call) {
    call->Finish(Status(), Buffer::Borrow(call->request().span()));
  });
  echo.AddMethod("Count", [&](std::shared_ptr<rpc::ServerCall> call) {
    server_count = allocations;  // The worker thread's own count.
    call->Finish(Status());
  });
  rpc::Server server(options);
  server.RegisterService(&echo);
  auto uri = server.Listen(ListenUri());
  REQUIRE(uri.ok());
  rpc::Channel channel(*uri);
  // Requests naming their method by id (as generated stubs do) and by name.
  for (const bool by_id : {true, false}) {
    for (size_t size : {size_t{16}, size_t{4096}}) {
      std::vector<std::byte> payload(size, std::byte{7});
      // Calls issued from the channel's own thread, each from the last one's
      // completion; returns that thread's allocation count at the end.
      auto run = [&](int n, const char* method) {
        std::promise<uint64_t> done;
        int left = n;
        const rpc::MethodRef ref("alloc.Echo", method);
        std::function<void()> next = [&] {
          auto on_done = [&](const Status& status, Buffer response) {
            if (!status.ok() || (method[0] == 'S' && response.size() != size)) {
              done.set_value(~uint64_t{0});
              return;
            }
            if (--left == 0) return done.set_value(allocations);
            next();
          };
          Buffer request =
              Buffer::Borrow(std::span(payload.data(), payload.size()));
          if (by_id) {
            channel.Call(ref, std::move(request), {}, std::move(on_done));
          } else {
            channel.Call(ref.service(), ref.method(), std::move(request), {},
                         std::move(on_done));
          }
        };
        boost::asio::post(channel.executor(), next);
        return done.get_future().get();
      };
      REQUIRE(run(2000, "Say") != ~uint64_t{0});  // Warm up.
      counting = true;
      const uint64_t client_before = run(1, "Count");
      const uint64_t server_before = server_count;
      constexpr int kCalls = 5000;
      const uint64_t client_after = run(kCalls, "Say");
      run(1, "Count");
      const uint64_t server_after = server_count;
      counting = false;
      REQUIRE(client_after != ~uint64_t{0});
      const double client = double(client_after - client_before) / kCalls;
      const double server = double(server_after - server_before) / kCalls;
      INFO((by_id ? "by id, " : "by name, ")
           << size << " B: " << client
           << " allocations per call on the client, " << server
           << " on the server");
      // A handful over thousands of calls is a container growing once, not a
      // per-call allocation.
      CHECK(client < 0.01);
      CHECK(server < 0.01);
    }
  }
}

// Application threads call too: the call itself (Channel::Call, the frame,
// the hand-off to the connection's loop) must not allocate on them either.
TEST_CASE("allocation: a call from an application thread allocates nothing") {
  rpc::ServerOptions options;
  options.workers = 1;
  rpc::Service echo("alloc.Echo");
  echo.AddMethod("Say", [](std::shared_ptr<rpc::ServerCall> call) {
    call->Finish(Status(), Buffer::Borrow(call->request().span()));
  });
  rpc::Server server(options);
  server.RegisterService(&echo);
  auto uri = server.Listen(ListenUri());
  REQUIRE(uri.ok());
  rpc::Channel channel(*uri);
  std::vector<std::byte> payload(16, std::byte{7});
  std::atomic<int> done{0};
  std::atomic<int> failed{0};
  auto call = [&] {  // One call, waited for without allocating (no future).
    const int before = done.load();
    channel.Call("alloc.Echo", "Say",
                 Buffer::Borrow(std::span(payload.data(), payload.size())), {},
                 [&](const Status& status, Buffer) {
                   if (!status.ok()) failed++;
                   done++;
                 });
    while (done.load() == before) std::this_thread::yield();
  };
  for (int i = 0; i < 2000; ++i) call();  // Warm up.
  counting = true;
  const uint64_t before = allocations;
  constexpr int kCalls = 3000;
  for (int i = 0; i < kCalls; ++i) call();
  const uint64_t after = allocations;
  counting = false;
  CHECK(failed == 0);
  const double per_call = double(after - before) / kCalls;
  INFO(per_call << " allocations per call on the calling thread");
  CHECK(per_call < 0.01);
}

// The generated stub and service. Messages without fields on the heap (an
// empty EchoRequest and EchoReply) cost no allocation on either side: the
// request's and reply's bytes come from the frames' pools, the server's
// TypedCall too, and a small callback fits its call's completion. With a
// 64-byte payload the server still allocates nothing: it parses into, and
// fills, request and response objects kept from its earlier calls
// (tunables::kTypedSpareMessages). Above kTypedSpareMessageBytes they are
// not kept, and each call allocates again. The client keeps its responses
// the same way.
TEST_CASE(
    "allocation: a typed call allocates nothing, its server's messages "
    "kept") {
  class Copier final : public examples::Echo::Service {
   public:
    void Say(std::shared_ptr<
             rpc::TypedCall<examples::EchoRequest, examples::EchoReply>>
                 call) override {
      if (!call->request().payload().empty()) {
        call->response().set_payload(call->request().payload());
      }
      call->Finish();
    }
  } typed;
  std::atomic<uint64_t> server_count{0};
  rpc::Service count("alloc.Count");
  count.AddMethod("Count", [&](std::shared_ptr<rpc::ServerCall> call) {
    server_count = allocations;  // The (one) worker thread's own count.
    call->Finish(Status());
  });
  rpc::ServerOptions options;
  options.workers = 1;
  rpc::Server server(options);
  server.RegisterService(&typed);
  server.RegisterService(&count);
  auto uri = server.Listen(ListenUri());
  REQUIRE(uri.ok());
  auto channel = std::make_shared<rpc::Channel>(*uri);
  examples::Echo::Stub stub(channel);
  examples::EchoRequest request;
  // Typed calls issued from the channel's own thread, each from the last
  // one's completion; returns that thread's allocation count at the end.
  auto run = [&](int n) {
    std::promise<uint64_t> done;
    int left = n;
    std::function<void()> next = [&] {
      stub.async_Say(
          request, [&](const Status& status, const examples::EchoReply& reply) {
            if (!status.ok() || reply.payload() != request.payload()) {
              return done.set_value(~uint64_t{0});
            }
            if (--left == 0) return done.set_value(allocations);
            next();
          });
    };
    boost::asio::post(channel->executor(), next);
    return done.get_future().get();
  };
  // The server's count, read on its worker by a generic call.
  auto server_allocations = [&] {
    std::promise<void> done;
    channel->Call(rpc::MethodRef("alloc.Count", "Count"), Buffer(), {},
                  [&](const Status&, Buffer) { done.set_value(); });
    done.get_future().get();
    return server_count.load();
  };
  // Allocations per call on the client and the server, over `calls`.
  auto measure = [&](int calls) {
    REQUIRE(run(calls / 2) != ~uint64_t{0});  // Warm up.
    counting = true;
    const uint64_t server_before = server_allocations();
    const uint64_t client_before = run(1);
    const uint64_t client_after = run(calls);
    const uint64_t server_after = server_allocations();
    counting = false;
    REQUIRE(client_before != ~uint64_t{0});
    REQUIRE(client_after != ~uint64_t{0});
    return std::pair(double(client_after - client_before) / calls,
                     double(server_after - server_before) / calls);
  };
  SECTION("empty messages") {
    const auto [on_client, on_server] = measure(1000);
    INFO(on_client << " allocations per typed call on the client, " << on_server
                   << " on the server");
    CHECK(on_client < 0.01);
    CHECK(on_server < 0.01);
  }
  SECTION("a 64-byte payload: nothing on either side") {
    // The client's callback takes the reply by reference: it is parsed into
    // a response kept from the last call, whose payload string is reused.
    request.set_payload(std::string(64, 'x'));
    const auto [on_client, on_server] = measure(1000);
    INFO(on_client << " allocations per typed call on the client, " << on_server
                   << " on the server");
    CHECK(on_client < 0.01);
    CHECK(on_server < 0.01);
  }
  SECTION("above kTypedSpareMessageBytes messages are not kept") {
    request.set_payload(
        std::string(tunables::kTypedSpareMessageBytes + 1, 'x'));
    const auto [on_client, on_server] = measure(200);
    INFO(on_client << " allocations per typed call on the client, " << on_server
                   << " on the server");
    CHECK(on_client >= 1);
    CHECK(on_server >= 1);
  }
}

}  // namespace
}  // namespace rdmarpc::testing
