// The KV example's store and service.
#ifndef RDMARPC_EXAMPLES_KV_KV_SERVICE_H_
#define RDMARPC_EXAMPLES_KV_KV_SERVICE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "examples/kv/kv.rdmarpc.h"
#include "rdmarpc/memory.h"

namespace rdmarpc::examples::kv {

// Values up to 64 MiB; a message carries one value plus a little framing.
inline constexpr uint64_t kMaxValueSize = 64ull << 20;
inline constexpr uint64_t kMaxMessageSize = kMaxValueSize + (1 << 20);
inline constexpr uint32_t kDefaultScanLimit = 100;
inline constexpr uint32_t kMaxScanLimit = 10000;

// Registered memory for the values clients lend (a Put the server pulls
// straight into it, a Get it pushes straight from): blocks of power-of-two
// sizes from 4 KiB, carved from chunks of at least 4 MiB, each chunk one
// MemoryRegistration, so that once warm a Put registers nothing. A block
// goes back to its size's free list when its value goes; chunks stay.
class ValueArena : public std::enable_shared_from_this<ValueArena> {
 public:
  class Block {
   public:
    Block(std::shared_ptr<ValueArena> arena, std::byte* data, size_t size)
        : arena_(std::move(arena)), data_(data), size_(size) {}
    ~Block() { arena_->Free(data_, size_); }
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;
    std::byte* data() const { return data_; }

   private:
    const std::shared_ptr<ValueArena> arena_;
    std::byte* const data_;
    const size_t size_;  // Its size class's.
  };

  // A block of at least `size` bytes (1 to kMaxValueSize).
  StatusOr<std::shared_ptr<Block>> Allocate(size_t size);
  // Chunks registered so far.
  size_t chunks() const;

 private:
  void Free(std::byte* data, size_t size);

  mutable std::mutex mu_;
  std::map<size_t, std::vector<std::byte*>> free_;  // By size class.
  std::vector<std::shared_ptr<MemoryRegistration>> chunks_;
};

// A stored value: bytes a Put carried in its message, or pulled into a
// block of registered memory.
class Value {
 public:
  explicit Value(std::string text) : text_(std::move(text)) {}
  Value(std::shared_ptr<ValueArena::Block> block, size_t size)
      : block_(std::move(block)), size_(size) {}
  std::string_view view() const {
    return block_ ? std::string_view(
                        reinterpret_cast<const char*>(block_->data()), size_)
                  : std::string_view(text_);
  }
  size_t size() const { return view().size(); }
  // A Buffer over the bytes that keeps `value` alive: a response's
  // attachment, written from registered memory when the value has some.
  static Buffer Attachment(std::shared_ptr<const Value> value);

 private:
  std::string text_;
  std::shared_ptr<ValueArena::Block> block_;
  size_t size_ = 0;
};

// An ordered in-memory map, safe under concurrent calls: readers share a
// lock, writers take it alone. Values are held by shared_ptr so a Get copies
// out of the lock, not under it.
class Store {
 public:
  explicit Store(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  Status Put(const std::string& key, std::string value);
  Status Put(const std::string& key, std::shared_ptr<const Value> value);
  Status Get(const std::string& key, std::string* value) const;
  // The value itself, shared; null with NOT_FOUND in `*status`.
  std::shared_ptr<const Value> Find(const std::string& key,
                                    Status* status) const;
  Status Delete(const std::string& key);
  void Scan(const std::string& prefix, uint32_t limit, ScanReply* reply) const;
  // The keys starting with `prefix` (at most `limit`, if not 0) and their
  // values, in key order: shared, not copied.
  std::vector<std::pair<std::string, std::shared_ptr<const Value>>> Snapshot(
      const std::string& prefix, uint32_t limit) const;

  uint64_t bytes() const;

 private:
  const uint64_t capacity_;
  mutable std::shared_mutex mu_;
  std::map<std::string, std::shared_ptr<const Value>> map_;  // Guarded.
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
  // A Put whose value the client lent (bulk loan 0): pulled into the arena.
  void PutPulled(std::shared_ptr<rpc::TypedCall<PutRequest, PutReply>> call);

  Store store_;
  const std::shared_ptr<ValueArena> arena_ = std::make_shared<ValueArena>();
};

}  // namespace rdmarpc::examples::kv

#endif  // RDMARPC_EXAMPLES_KV_KV_SERVICE_H_
