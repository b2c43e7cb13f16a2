// gRPC beside the scale benchmark's rows (tools/bench --mode scale --peer
// grpc): gRPC C++'s echo (tools/benchmarks/grpc_peer, which tools/bench
// --peer grpc builds beside the benchmarks) as the server, and the same
// shape of load as a row's from as many client processes, each of the
// row's connections a gRPC channel of its own.
#ifndef RDMARPC_TOOLS_BENCHMARKS_GRPC_CLIENTS_H_
#define RDMARPC_TOOLS_BENCHMARKS_GRPC_CLIENTS_H_

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tools/benchmarks/spawn.h"

namespace rdmarpc::bench {

class GrpcClients {
 public:
  // Starts the gRPC echo server, pinned to `cpu` (-1: not pinned); nullptr,
  // having said why, if it cannot.
  // With `cert`, `key` and `ca`, over TLS: the server's certificate and
  // key, the CA its clients trust.
  static std::unique_ptr<GrpcClients> Start(int cpu = -1,
                                            const std::string& cert = "",
                                            const std::string& key = "",
                                            const std::string& ca = "") {
    auto peer = std::unique_ptr<GrpcClients>(new GrpcClients);
    peer->binary_ =
        (std::filesystem::read_symlink("/proc/self/exe").parent_path() /
         "grpc_peer/grpc_echo")
            .string();
    if (access(peer->binary_.c_str(), X_OK) != 0) {
      std::fprintf(stderr, "%s is not built (tools/bench --peer grpc)\n",
                   peer->binary_.c_str());
      return nullptr;
    }
    std::vector<std::string> args = {peer->binary_, "--serve", "127.0.0.1:0",
                                     "--cpu", std::to_string(cpu)};
    if (!cert.empty()) {
      args.insert(args.end(), {"--tls-cert", cert, "--tls-key", key});
      peer->client_tls_args_ = {"--tls-ca", ca};
    }
    peer->server_ = Spawn(peer->binary_, args);
    const std::string said = ReadLine(peer->server_.out);
    const std::string prefix = "listening on port ";
    if (said.rfind(prefix, 0) != 0) {
      std::fprintf(stderr, "the gRPC echo server said '%s'\n", said.c_str());
      return nullptr;  // The destructor stops it.
    }
    peer->target_ = "127.0.0.1:" + said.substr(prefix.size());
    return peer;
  }
  ~GrpcClients() {
    if (server_.pid > 0) kill(server_.pid, SIGTERM);
    server_.Reap();
  }

  const std::string& binary() const { return binary_; }  // grpc_echo
  const std::string& target() const { return target_; }  // HOST:PORT
  // What a client process adds to its arguments: TLS, if the server has it.
  const std::vector<std::string>& client_tls_args() const {
    return client_tls_args_;
  }

  // `connections` over min(connections, processes) client processes, with
  // `outstanding` calls of `size` bytes in all, spread as the scale
  // benchmark spreads them, for `seconds`: calls/s in all, or NaN if a
  // client failed.
  double Load(int connections, int outstanding, int processes,
              const std::string& size, const std::string& seconds) const {
    processes = std::min(connections, processes);
    std::vector<ChildProcess> clients;
    for (int p = 0; p < processes; ++p) {
      const int share = connections / processes + (p < connections % processes);
      const int load =
          std::max(outstanding / processes + (p < outstanding % processes), 1);
      clients.push_back(Spawn(binary_, [&] {
        std::vector<std::string> args = {binary_,
                                         "--target",
                                         target_,
                                         "--size",
                                         size,
                                         "--outstanding",
                                         std::to_string(load),
                                         "--channels",
                                         std::to_string(share),
                                         "--seconds",
                                         seconds};
        args.insert(args.end(), client_tls_args_.begin(),
                    client_tls_args_.end());
        return args;
      }()));
    }
    double total = 0;
    for (ChildProcess& client : clients) {
      const std::string said = ReadLine(client.out);
      client.Reap();
      total = said.rfind("calls/s ", 0) == 0
                  ? total + std::strtod(said.c_str() + 8, nullptr)
                  : NAN;
    }
    return total;
  }

 private:
  GrpcClients() = default;
  std::string binary_;
  ChildProcess server_;
  std::vector<std::string> client_tls_args_;
  std::string target_;
};

}  // namespace rdmarpc::bench

#endif  // RDMARPC_TOOLS_BENCHMARKS_GRPC_CLIENTS_H_
