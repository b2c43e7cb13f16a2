// The KV example's store and service.
#ifndef RDMARPC_EXAMPLES_KV_KV_SERVICE_H_
#define RDMARPC_EXAMPLES_KV_KV_SERVICE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "examples/kv/kv.rdmarpc.h"

namespace rdmarpc::examples::kv {

// Values up to 64 MiB; a message carries one value plus a little framing.
inline constexpr uint64_t kMaxValueSize = 64ull << 20;
inline constexpr uint64_t kMaxMessageSize = kMaxValueSize + (1 << 20);
inline constexpr uint32_t kDefaultScanLimit = 100;
inline constexpr uint32_t kMaxScanLimit = 10000;

// An ordered in-memory map, safe under concurrent calls: readers share a
// lock, writers take it alone. Values are held by shared_ptr so a Get copies
// out of the lock, not under it.
class Store {
 public:
  explicit Store(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  Status Put(const std::string& key, std::string value);
  Status Get(const std::string& key, std::string* value) const;
  Status Delete(const std::string& key);
  void Scan(const std::string& prefix, uint32_t limit, ScanReply* reply) const;
  // The keys starting with `prefix` (at most `limit`, if not 0) and their
  // values, in key order: shared, not copied.
  std::vector<std::pair<std::string, std::shared_ptr<const std::string>>>
  Snapshot(const std::string& prefix, uint32_t limit) const;

  uint64_t bytes() const;

 private:
  const uint64_t capacity_;
  mutable std::shared_mutex mu_;
  std::map<std::string, std::shared_ptr<const std::string>> map_;  // Guarded.
  uint64_t bytes_ = 0;  // Keys plus values; guarded by mu_.
};

class KeyValueImpl final : public KeyValue::Service {
 public:
  explicit KeyValueImpl(uint64_t capacity_bytes) : store_(capacity_bytes) {}

  void Put(std::shared_ptr<rpc::TypedCall<PutRequest, PutReply>> call) override;
  void Get(std::shared_ptr<rpc::TypedCall<GetRequest, GetReply>> call) override;
  void Delete(std::shared_ptr<rpc::TypedCall<DeleteRequest, DeleteReply>> call)
      override;
  void Scan(
      std::shared_ptr<rpc::TypedCall<ScanRequest, ScanReply>> call) override;
  void ScanStream(
      std::shared_ptr<rpc::TypedServerStream<ScanRequest, ScanEntry>> stream)
      override;
  void PutStream(
      std::shared_ptr<rpc::TypedServerStream<PutRequest, PutStreamReply>>
          stream) override;

  const Store& store() const { return store_; }

 private:
  Store store_;
};

}  // namespace rdmarpc::examples::kv

#endif  // RDMARPC_EXAMPLES_KV_KV_SERVICE_H_
