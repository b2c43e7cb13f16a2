// The other process of fault_test, killed with SIGKILL mid-work:
//   fault_peer serve URI      serves test.Test on URI; prints "LISTENING uri"
//   fault_peer call URI N     starts N WaitCancel calls (1 MiB requests,
//                             so large transfers are in play); prints
//                             "CALLING" once they are sent
// Then it waits to be killed.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "rdmarpc/channel.h"
#include "tests/support/test_support.h"

using namespace rdmarpc;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fault_peer serve URI | call URI N\n");
    return 64;
  }
  const std::string mode = argv[1];
  const std::string uri = argv[2];
  if (mode == "serve") {
    testing::TestService service;
    rpc::Server server;
    server.RegisterService(&service);
    auto bound = server.Listen(uri);
    if (!bound.ok()) {
      std::fprintf(stderr, "listen: %s\n", bound.status().ToString().c_str());
      return 1;
    }
    std::printf("LISTENING %s\n", bound->c_str());
    std::fflush(stdout);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  if (mode == "call" && argc == 4) {
    // No request window: every call's 1 MiB reaches the server, which must
    // release all of it when this process dies.
    rpc::ChannelOptions options;
    options.max_request_bytes_in_flight = 0;
    rpc::Channel channel(uri, options);
    const int calls = std::atoi(argv[3]);
    const std::string request(1 << 20, 'r');
    for (int i = 0; i < calls; ++i) {
      channel.Call("test.Test", "WaitCancel", Buffer::CopyOf(request), {},
                   [](const Status&, Buffer) {});
    }
    std::printf("CALLING\n");
    std::fflush(stdout);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  std::fprintf(stderr, "bad arguments\n");
  return 64;
}
