#include "rpc/cluster/hash_ring.h"

#include "rdmarpc/cluster_options.h"

namespace rdmarpc {

uint64_t BalanceKey(std::string_view bytes) {
  // FNV-1a, then a finalizer (splitmix64's) so nearby inputs spread.
  uint64_t hash = 14695981039346656037ull;
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  hash ^= hash >> 30;
  hash *= 0xbf58476d1ce4e5b9ull;
  hash ^= hash >> 27;
  hash *= 0x94d049bb133111ebull;
  return hash ^ (hash >> 31);
}

namespace rpc {

HashRing::HashRing(const std::vector<std::string>& endpoints,
                   int points_per_endpoint) {
  points_.reserve(endpoints.size() * points_per_endpoint);
  for (uint32_t i = 0; i < endpoints.size(); ++i) {
    for (int p = 0; p < points_per_endpoint; ++p) {
      points_.emplace_back(BalanceKey(endpoints[i] + "#" + std::to_string(p)),
                           i);
    }
  }
  std::sort(points_.begin(), points_.end());
}

}  // namespace rpc
}  // namespace rdmarpc
