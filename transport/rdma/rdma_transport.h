// Listening for and opening RDMA connections (rdma://host:port).
#ifndef RDMARPC_TRANSPORT_RDMA_RDMA_TRANSPORT_H_
#define RDMARPC_TRANSPORT_RDMA_RDMA_TRANSPORT_H_

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <string>

#include "rdmarpc/status.h"
#include "transport/connection.h"
#include "transport/rdma/protocol.h"

namespace rdmarpc::transport::rdma {

// Binds host:port (an IP address of an RDMA-capable netdev; port 0 picks a
// free one). Connection requests are handled on `accept_context`; each
// connection lives on the context `pick` returns, and is handed to
// `on_accept` once established.
StatusOr<std::unique_ptr<Listener>> Listen(
    boost::asio::io_context& accept_context, const std::string& host,
    uint16_t port, const TransportOptions& options, ContextPicker pick,
    AcceptHandler on_accept);

// Resolves, connects, and runs `done` once on `context`.
// `rail`: the session and rail this connection opens, for a connection of
// several rails (transport/rails); by default, not a rail.
void Connect(boost::asio::io_context& context, const std::string& host,
             uint16_t port, const TransportOptions& options,
             ConnectHandler done, const RailHello& rail = {});

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_RDMA_TRANSPORT_H_
