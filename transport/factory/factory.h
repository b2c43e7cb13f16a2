// Choosing a transport by URI scheme:
//   tcp://host:port    TCP (Boost.Asio)
//   tls://host:port    TCP with TLS 1.3 (TransportOptions::tls, or its
//                      defaults); with TransportOptions::tls set, tcp://
//                      is TLS too, and rdma:// (or auto:// where it
//                      picks RDMA) authenticated (rdma/protocol.h)
//   rdma://host:port   RDMA (librdmacm + verbs); fails at once, naming the
//                      cause, when this host has no usable RDMA device
//   auto://host:port   rdma when a usable device exists, else tcp
//
// rdma:// (and auto://) take options after a '?', over TransportOptions:
//   device=NAME      the RDMA device ("rxe1", "mlx5_0"): tools/rpc devices
//   port_num=N       its port (1)
//   gid_index=N      the GID whose address is the source or bind address;
//                    needs device=
//   tos=N            IP type of service / RoCE traffic class, 0 to 255
//   timeout=N        the QP's local ACK timeout exponent, 1 to 31
//   retry_count=N    the QP's retries after a timeout, 0 to 7
//   rails=H:P[+H:P]  more rails to the same server (connecting side only):
//                    a queue pair to each address as well as the URI's,
//                    one session (transport/rails/railed_connection.h);
//                    bulk transfers are sliced over all of them
// e.g. rdma://10.0.0.2:4000?device=rxe1&gid_index=1&tos=104. An unknown or
// malformed option is INVALID_ARGUMENT; tcp:// takes none.
#ifndef RDMARPC_TRANSPORT_FACTORY_FACTORY_H_
#define RDMARPC_TRANSPORT_FACTORY_FACTORY_H_

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <string_view>

#include "rdmarpc/status.h"
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
