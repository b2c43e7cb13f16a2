// The echo benchmark's mainstream peer: gRPC C++ (Debian's), driven through
// tools/benchmarks/grpc_peer/grpc_echo in child processes, so that this
// binary never links gRPC and builds without it.
#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/benchmarks/bench.h"
#include "tools/benchmarks/spawn.h"

namespace rdmarpc::bench {
namespace {

std::string Beside(const std::string& self, const std::string& relative) {
  const size_t slash = self.rfind('/');
  return (slash == std::string::npos ? std::string(".")
                                     : self.substr(0, slash)) +
         "/" + relative;
}

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
  GrpcPeer(std::string binary, ChildProcess server, std::string target)
      : binary_(std::move(binary)),
        server_(server),
        target_(std::move(target)) {}
  ~GrpcPeer() override {
    kill(server_.pid, SIGTERM);
    server_.Reap();
  }
  Result Load(size_t size, int k, double warmup, double seconds) override {
    ChildProcess client = Spawn(
        binary_, {binary_, "--target", target_, "--size", std::to_string(size),
                  "--outstanding", std::to_string(k), "--warmup",
                  std::to_string(warmup), "--seconds", std::to_string(seconds),
                  "--cpu", pin_sides ? "0" : "-1"});
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
  const std::string binary_;
  ChildProcess server_;
  const std::string target_;
};

}  // namespace

std::unique_ptr<PeerEcho> StartPeer(const std::string& name,
                                    const std::string& self) {
  if (name != "grpc") {
    std::fprintf(stderr, "bench: --peer grpc is the one peer there is\n");
    return nullptr;
  }
  const std::string binary = Beside(self, "grpc_peer/grpc_echo");
  if (access(binary.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "bench: %s is not built: run tools/bench --peer grpc, which "
                 "installs gRPC and builds it\n",
                 binary.c_str());
    return nullptr;
  }
  ChildProcess server = Spawn(binary, {binary, "--serve", "127.0.0.1:0",
                                       "--cpu", pin_sides ? "1" : "-1"});
  const std::string port = LineAfter(server, "listening on port ");
  if (port.empty()) {
    std::fprintf(stderr, "bench: the gRPC echo server did not start\n");
    kill(server.pid, SIGTERM);
    server.Reap();
    return nullptr;
  }
  return std::make_unique<GrpcPeer>(binary, server, "127.0.0.1:" + port);
}

}  // namespace rdmarpc::bench
