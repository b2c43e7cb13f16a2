// Transport URIs: "tcp://host:port", "rdma://host:port", "auto://host:port".
// IPv6 hosts are bracketed: "tcp://[::1]:4000". Options follow a '?' as
// name=value pairs joined by '&' ("rdma://10.0.0.1:4000?device=rxe1&tos=32");
// which names a transport takes, and what they mean, is the transport's
// (transport/factory/factory.h).
#ifndef RDMARPC_TRANSPORT_URI_H_
#define RDMARPC_TRANSPORT_URI_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rdmarpc/status.h"

namespace rdmarpc::transport {

struct Uri {
  std::string scheme;
  std::string host;  // Without brackets.
  uint16_t port = 0;
  // In the order given; each name at most once, none empty.
  std::vector<std::pair<std::string, std::string>> params;

  std::string ToString() const;  // With the options, if any.
};

StatusOr<Uri> ParseUri(std::string_view text);

}  // namespace rdmarpc::transport

#endif  // RDMARPC_TRANSPORT_URI_H_
