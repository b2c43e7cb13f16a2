// Transport URIs: "tcp://host:port", "rdma://host:port", "auto://host:port".
// IPv6 hosts are bracketed: "tcp://[::1]:4000".
#ifndef RDMARPC_TRANSPORT_URI_H_
#define RDMARPC_TRANSPORT_URI_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status_or.h"

namespace rdmarpc::transport {

struct Uri {
  std::string scheme;
  std::string host;  // Without brackets.
  uint16_t port = 0;

  std::string ToString() const;
};

StatusOr<Uri> ParseUri(std::string_view text);

}  // namespace rdmarpc::transport

#endif  // RDMARPC_TRANSPORT_URI_H_
