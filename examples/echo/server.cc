// The echo server: //examples/echo:server --uri tcp://127.0.0.1:5000
#include "rpc/server.h"

#include <csignal>
#include <cstdio>

#include "examples/common/flags.h"
#include "examples/echo/echo_service.h"

int main(int argc, char** argv) {
  using namespace rdmarpc;
  const examples::Flags flags(argc, argv);
  examples::EchoImpl echo;
  rpc::Server server;
  server.RegisterService(&echo);
  const auto uri = server.Listen(flags.Get("uri", "auto://127.0.0.1:5000"));
  if (!uri.ok()) {
    std::fprintf(stderr, "echo server: %s\n", uri.status().ToString().c_str());
    return 1;
  }
  std::printf("echo server listening on %s\n", uri->c_str());
  std::fflush(stdout);
  // Serve until SIGINT/SIGTERM, then shut down gracefully.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  int signal = 0;
  sigwait(&signals, &signal);
  server.Shutdown(std::chrono::seconds(5));
  return 0;
}
