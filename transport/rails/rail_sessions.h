// Opening a connection of several rails over RDMA (railed_connection.h).
//
// The connecting side draws a session of 16 random bytes and connects its
// rails with it in rdma_cm's private data (transport/rdma/protocol.h,
// ConnParams): first the primary, trying each address in order until one
// answers, then the others at once. The listener's side keeps the sessions
// it accepted: a primary opens one (the application accepts its
// RailedConnection), and a rail of a session it knows joins it; a rail of
// an unknown session is closed.
#ifndef RDMARPC_TRANSPORT_RAILS_RAIL_SESSIONS_H_
#define RDMARPC_TRANSPORT_RAILS_RAIL_SESSIONS_H_

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/connection.h"

namespace rdmarpc::transport::rails {

struct RailAddress {
  std::string host;
  uint16_t port = 0;
};

// Connects rails to `addresses` (rail i to addresses[i], at most kMaxRails):
// `done` runs once every rail has connected or failed (the warm-up), with
// the RailedConnection, or with why no rail could be the primary.
void ConnectRails(boost::asio::io_context& context,
                  std::vector<RailAddress> addresses,
                  const TransportOptions& options, ConnectHandler done);

// Wraps an RDMA listener's accept handler: connections that are rails go to
// their session, and a session's primary reaches `on_accept` as a
// RailedConnection; all others pass unchanged.
AcceptHandler AcceptRails(AcceptHandler on_accept);

}  // namespace rdmarpc::transport::rails

#endif  // RDMARPC_TRANSPORT_RAILS_RAIL_SESSIONS_H_
