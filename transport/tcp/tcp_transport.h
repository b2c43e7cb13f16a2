// Listening for and opening TCP connections.
#ifndef RDMARPC_TRANSPORT_TCP_TCP_TRANSPORT_H_
#define RDMARPC_TRANSPORT_TCP_TCP_TRANSPORT_H_

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <string>

#include "rdmarpc/status.h"
#include "transport/connection.h"

namespace rdmarpc::transport::tcp {

// Binds host:port (port 0 picks a free one) and accepts on `accept_context`.
// Each accepted connection lives on the context `pick` returns.
StatusOr<std::unique_ptr<Listener>> Listen(
    boost::asio::io_context& accept_context, const std::string& host,
    uint16_t port, const TransportOptions& options, ContextPicker pick,
    AcceptHandler on_accept);

// Resolves and connects; `done` runs once on `context`.
void Connect(boost::asio::io_context& context, const std::string& host,
             uint16_t port, const TransportOptions& options,
             ConnectHandler done);

}  // namespace rdmarpc::transport::tcp

#endif  // RDMARPC_TRANSPORT_TCP_TCP_TRANSPORT_H_
