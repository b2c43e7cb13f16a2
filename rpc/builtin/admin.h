// The admin endpoint: a small HTTP/1.1 server (Boost.Beast) on an event loop
// of the process, for operators' tools, never on an RPC port.
//
//   GET /metrics   the metrics in Prometheus's text format
//                  (rpc/builtin/prometheus.h)
//   GET /healthz   200 "ok" while serving, 503 once shutting down
//   GET /          a status page: plain HTML that refreshes itself
//
// A server opens one with ServerOptions::admin_listen
// ("http://127.0.0.1:9464"; port 0 picks one; Server::admin_uri() says which).
// With ?token_file=PATH in its URI, every request but /healthz must carry
// "Authorization: Bearer <token>", the file's first line (a file others may
// read is refused); without it the answer is 401. https://HOST:PORT?
// cert_file=PATH&key_file=PATH serves over TLS (Boost.Beast's ssl_stream).
// Anything else gets a 4xx and the connection's close: a request that is not
// HTTP (400), a header over 8 KiB (431), a body (413), a method other than
// GET or HEAD (405), a path it does not serve (404). A client that sends
// nothing for 10 s is cut off. Nothing it does reaches the RPC side: the
// pages only read the metrics' relaxed counters.
#ifndef RDMARPC_RPC_BUILTIN_ADMIN_H_
#define RDMARPC_RPC_BUILTIN_ADMIN_H_

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "rdmarpc/status.h"

namespace rdmarpc::rpc {

class AdminEndpoint {
 public:
  struct Pages {
    std::function<std::string()> metrics;      // /metrics
    std::function<std::string()> status_html;  // /
    std::function<bool()> healthy;             // /healthz
  };

  // Listens on `uri` (http://HOST:PORT) and serves `pages` on `loop`, from
  // its thread. INVALID_ARGUMENT for another scheme or a bad address.
  static StatusOr<std::unique_ptr<AdminEndpoint>> Start(
      boost::asio::io_context& loop, std::string_view uri, Pages pages);
  // Stops accepting and closes every admin connection; the pages are not
  // called after it returns... once the loop has run what it had queued.
  ~AdminEndpoint();
  AdminEndpoint(const AdminEndpoint&) = delete;
  AdminEndpoint& operator=(const AdminEndpoint&) = delete;

  // http://HOST:PORT, with the port bound.
  const std::string& uri() const { return uri_; }

  struct State;  // Shared with the connections (rpc/builtin/admin.cc).

 private:
  AdminEndpoint() = default;
  std::shared_ptr<State> state_;
  std::string uri_;
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_BUILTIN_ADMIN_H_
