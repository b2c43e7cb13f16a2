// The echo benchmark's mainstream peer: gRPC C++ (Debian's), driven through
// tools/benchmarks/grpc_peer/grpc_echo in child processes, so that this
// binary never links gRPC and builds without it.

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tools/benchmarks/bench.h"
#include "tools/benchmarks/grpc_clients.h"
#include "tools/benchmarks/spawn.h"

namespace rdmarpc::bench {
namespace {

// Reads lines from `child` until one starts with `key`; returns the rest.
std::string LineAfter(ChildProcess& child, const std::string& key) {
  char line[512];
  while (child.out != nullptr && std::fgets(line, sizeof(line), child.out)) {
    if (std::strncmp(line, key.c_str(), key.size()) == 0) {
      std::string rest(line + key.size());
      while (!rest.empty() && (rest.back() == '\n' || rest.back() == ' ')) {
        rest.pop_back();
      }
      return rest;
    }
  }
  return "";
}

class GrpcPeer : public PeerEcho {
 public:
  explicit GrpcPeer(std::unique_ptr<GrpcClients> grpc)
      : grpc_(std::move(grpc)) {}
  Result Load(size_t size, int k, double warmup, double seconds) override {
    const std::string& binary = grpc_->binary();
    std::vector<std::string> args = {binary,
                                     "--target",
                                     grpc_->target(),
                                     "--size",
                                     std::to_string(size),
                                     "--outstanding",
                                     std::to_string(k),
                                     "--warmup",
                                     std::to_string(warmup),
                                     "--seconds",
                                     std::to_string(seconds),
                                     "--cpu",
                                     pin_sides ? "0" : "-1"};
    for (const std::string& arg : grpc_->client_tls_args()) {
      args.push_back(arg);
    }
    ChildProcess client = Spawn(binary, args);
    Result result;
    const std::string rate = LineAfter(client, "calls/s ");
    if (!rate.empty()) result.calls_per_s = std::stod(rate);
    // Printed after the rate, with one call outstanding.
    const std::string p50 = k == 1 ? LineAfter(client, "p50_us ") : "";
    if (!p50.empty()) result.p50_us = std::stod(p50);
    client.Reap();
    return result;
  }

 private:
  const std::unique_ptr<GrpcClients> grpc_;  // The server.
};

}  // namespace

std::unique_ptr<PeerEcho> StartPeer(const std::string& name,
                                    const Options::TlsFiles& tls) {
  if (name != "grpc") {
    std::fprintf(stderr, "bench: --peer grpc is the one peer there is\n");
    return nullptr;
  }
  std::unique_ptr<GrpcClients> grpc =
      GrpcClients::Start(pin_sides ? 1 : -1, tls.cert, tls.key, tls.ca);
  if (!grpc) return nullptr;
  return std::make_unique<GrpcPeer>(std::move(grpc));
}

}  // namespace rdmarpc::bench
