// The KV server: //examples/kv:server --uri URI [--capacity BYTES]
#include "rpc/server.h"

#include <csignal>
#include <cstdio>

#include "examples/common/flags.h"
#include "examples/kv/kv_service.h"

int main(int argc, char** argv) {
  using namespace rdmarpc;
  using namespace rdmarpc::examples::kv;
  const examples::Flags flags(argc, argv);
  KeyValueImpl kv(static_cast<uint64_t>(flags.GetInt("capacity", 1ll << 30)));
  rpc::ServerOptions options;
  options.transport.max_payload_size = kMaxMessageSize;
  options.max_response_size = kMaxMessageSize;
  rpc::Server server(options);
  server.RegisterService(&kv);
  const auto uri = server.Listen(flags.Get("uri", "auto://127.0.0.1:5001"));
  if (!uri.ok()) {
    std::fprintf(stderr, "kv server: %s\n", uri.status().ToString().c_str());
    return 1;
  }
  std::printf("kv server listening on %s\n", uri->c_str());
  std::fflush(stdout);
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
