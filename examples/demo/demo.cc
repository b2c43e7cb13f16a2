// rdmarpc demo: starts a server with an echo service and drives a client
// session against it on this machine, printing each call and its latency.
//
//   demo [--uri tcp://127.0.0.1:0]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <string>
#include <thread>

#include "rdmarpc/channel.h"
#include "rdmarpc/server.h"

namespace {

using namespace std::chrono_literals;
using rdmarpc::Buffer;
using rdmarpc::Status;
using rdmarpc::StatusCode;
namespace rpc = rdmarpc::rpc;

// A generic echo service: Say returns the request; Slow answers after 200 ms.
class EchoService : public rpc::Service {
 public:
  EchoService() : rpc::Service("rdmarpc.demo.Echo") {
    AddMethod("Say", [](std::shared_ptr<rpc::ServerCall> call) {
      call->Finish(Status(), Buffer::CopyOf(call->request().span()));
    });
    AddMethod("Slow", [](std::shared_ptr<rpc::ServerCall> call) {
      std::thread([call] {
        std::this_thread::sleep_for(200ms);
        call->Finish(Status(), Buffer::CopyOf(std::string_view("finally")));
      }).detach();
    });
  }
};

struct Outcome {
  Status status;
  size_t bytes = 0;
  double micros = 0;
};

Outcome Call(rpc::Channel& channel, const char* method, std::string request,
             rpc::CallOptions options = {}) {
  std::promise<Outcome> done;
  const auto start = rpc::Clock::now();
  channel.Call("rdmarpc.demo.Echo", method, Buffer::CopyOf(request), options,
               [&](const Status& status, Buffer response) {
                 const std::chrono::duration<double, std::micro> took =
                     rpc::Clock::now() - start;
                 done.set_value({status, response.size(), took.count()});
               });
  return done.get_future().get();
}

int failures = 0;

void Show(const std::string& what, const Outcome& outcome,
          StatusCode expected = StatusCode::kOk) {
  const bool as_expected = outcome.status.code() == expected;
  if (!as_expected) ++failures;
  std::printf("  %-44s %-44s %9.1f us%s\n", what.c_str(),
              outcome.status.ok()
                  ? ("OK, " + std::to_string(outcome.bytes) + " bytes").c_str()
                  : outcome.status.ToString().c_str(),
              outcome.micros, as_expected ? "" : "   <-- UNEXPECTED");
}

}  // namespace

int main(int argc, char** argv) {
  std::string uri = "tcp://127.0.0.1:0";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--uri") == 0) uri = argv[i + 1];
  }

  EchoService echo;
  rpc::Server server;
  server.RegisterService(&echo);
  const auto bound = server.Listen(uri);
  if (!bound.ok()) {
    std::fprintf(stderr, "demo: %s\n", bound.status().ToString().c_str());
    return 1;
  }
  std::printf("server: serving rdmarpc.demo.Echo on %s\n", bound->c_str());

  rpc::Channel channel(*bound);
  std::printf("client: calls over one connection to %s\n", bound->c_str());
  Show("Say(\"hello\")  [first call connects]", Call(channel, "Say", "hello"));
  for (int i = 0; i < 3; ++i) {
    Show("Say(16 B)", Call(channel, "Say", std::string(16, 'x')));
  }
  Show("Say(4 KiB)", Call(channel, "Say", std::string(4096, 'x')));
  Show("Say(16 MiB)", Call(channel, "Say", std::string(16 << 20, 'x')));
  Show("Slow() with a 50 ms deadline",
       Call(channel, "Slow", "", rpc::CallOptions::WithTimeout(50ms)),
       StatusCode::kDeadlineExceeded);
  Show("Slow() with a 2 s deadline",
       Call(channel, "Slow", "", rpc::CallOptions::WithTimeout(2s)));
  Show("Missing() [no such method]", Call(channel, "Missing", ""),
       StatusCode::kUnimplemented);

  // Cancellation: start a slow call, cancel it.
  {
    std::promise<Status> done;
    const auto id = channel.Call(
        "rdmarpc.demo.Echo", "Slow", Buffer(), {},
        [&](const Status& status, Buffer) { done.set_value(status); });
    channel.Cancel(id);
    Show("Slow() cancelled by the client",
         Outcome{done.get_future().get(), 0, 0}, StatusCode::kCancelled);
  }

  // 1,000 concurrent calls on the one connection.
  {
    constexpr int kCalls = 1000;
    std::atomic<int> ok{0}, left{kCalls};
    std::promise<void> all;
    const auto start = rpc::Clock::now();
    for (int i = 0; i < kCalls; ++i) {
      channel.Call("rdmarpc.demo.Echo", "Say",
                   Buffer::CopyOf(std::string(16, 'y')), {},
                   [&](const Status& status, Buffer) {
                     if (status.ok()) ok++;
                     if (--left == 0) all.set_value();
                   });
    }
    all.get_future().wait();
    const std::chrono::duration<double, std::micro> took =
        rpc::Clock::now() - start;
    Outcome outcome{ok == kCalls
                        ? Status()
                        : Status(StatusCode::kInternal, "some calls failed"),
                    0, took.count()};
    Show("1000 concurrent Say(16 B)", outcome);
    std::printf("  %-44s %.0f calls/s\n", "", kCalls / (took.count() / 1e6));
  }

  server.Shutdown(1s);
  std::printf("server: shut down; %s\n",
              failures == 0 ? "every call behaved as expected"
                            : "SOME CALLS DID NOT BEHAVE AS EXPECTED");
  return failures == 0 ? 0 : 1;
}
