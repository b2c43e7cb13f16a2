// The resolvers behind MakeResolver (naming/resolver.h), one file each.
#ifndef RDMARPC_NAMING_RESOLVER_INTERNAL_H_
#define RDMARPC_NAMING_RESOLVER_INTERNAL_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "naming/etcd_client.h"
#include "naming/resolver.h"

namespace rdmarpc::naming {

// A set of endpoints in the form updates carry: sorted, no duplicates.
void Normalize(std::vector<std::string>& endpoints);

// The URI of one endpoint "host:port" or "scheme://host:port[?...]";
// INVALID_ARGUMENT when it is neither.
StatusOr<std::string> EndpointUri(std::string_view item,
                                  std::string_view default_scheme);

std::unique_ptr<Resolver> MakeListResolver(
    std::vector<std::string> endpoints, boost::asio::any_io_executor executor);
StatusOr<std::unique_ptr<Resolver>> MakeDnsResolver(
    std::string_view target, const boost::asio::any_io_executor& executor,
    const ResolverOptions& options);
std::unique_ptr<Resolver> MakeEtcdResolver(
    std::shared_ptr<EtcdClient> etcd, std::string prefix,
    const boost::asio::any_io_executor& executor,
    const ResolverOptions& options);

}  // namespace rdmarpc::naming

#endif  // RDMARPC_NAMING_RESOLVER_INTERNAL_H_
