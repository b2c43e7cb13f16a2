// Choosing a transport by URI scheme:
//   tcp://host:port    TCP (Boost.Asio)
//   rdma://host:port   RDMA (librdmacm + verbs); fails at once, naming the
//                      cause, when this host has no usable RDMA device
//   auto://host:port   rdma when a usable device exists, else tcp
#ifndef RDMARPC_TRANSPORT_FACTORY_FACTORY_H_
#define RDMARPC_TRANSPORT_FACTORY_FACTORY_H_

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <string_view>

#include "base/status_or.h"
#include "transport/connection.h"

namespace rdmarpc::transport {

// Binds the URI and accepts on `accept_context`; each accepted connection
// lives on the context `pick` returns (a server's workers, round robin).
StatusOr<std::unique_ptr<Listener>> Listen(
    boost::asio::io_context& accept_context, std::string_view uri,
    const TransportOptions& options, ContextPicker pick,
    AcceptHandler on_accept);

// Connects to the URI; `done` runs once, on `context`.
void Connect(boost::asio::io_context& context, std::string_view uri,
             const TransportOptions& options, ConnectHandler done);

}  // namespace rdmarpc::transport

#endif  // RDMARPC_TRANSPORT_FACTORY_FACTORY_H_
