#include "examples/kv/kv_service.h"

#include <algorithm>
#include <bit>
#include <mutex>

namespace rdmarpc::examples::kv {
namespace {

Status EmptyKey() {
  return Status(StatusCode::kInvalidArgument, "key must not be empty");
}

Status NotFound(const std::string& key) {
  return Status(StatusCode::kNotFound, "key '" + key + "' not found");
}

size_t SizeClass(size_t size) {
  constexpr size_t kSmallest = 4096;
  return std::max(kSmallest, std::bit_ceil(size));
}

}  // namespace

StatusOr<std::shared_ptr<ValueArena::Block>> ValueArena::Allocate(size_t size) {
  constexpr size_t kChunk = 4 << 20;
  const size_t block = SizeClass(size);
  std::lock_guard lock(mu_);
  std::vector<std::byte*>& free = free_[block];
  if (free.empty()) {
    auto chunk = MemoryRegistration::Allocate(std::max(block, kChunk));
    if (!chunk.ok()) return chunk.status();
    for (size_t at = 0; at + block <= (*chunk)->size(); at += block) {
      free.push_back((*chunk)->data() + at);
    }
    chunks_.push_back(std::move(*chunk));
  }
  std::byte* data = free.back();
  free.pop_back();
  return std::make_shared<Block>(shared_from_this(), data, block);
}

void ValueArena::Free(std::byte* data, size_t size) {
  std::lock_guard lock(mu_);
  free_[size].push_back(data);
}

size_t ValueArena::chunks() const {
  std::lock_guard lock(mu_);
  return chunks_.size();
}

Buffer Value::Attachment(std::shared_ptr<const Value> value) {
  const std::string_view bytes = value->view();
  // Read only, though a Buffer's bytes are not const.
  auto* data = reinterpret_cast<std::byte*>(const_cast<char*>(bytes.data()));
  return Buffer(
      data, bytes.size(),
      [](void* held, std::byte*) noexcept {
        delete static_cast<std::shared_ptr<const Value>*>(held);
      },
      new std::shared_ptr<const Value>(std::move(value)));
}

Status Store::Put(const std::string& key, std::string value) {
  return Put(key, std::make_shared<const Value>(std::move(value)));
}

Status Store::Put(const std::string& key, std::shared_ptr<const Value> value) {
  if (key.empty()) return EmptyKey();
  if (value->size() > kMaxValueSize) {
    return Status(StatusCode::kInvalidArgument,
                  "value of " + std::to_string(value->size()) +
                      " bytes exceeds the maximum of " +
                      std::to_string(kMaxValueSize));
  }
  std::unique_lock lock(mu_);
  const auto it = map_.find(key);
  const uint64_t old_size =
      it == map_.end() ? 0 : key.size() + it->second->size();
  const uint64_t new_bytes = bytes_ - old_size + key.size() + value->size();
  if (new_bytes > capacity_) {
    return Status(StatusCode::kResourceExhausted,
                  "store is full: " + std::to_string(bytes_) + " of " +
                      std::to_string(capacity_) + " bytes used");
  }
  bytes_ = new_bytes;
  if (it == map_.end()) {
    map_.emplace(key, std::move(value));
  } else {
    it->second = std::move(value);
  }
  return Status();
}

std::shared_ptr<const Value> Store::Find(const std::string& key,
                                         Status* status) const {
  if (key.empty()) {
    *status = EmptyKey();
    return nullptr;
  }
  std::shared_lock lock(mu_);
  const auto it = map_.find(key);
  if (it == map_.end()) {
    *status = NotFound(key);
    return nullptr;
  }
  return it->second;
}

Status Store::Get(const std::string& key, std::string* value) const {
  Status status;
  const std::shared_ptr<const Value> found = Find(key, &status);
  if (!found) return status;
  *value = found->view();  // Copied outside the lock.
  return Status();
}

Status Store::Delete(const std::string& key) {
  if (key.empty()) return EmptyKey();
  std::unique_lock lock(mu_);
  const auto it = map_.find(key);
  if (it == map_.end()) return NotFound(key);
  bytes_ -= key.size() + it->second->size();
  map_.erase(it);
  return Status();
}

void Store::Scan(const std::string& prefix, uint32_t limit,
                 ScanReply* reply) const {
  std::shared_lock lock(mu_);
  for (auto it = map_.lower_bound(prefix);
       it != map_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
       ++it) {
    if (static_cast<uint32_t>(reply->entries_size()) == limit) {
      reply->set_truncated(true);
      return;
    }
    auto* entry = reply->add_entries();
    entry->set_key(it->first);
    entry->set_value_size(it->second->size());
  }
}

std::vector<std::pair<std::string, std::shared_ptr<const Value>>>
Store::Snapshot(const std::string& prefix, uint32_t limit) const {
  std::vector<std::pair<std::string, std::shared_ptr<const Value>>> out;
  std::shared_lock lock(mu_);
  for (auto it = map_.lower_bound(prefix);
       it != map_.end() && it->first.compare(0, prefix.size(), prefix) == 0 &&
       (limit == 0 || out.size() < limit);
       ++it) {
    out.emplace_back(it->first, it->second);
  }
  return out;
}

uint64_t Store::bytes() const {
  std::shared_lock lock(mu_);
  return bytes_;
}

void KeyValueImpl::Put(
    std::shared_ptr<rpc::TypedCall<PutRequest, PutReply>> call) {
  if (call->request().value().empty() && !call->bulk().empty()) {
    return PutPulled(std::move(call));
  }
  // Move the value into the store instead of copying up to 64 MiB.
  PutRequest& request = call->mutable_request();
  call->Finish(store_.Put(request.key(), std::move(*request.mutable_value())));
}

void KeyValueImpl::PutPulled(
    std::shared_ptr<rpc::TypedCall<PutRequest, PutReply>> call) {
  const BulkDescriptor loan = call->bulk()[0];
  if (call->request().key().empty()) return call->Finish(EmptyKey());
  if (loan.length > kMaxValueSize) {
    return call->Finish(Status(StatusCode::kInvalidArgument,
                               "value of " + std::to_string(loan.length) +
                                   " bytes exceeds the maximum of " +
                                   std::to_string(kMaxValueSize)));
  }
  auto block = arena_->Allocate(loan.length);
  if (!block.ok()) return call->Finish(block.status());
  std::byte* into = (*block)->data();
  // Straight from the client's memory into the arena: RDMA READs over
  // rdma://, the bytes over the socket over tcp://.
  call->Pull(loan, 0, {into, loan.length},
             [this, call, block = std::move(*block),
              size = loan.length](const Status& pulled) mutable {
               if (!pulled.ok()) return call->Finish(pulled);
               call->Finish(store_.Put(
                   call->request().key(),
                   std::make_shared<const Value>(std::move(block), size)));
             });
}

void KeyValueImpl::Get(
    std::shared_ptr<rpc::TypedCall<GetRequest, GetReply>> call) {
  if (!call->request().value_as_attachment()) {
    return call->Finish(
        store_.Get(call->request().key(), call->response().mutable_value()));
  }
  Status status;
  std::shared_ptr<const Value> value =
      store_.Find(call->request().key(), &status);
  if (!value) return call->Finish(status);
  // Into the client's destination, if it gave one: from the arena, one
  // RDMA WRITE.
  call->set_response_attachment(Value::Attachment(std::move(value)));
  call->Finish();
}

void KeyValueImpl::Delete(
    std::shared_ptr<rpc::TypedCall<DeleteRequest, DeleteReply>> call) {
  call->Finish(store_.Delete(call->request().key()));
}

void KeyValueImpl::Scan(
    std::shared_ptr<rpc::TypedCall<ScanRequest, ScanReply>> call) {
  uint32_t limit = call->request().limit();
  if (limit == 0) limit = kDefaultScanLimit;
  if (limit > kMaxScanLimit) {
    return call->Finish(
        Status(StatusCode::kInvalidArgument,
               "limit must be at most " + std::to_string(kMaxScanLimit)));
  }
  store_.Scan(call->request().prefix(), limit, &call->response());
  call->Finish();
}

namespace {

using ScanOut = rpc::TypedServerStream<ScanRequest, ScanEntry>;
using Entries =
    std::vector<std::pair<std::string, std::shared_ptr<const Value>>>;

// Writes entries[next...] one after another, each once the client's window
// lets the one before it go, then ends the call.
void WriteFrom(std::shared_ptr<ScanOut> stream,
               std::shared_ptr<const Entries> entries, size_t next) {
  if (next == entries->size()) return stream->Finish(Status());
  ScanEntry entry;
  entry.set_key((*entries)[next].first);
  entry.set_value(std::string((*entries)[next].second->view()));
  stream->async_Write(entry, [stream, entries, next](const Status& status) {
    // Not written: the call has ended (cancelled, or the client is gone).
    if (status.ok()) WriteFrom(stream, entries, next + 1);
  });
}

using PutIn = rpc::TypedServerStream<PutRequest, PutStreamReply>;

// Reads puts until the client's half-close, storing each.
void ReadFrom(std::shared_ptr<PutIn> stream, Store* store,
              PutStreamReply reply) {
  stream->async_Read(
      [stream, store, reply](const Status& status,
                             std::optional<PutRequest> put) mutable {
        if (!put) {
          if (!status.ok()) return stream->Finish(status);
          return stream->Finish(Status(), reply);
        }
        const uint64_t size = put->value().size();
        const Status stored =
            store->Put(put->key(), std::move(*put->mutable_value()));
        if (!stored.ok()) return stream->Finish(stored);
        reply.set_keys(reply.keys() + 1);
        reply.set_value_bytes(reply.value_bytes() + size);
        ReadFrom(std::move(stream), store, std::move(reply));
      });
}

}  // namespace

void KeyValueImpl::ScanStream(std::shared_ptr<ScanOut> stream) {
  auto entries = std::make_shared<const Entries>(
      store_.Snapshot(stream->request().prefix(), stream->request().limit()));
  WriteFrom(std::move(stream), std::move(entries), 0);
}

void KeyValueImpl::PutStream(std::shared_ptr<PutIn> stream) {
  ReadFrom(std::move(stream), &store_, PutStreamReply());
}

}  // namespace rdmarpc::examples::kv
