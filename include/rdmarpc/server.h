// The server side of rdmarpc.
//
//   rdmarpc::Server          serves registered services on one or more
//                                 URIs (tcp://, rdma://, auto://):
//                                 RegisterService, Listen, Shutdown(grace),
//                                 stats(), per-method metrics.
//   rdmarpc::ServerOptions   worker threads, transport options (poll
//                                 mode, payload and memory limits), calls
//                                 and connections allowed, where handlers
//                                 run (include/rdmarpc/executor.h),
//                                 interceptors, and admin_listen: an HTTP
//                                 endpoint with /metrics for Prometheus and a
//                                 status page (docs/admin.md).
//   rdmarpc::Service         a service: generated ones derive from it
//                                 (Foo::Service, from foo.rdmarpc.h); code
//                                 without generated stubs adds methods with
//                                 AddMethod(name, handler), bytes in and out.
//   rdmarpc::ServerCall      one call as its handler sees it: request(),
//                                 deadline(), IsCancelled(), OnCancel(), and
//                                 Finish(status, response) from any thread;
//                                 request_metadata(), response_headers(),
//                                 response_trailers().
//   rdmarpc::ServerInterceptor, TokenServerInterceptor,
//   LoggingServerInterceptor      code that sees every call before its
//                                 handler and at its end
//                                 (include/rdmarpc/interceptor.h).
//   rdmarpc::TransportOptions, PollMode
//                                 in ServerOptions::transport.
//
//   MyServiceImpl impl;                      // derives from Foo::Service
//   rdmarpc::Server server;
//   server.RegisterService(&impl);
//   auto uri = server.Listen("auto://0.0.0.0:7000");  // StatusOr<std::string>
//
// Handlers run on the connection's worker thread by default; one that blocks
// holds up that worker's other connections. Set ServerOptions::
// handler_threads (or handler_executor) to run them on a pool instead, or
// hand long work to your own threads and Finish from there.
#ifndef RDMARPC_SERVER_H_
#define RDMARPC_SERVER_H_

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rdmarpc/buffer.h"
#include "rdmarpc/connection_stats.h"
#include "rdmarpc/executor.h"
#include "rdmarpc/interceptor.h"
#include "rdmarpc/naming_options.h"
#include "rdmarpc/server_call.h"
#include "rdmarpc/service.h"
#include "rdmarpc/status.h"
#include "rdmarpc/transport_options.h"
#include "rdmarpc/tunables.h"

namespace rdmarpc {

// The implementation's.
namespace rpc {
struct MethodMetrics;  // rpc/server/metrics.h
}  // namespace rpc
namespace transport {
class Connection;  // transport/connection.h
}  // namespace transport

struct ServerOptions {
  int workers = tunables::kDefaultServerWorkers;
  // max_payload_size bounds requests; larger ones get RESOURCE_EXHAUSTED.
  TransportOptions transport;
  // Larger responses are replaced by RESOURCE_EXHAUSTED.
  uint64_t max_response_size = tunables::kDefaultMaxPayloadSize;
  // A request whose metadata is larger, as include/rdmarpc/metadata.h counts
  // it, is answered RESOURCE_EXHAUSTED without running its handler.
  size_t max_metadata_size = tunables::kDefaultMaxMetadataSize;
  // With an admission interceptor (ServerInterceptor::admission()), the most
  // payload a frame may carry, read whole, on a TCP connection none of whose
  // calls has been admitted yet; a larger one's header is read, the call
  // admitted or refused on it, and a refused call's payload discarded
  // unread. (Its header is bounded by kMaxCallHeaderSize, 64 KiB.) On RDMA
  // no frame larger than a receive buffer is granted before admission.
  uint64_t max_unadmitted_frame_bytes = tunables::kMaxUnadmittedFrameBytes;
  // Per-method metrics (rpc/server/metrics.h); cheap enough to leave on.
  bool enable_metrics = true;
  // Calls one connection may have running at once; more are answered
  // RESOURCE_EXHAUSTED at once (0: no limit).
  uint32_t max_calls_per_connection = tunables::kDefaultMaxCallsPerConnection;
  // Open connections; a connection beyond it has each request answered
  // RESOURCE_EXHAUSTED and is closed (0: no limit).
  uint32_t max_connections = tunables::kDefaultMaxConnections;
  // Open connections from one host (its IP address); a connection beyond it
  // is treated as one beyond max_connections. 0, the default: no limit (a
  // benchmark, or a proxy, opens thousands from one address).
  uint32_t max_connections_per_peer = 0;
  // Overload (brpc's max_concurrency): calls the whole server runs at once,
  // and calls of one method ("pkg.Service/Method") at once. A request beyond
  // either is answered RESOURCE_EXHAUSTED at once, before its handler runs,
  // and counted (ServerStats::calls_shed), instead of queueing without
  // bound behind the calls that run: an overloaded server stays quick to
  // say no, and clients can go elsewhere. 0 or absent: no limit.
  uint32_t max_concurrency = 0;
  std::map<std::string, uint32_t, std::less<>> method_max_concurrency;
  // Where handlers run (include/rdmarpc/executor.h). By default (0, no
  // executor) on the connection's worker thread: the fastest, but a handler
  // that blocks holds up that worker's other connections. With handler_threads
  // > 0, on a pool of that many threads the server owns (its destructor runs
  // the handlers given to the pool and waits for them); with handler_executor
  // set, there instead: it must have run every task before the services
  // are gone (those the server owns go with it).
  int handler_threads = 0;
  Executor handler_executor;
  // Run, in order, before each call's handler and at its end
  // (include/rdmarpc/interceptor.h): a token check, logging, metrics.
  std::vector<std::shared_ptr<ServerInterceptor>> interceptors;
  // Registers the server in etcd while it serves, for clients whose target
  // is "etcd://.../prefix" (naming/registration.h): register_at is
  // "etcd://host:port[,host:port...]/prefix". The first Listen registers
  // advertise_uri, or the URI it bound if that is empty (Listen fails
  // INVALID_ARGUMENT if it bound a wildcard address such as 0.0.0.0, which
  // no client can dial); Shutdown deregisters before it stops serving.
  std::string register_at;
  std::string advertise_uri;
  // The admin endpoint, as EnableAdmin(server, admin_listen) would open it
  // (include/rdmarpc/admin.h): with "http://127.0.0.1:9464" the first
  // Listen also serves /metrics (Prometheus), /healthz and a status page over
  // HTTP there, on the server's first event loop, until Shutdown; port 0
  // picks one (admin_uri()). Empty, the default: none. It shows every metric
  // to whoever connects: bind it to loopback, or to a management network,
  // never where clients reach. Needs //rpc/builtin:admin linked in
  // (@rdmarpc//:rdmarpc has it); without, Listen fails FAILED_PRECONDITION.
  std::string admin_listen;
  naming::RegistrationOptions registration;
  // Shutdown with a grace period first tells each client GOAWAY and serves
  // on until every client has answered that it sent its last request, for
  // at most this long (within the grace period); then it refuses new
  // requests and waits for the calls still running.
  std::chrono::milliseconds goaway_answer_timeout{1000};
  // Connection lifetime, as gRPC's server keepalive options (0: none, the
  // default). A connection with no call in flight and no request received
  // for max_connection_idle, or open for max_connection_age (each
  // connection's age drawn within 10 % of it, so that connections opened
  // together do not all leave together), is told GOAWAY: its client sends
  // its new calls on a new connection, and this one closes once its client
  // has answered and its calls have finished, or, with calls still running
  // max_connection_age_grace after the GOAWAY, fails them UNAVAILABLE and
  // closes. Counted in ServerStats::connections_recycled. Checked by a timer
  // per connection, only where set: a call pays nothing for them.
  std::chrono::milliseconds max_connection_idle{0};
  std::chrono::milliseconds max_connection_age{0};
  std::chrono::milliseconds max_connection_age_grace =
      std::chrono::milliseconds::max();  // max(): however long they run.
};

struct ServerStats {
  uint64_t connections = 0;  // Open now.
  int64_t live_calls = 0;    // Started and not yet finished.
  uint64_t calls_started = 0;
  uint64_t responses_dropped = 0;  // Finished after cancel or deadline.
  // Responses the send queue refused (max_queued_bytes: the client was not
  // reading them): each call was answered RESOURCE_EXHAUSTED instead.
  uint64_t responses_refused = 0;
  uint64_t protocol_errors = 0;       // Connections closed for malformed input.
  uint64_t unknown_method_calls = 0;  // Answered UNIMPLEMENTED.
  // MESSAGE, HALF_CLOSE and WINDOW frames for a call that is not an open
  // stream (finished already, or never one): dropped, the connection kept.
  uint64_t stream_frames_dropped = 0;
  uint64_t calls_over_limit = 0;  // Over max_calls_per_connection.
  uint64_t calls_shed = 0;        // Over max_concurrency or a method's limit.
  uint64_t connections_refused = 0;  // Over max_connections.
  // Connections closed because the client sent nothing, not even a keepalive
  // PONG, for TransportOptions::keepalive_timeout.
  uint64_t peers_timed_out = 0;
  // Connections closed for max_connection_age or max_connection_idle.
  uint64_t connections_recycled = 0;
};

// A listener of a Server's that is not an RPC port: the admin endpoint
// (include/rdmarpc/admin.h). Server::AddSideEndpoint.
class SideEndpoint {
 public:
  virtual ~SideEndpoint() = default;
  // At the server's first Listen, under its lock: binds and serves on `loop`
  // (the server's first event loop, whose thread runs it). An error fails
  // that Listen. Destroyed in Shutdown, once the server's connections are
  // closed: it must stop serving then.
  virtual Status Start(boost::asio::io_context& loop) = 0;
  // Its bound URI, once started.
  virtual std::string uri() const = 0;
};

class Server {
 public:
  explicit Server(ServerOptions options = {});
  ~Server();  // Shutdown with no grace period, if not shut down already.
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Before the first Listen. The service must outlive the server.
  void RegisterService(Service* service);
  // Before the first Listen; the server owns the service.
  void RegisterService(std::unique_ptr<Service> service);

  // Starts listening; returns the bound URI (port 0 becomes a real port).
  StatusOr<std::string> Listen(std::string_view uri);

  // Deregisters, stops accepting, and (with a grace period) tells every
  // client GOAWAY and serves on until each has sent its last request; then
  // waits up to the rest of `grace` for in-flight calls, and closes every
  // connection (calls still running are cancelled). Idempotent.
  void Shutdown(
      std::chrono::milliseconds grace = tunables::kDefaultShutdownGrace);

  // Runs `hook` first thing in Shutdown (before deregistering): a health
  // service turns NOT_SERVING (include/rdmarpc/health.h). Before Listen.
  void OnShutdown(std::function<void()> hook);

  ServerStats stats() const;
  // The options the server was made with.
  const ServerOptions& options() const;
  // The admin endpoint's bound URI (EnableAdmin, ServerOptions::
  // admin_listen), from the first Listen until Shutdown; empty otherwise.
  std::string admin_uri() const;
  // Before the first Listen: `endpoint` starts at that Listen, and ends at
  // Shutdown. The first one added is the admin endpoint (admin_uri()).
  void AddSideEndpoint(std::unique_ptr<SideEndpoint> endpoint);

  // Registered services, in name order.
  std::vector<const Service*> services() const;
  // Each registered method's metrics, in name order.
  void ForEachMethod(const std::function<
                     void(const std::string& service, const std::string& method,
                          const rpc::MethodMetrics&)>& visit) const;
  // Each open connection, with its peer URI and transport counters.
  void ForEachConnection(
      const std::function<void(const transport::Connection&)>& visit) const;
  // Per transport ("tcp", "rdma"): the connections open now, the bytes
  // queued on them now (Connection::queued_bytes), and the counters of every
  // connection the server has had, closed ones included, so that each only
  // grows (as a Prometheus counter must).
  struct TransportTotals {
    uint64_t open = 0;
    uint64_t queued_bytes = 0;
    ConnectionStats counters;
  };
  void ForEachTransport(
      const std::function<void(const std::string& transport,
                               const TransportTotals& totals)>& visit) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

namespace internal {
// Set by //rpc/builtin:admin when it is linked in: opens
// ServerOptions::admin_listen (EnableAdmin). The server's core builds no HTTP
// server of its own.
using AdminFromOptions = void (*)(Server& server, const std::string& uri);
extern AdminFromOptions admin_from_options;
}  // namespace internal

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace rpc {
using rdmarpc::Server;
using rdmarpc::ServerOptions;
using rdmarpc::ServerStats;
using rdmarpc::SideEndpoint;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_SERVER_H_
