// Naming: from a target that names a set of servers to their endpoints.
//
//   list://10.0.0.1:7000,10.0.0.2:7000        a fixed set
//   dns://[DNS-SERVER]/name:7000               every address of a name,
//                                              re-resolved (dns_refresh)
//   etcd://10.0.0.5:2379,10.0.0.6:2379/services/kv
//                                              the servers registered under
//                                              a prefix
//                                              (naming/registration.h), watched
//                                              for changes
//
// An endpoint is a transport URI (transport/uri.h). In list:// and dns://
// a bare host:port gets ResolverOptions::default_scheme ("auto": RDMA where
// a device can reach the host, else TCP); a list entry may carry its own
// ("list://rdma://10.0.0.1:7000,tcp://10.0.0.2:7000"). Servers registered
// in etcd publish their full URI.
#ifndef RDMARPC_NAMING_RESOLVER_H_
#define RDMARPC_NAMING_RESOLVER_H_

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rdmarpc/naming_options.h"
#include "rdmarpc/status.h"

namespace rdmarpc::naming {

class Resolver {
 public:
  // A set of endpoints (sorted, without duplicates), or why none is known.
  using Update = std::function<void(StatusOr<std::vector<std::string>>)>;

  virtual ~Resolver() = default;
  // Starts resolving. `update` runs on the resolver's executor, one call at
  // a time: with the first set once it is known, then with each set that
  // differs from the last. An error is reported while no set has been
  // known yet; after that the last set stands (an etcd that restarts does
  // not empty the cluster) and errors are only logged.
  virtual void Start(Update update) = 0;
  // No update starts after Stop returns on the executor's thread (one may
  // be running on it when Stop is called from another).
  virtual void Stop() = 0;
  // A hint that the set may be stale (an endpoint stopped answering):
  // dns:// resolves again now; the others know of changes already.
  virtual void Refresh() {}
};

// True for list://, dns:// and etcd:// targets.
bool IsClusterTarget(std::string_view target);

// The resolver of a cluster target; INVALID_ARGUMENT if it is malformed.
StatusOr<std::unique_ptr<Resolver>> MakeResolver(
    std::string_view target, boost::asio::any_io_executor executor,
    const ResolverOptions& options = {});

// The parts of an etcd:// target: its members ("h1:p1,h2:p2") and the
// prefix its servers register under, without a trailing '/'.
struct EtcdTarget {
  std::string endpoints;
  std::string prefix;
};
StatusOr<EtcdTarget> ParseEtcdTarget(std::string_view target);

// The key a server with `uri` registers under `prefix`: prefix/uri.
std::string RegistrationKey(std::string_view prefix, std::string_view uri);

}  // namespace rdmarpc::naming

#endif  // RDMARPC_NAMING_RESOLVER_H_
