#include "transport/factory/factory.h"

#include <boost/asio/post.hpp>

#include "transport/tcp/tcp_transport.h"
#include "transport/uri.h"

namespace rdmarpc::transport {

namespace {

Status UnknownScheme(const Uri& uri) {
  return Status(StatusCode::kInvalidArgument,
                "unsupported transport '" + uri.scheme + "' in " +
                    uri.ToString() + " (supported: tcp)");
}

}  // namespace

StatusOr<std::unique_ptr<Listener>> Listen(
    boost::asio::io_context& accept_context, std::string_view text,
    const TransportOptions& options, ContextPicker pick,
    AcceptHandler on_accept) {
  StatusOr<Uri> uri = ParseUri(text);
  if (!uri.ok()) return uri.status();
  if (uri->scheme == "tcp") {
    return tcp::Listen(accept_context, uri->host, uri->port, options,
                       std::move(pick), std::move(on_accept));
  }
  return UnknownScheme(*uri);
}

void Connect(boost::asio::io_context& context, std::string_view text,
             const TransportOptions& options, ConnectHandler done) {
  StatusOr<Uri> uri = ParseUri(text);
  if (uri.ok() && uri->scheme == "tcp") {
    return tcp::Connect(context, uri->host, uri->port, options,
                        std::move(done));
  }
  Status error = uri.ok() ? UnknownScheme(*uri) : uri.status();
  boost::asio::post(context, [done = std::move(done), error] { done(error); });
}

}  // namespace rdmarpc::transport
