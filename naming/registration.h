// Registration: a server announcing itself in etcd under a prefix, for
// clients whose target is etcd://.../prefix (naming/resolver.h).
//
//   auto registration = naming::Registration::Start(
//       loop.get_executor(), "etcd://10.0.0.5:2379/services/kv",
//       "rdma://10.0.0.2:7000");
//   ...
//   (*registration)->Stop();  // Before the server stops taking calls.
//
// The key prefix/URI holds the URI, attached to a lease of `ttl` that is
// renewed every ttl/3. A graceful Stop revokes the lease, so the key goes
// at once; a server that crashes stops renewing, and etcd deletes the key
// when the lease runs out: clients stop sending to it within the TTL.
// While etcd cannot be reached the registration keeps trying; a lease that
// expired meanwhile is replaced by a new one and the key put again.
#ifndef RDMARPC_NAMING_REGISTRATION_H_
#define RDMARPC_NAMING_REGISTRATION_H_

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "naming/etcd_client.h"
#include "rdmarpc/naming_options.h"
#include "rdmarpc/status.h"

namespace rdmarpc::naming {

struct RegistrationStats {
  uint64_t registrations = 0;  // Leases granted with the key put.
  uint64_t renewals = 0;       // Keepalives etcd answered.
  uint64_t failures = 0;       // Requests that failed (retried).
};

class Registration {
 public:
  // Starts registering `uri` under the prefix of `target`
  // (etcd://host:port[,...]/prefix). INVALID_ARGUMENT if either is
  // malformed; etcd's answers come later (registered(), stats()).
  static StatusOr<std::unique_ptr<Registration>> Start(
      const boost::asio::any_io_executor& executor, std::string_view target,
      std::string uri, RegistrationOptions options = {});

  // Stop() if not stopped, without waiting for etcd.
  ~Registration();

  // Deregisters: revokes the lease (the key goes with it) and renews no
  // more. Blocks until etcd answered or request_timeout passed for each
  // member; must not run on the executor's thread. Returns etcd's answer.
  Status Stop();

  // True once the key is in etcd, until Stop or a failed renewal.
  bool registered() const;
  RegistrationStats stats() const;
  const std::string& key() const;

  class State;

 private:
  explicit Registration(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace rdmarpc::naming

#endif  // RDMARPC_NAMING_REGISTRATION_H_
