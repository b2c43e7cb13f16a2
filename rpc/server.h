// Server: serves registered services on one or more listening URIs.
//
//   rpc::Server server;
//   server.RegisterService(&my_service);
//   StatusOr<std::string> uri = server.Listen("tcp://127.0.0.1:0");
//   ...
//   server.Shutdown(std::chrono::seconds(5));
//
// N worker threads each run their own event loop; accepted connections are
// assigned to them round robin, and a connection's handlers run on its
// worker. Shutdown stops accepting, lets in-flight calls finish up to a grace
// period, then closes every connection.
#ifndef RDMARPC_RPC_SERVER_H_
#define RDMARPC_RPC_SERVER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status_or.h"
#include "base/tunables.h"
#include "rpc/service.h"
#include "transport/connection.h"

namespace rdmarpc::rpc {

struct ServerOptions {
  int workers = tunables::kDefaultServerWorkers;
  // max_payload_size bounds requests; larger ones get RESOURCE_EXHAUSTED.
  transport::TransportOptions transport;
  // Larger responses are replaced by RESOURCE_EXHAUSTED.
  uint64_t max_response_size = tunables::kDefaultMaxPayloadSize;
};

struct ServerStats {
  uint64_t connections = 0;  // Open now.
  int64_t live_calls = 0;    // Started and not yet finished.
  uint64_t calls_started = 0;
  uint64_t responses_dropped = 0;  // Finished after cancel or deadline.
  uint64_t protocol_errors = 0;    // Connections closed for malformed input.
};

class Server {
 public:
  explicit Server(ServerOptions options = {});
  ~Server();  // Shutdown with no grace period, if not shut down already.
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Before the first Listen. The service must outlive the server.
  void RegisterService(Service* service);

  // Starts listening; returns the bound URI (port 0 becomes a real port).
  StatusOr<std::string> Listen(std::string_view uri);

  // Stops accepting, waits up to `grace` for in-flight calls, then closes
  // every connection (calls still running are cancelled). Idempotent.
  void Shutdown(
      std::chrono::milliseconds grace = tunables::kDefaultShutdownGrace);

  ServerStats stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_SERVER_H_
