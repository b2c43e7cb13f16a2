// Heap allocations per call in steady state, per side: counts operator new
// and malloc-family calls per thread while N echo calls run over tcp://
// loopback in this process (client thread = the channel's event loop,
// server thread = the single worker).
//   alloc_count [--calls N] [--size BYTES]
// Replacing the global operator new/delete pair is what this tool is for.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <new>
#include <boost/asio/post.hpp>

#include "examples/common/flags.h"
#include "rpc/channel.h"
#include "rpc/server.h"

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

int main(int argc, char** argv) {
  using namespace rdmarpc;
  const examples::Flags flags(argc, argv);
  const long long calls = flags.GetInt("calls", 10000);
  const size_t size = static_cast<size_t>(flags.GetInt("size", 16));
  std::atomic<uint64_t> server_allocations{0};
  rpc::ServerOptions options;
  options.workers = 1;
  rpc::Service echo("bench.Echo");
  echo.AddMethod("Say", [&](std::shared_ptr<rpc::ServerCall> call) {
    call->Finish(Status(), Buffer::Borrow(call->request().span()));
  });
  echo.AddMethod("Count", [&](std::shared_ptr<rpc::ServerCall> call) {
    server_allocations = allocations;  // The worker thread's own count.
    call->Finish(Status());
  });
  rpc::Server server(options);
  server.RegisterService(&echo);
  auto uri = server.Listen("tcp://127.0.0.1:0");
  if (!uri.ok()) return 1;
  rpc::Channel channel(*uri);
  std::vector<std::byte> payload(size);
  auto run = [&](long long n, const char* method) {
    std::promise<uint64_t> done;
    long long left = n;
    std::function<void()> next = [&] {
      channel.Call("bench.Echo", method,
                   Buffer::Borrow(std::span(payload.data(), payload.size())),
                   {}, [&](const Status&, Buffer) {
                     if (--left == 0) return done.set_value(allocations);
                     next();
                   });
    };
    boost::asio::post(channel.executor(), next);
    return done.get_future().get();
  };
  run(1000, "Say");  // Warm up.
  counting = true;
  const uint64_t client_before = run(1, "Count");
  const uint64_t server_before = server_allocations;
  const uint64_t client_after = run(calls, "Say");
  run(1, "Count");
  const uint64_t server_after = server_allocations;
  counting = false;
  std::printf("%lld calls of %zu B: client %.2f, server %.2f operator-new "
              "allocations per call\n",
              calls, size, double(client_after - client_before) / calls,
              double(server_after - server_before) / calls);
  return 0;
}
