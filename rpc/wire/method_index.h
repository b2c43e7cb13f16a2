// MethodIndex: a server's methods by MethodId (include/rdmarpc/method_ref.h),
// for the requests that name their method by id.
//
// Ids are hashes, so two methods may share one. Such an id is ambiguous: it
// finds neither method, and both stay callable by name. The server logs the
// collision when it builds the index.
#ifndef RDMARPC_RPC_WIRE_METHOD_INDEX_H_
#define RDMARPC_RPC_WIRE_METHOD_INDEX_H_

#include <cstdint>
#include <unordered_map>

namespace rdmarpc::rpc {

template <typename Entry>
class MethodIndex {
 public:
  enum class Found { kOne, kNone, kAmbiguous };

  // False if another entry has `id` already: the id is ambiguous from now.
  bool Add(uint64_t id, Entry* entry) {
    const auto [it, added] = entries_.try_emplace(id, entry);
    if (added || it->second == entry) return true;
    it->second = nullptr;
    return false;
  }
  void Clear() { entries_.clear(); }

  // The entry with `id`, or nullptr and why not.
  Entry* Find(uint64_t id, Found* found) const {
    const auto it = entries_.find(id);
    if (it == entries_.end()) {
      *found = Found::kNone;
      return nullptr;
    }
    *found = it->second != nullptr ? Found::kOne : Found::kAmbiguous;
    return it->second;
  }

 private:
  std::unordered_map<uint64_t, Entry*> entries_;  // nullptr: ambiguous.
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_WIRE_METHOD_INDEX_H_
