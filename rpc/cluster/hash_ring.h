// HashRing: the consistent-hash ring of LoadBalancing::kHashRing
// (include/rdmarpc/cluster_options.h): points_per_endpoint points per endpoint
// at BalanceKey("uri#i"), so that adding or removing an endpoint moves only the
// keys that land on its points.
#ifndef RDMARPC_RPC_CLUSTER_HASH_RING_H_
#define RDMARPC_RPC_CLUSTER_HASH_RING_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rdmarpc::rpc {

class HashRing {
 public:
  static constexpr size_t kNone = SIZE_MAX;

  HashRing() = default;
  // Endpoint i of `endpoints` is index i in Find's answers.
  HashRing(const std::vector<std::string>& endpoints, int points_per_endpoint);

  // Walking clockwise from `key`: the first endpoint index for which
  // `take(index)` is true; kNone if none is.
  template <typename Take>
  size_t Find(uint64_t key, Take take) const {
    if (points_.empty()) return kNone;
    auto start = std::lower_bound(points_.begin(), points_.end(),
                                  std::pair<uint64_t, uint32_t>(key, 0));
    for (size_t n = 0; n < points_.size(); ++n, ++start) {
      if (start == points_.end()) start = points_.begin();
      if (take(start->second)) return start->second;
    }
    return kNone;
  }
  bool empty() const { return points_.empty(); }

 private:
  std::vector<std::pair<uint64_t, uint32_t>> points_;  // Sorted by hash.
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_CLUSTER_HASH_RING_H_
