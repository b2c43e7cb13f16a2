#include "transport/factory/factory.h"

#include <boost/asio/post.hpp>

#include "base/log.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/rdma/verbs.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/uri.h"

namespace rdmarpc::transport {

namespace {

Status UnknownScheme(const Uri& uri) {
  return Status(StatusCode::kInvalidArgument,
                "unsupported transport '" + uri.scheme + "' in " +
                    uri.ToString() + " (supported: tcp, rdma, auto)");
}

// auto:// becomes rdma:// when this host has a usable RDMA device, tcp://
// otherwise; one info log says which and why.
Uri Resolve(Uri uri) {
  if (uri.scheme != "auto") return uri;
  const Status rdma = rdma::CheckRdmaAvailable();
  uri.scheme = rdma.ok() ? "rdma" : "tcp";
  if (rdma.ok()) {
    Log().info("{}: using rdma (an RDMA device with an active port exists)",
               "auto://" + uri.host + ":" + std::to_string(uri.port));
  } else {
    Log().info("{}: using tcp: {}",
               "auto://" + uri.host + ":" + std::to_string(uri.port),
               rdma.message());
  }
  return uri;
}

}  // namespace

StatusOr<std::unique_ptr<Listener>> Listen(
    boost::asio::io_context& accept_context, std::string_view text,
    const TransportOptions& options, ContextPicker pick,
    AcceptHandler on_accept) {
  StatusOr<Uri> parsed = ParseUri(text);
  if (!parsed.ok()) return parsed.status();
  const Uri uri = Resolve(*parsed);
  if (uri.scheme == "tcp") {
    return tcp::Listen(accept_context, uri.host, uri.port, options,
                       std::move(pick), std::move(on_accept));
  }
  if (uri.scheme == "rdma") {
    return rdma::Listen(accept_context, uri.host, uri.port, options,
                        std::move(pick), std::move(on_accept));
  }
  return UnknownScheme(uri);
}

void Connect(boost::asio::io_context& context, std::string_view text,
             const TransportOptions& options, ConnectHandler done) {
  StatusOr<Uri> parsed = ParseUri(text);
  if (parsed.ok()) {
    const Uri uri = Resolve(*parsed);
    if (uri.scheme == "tcp") {
      return tcp::Connect(context, uri.host, uri.port, options,
                          std::move(done));
    }
    if (uri.scheme == "rdma") {
      return rdma::Connect(context, uri.host, uri.port, options,
                           std::move(done));
    }
  }
  Status error = parsed.ok() ? UnknownScheme(*parsed) : parsed.status();
  boost::asio::post(context, [done = std::move(done), error] { done(error); });
}

}  // namespace rdmarpc::transport
