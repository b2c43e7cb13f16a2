// Options of naming (naming/resolver.h, naming/etcd_client.h), apart from
// them so that a Channel's options can hold them without etcd's messages.
#ifndef RDMARPC_NAMING_OPTIONS_H_
#define RDMARPC_NAMING_OPTIONS_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace rdmarpc {

struct EtcdOptions {
  // One member's time to connect and answer a request (a watch: to answer
  // its create request).
  std::chrono::milliseconds request_timeout{2000};
  // A larger response (a Range over a huge prefix) fails RESOURCE_EXHAUSTED.
  uint64_t max_response_bytes = uint64_t{64} << 20;
};

struct ResolverOptions {
  // The scheme of a bare host:port in list:// and dns://.
  std::string default_scheme = "auto";
  // How often dns:// resolves again (and at most how stale its set is).
  std::chrono::milliseconds dns_refresh{30000};
  // etcd://: each request's timeout, and the pause before listing or
  // watching again after etcd could not be reached.
  EtcdOptions etcd;
  std::chrono::milliseconds etcd_retry{1000};
};

struct RegistrationOptions {
  // The lease's time to live: how long a crashed server stays listed.
  // etcd counts whole seconds; at least 1 s.
  std::chrono::seconds ttl{5};
  EtcdOptions etcd;
};

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace naming {
using rdmarpc::EtcdOptions;
using rdmarpc::RegistrationOptions;
using rdmarpc::ResolverOptions;
}  // namespace naming

}  // namespace rdmarpc

#endif  // RDMARPC_NAMING_OPTIONS_H_
