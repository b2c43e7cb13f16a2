// Options of naming (naming/resolver.h, naming/etcd_client.h), apart from
// them so that a Channel's options can hold them without etcd's messages.
#ifndef RDMARPC_NAMING_OPTIONS_H_
#define RDMARPC_NAMING_OPTIONS_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "rdmarpc/tls_options.h"

namespace rdmarpc {

struct EtcdOptions {
  // One member's time to connect and answer a request (a watch: to answer
  // its create request).
  std::chrono::milliseconds request_timeout{2000};
  // A larger response (a Range over a huge prefix) fails RESOURCE_EXHAUSTED.
  uint64_t max_response_bytes = uint64_t{64} << 20;
  // TLS to etcd (a member started with --cert-file and --key-file): on
  // when tls.ca_file is set or an endpoint is written "https://", and then
  // every member is reached over TLS, none in plaintext. tls.ca_file is
  // the CA the members' certificates end in (required); tls.cert_file and
  // tls.key_file, this client's certificate for a member that wants one
  // (--client-cert-auth). A member's certificate must name the host of its
  // endpoint, or tls.server_name.
  TlsOptions tls;
  // etcd's user authentication (etcdctl auth enable): the client asks for
  // a token with `user` and `password` before its first request and sends
  // it with every request; a token etcd no longer accepts is replaced
  // once. Empty user: no authentication (etcd may still take the user
  // from the client certificate's common name).
  std::string user;
  std::string password;
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
