#include "examples/kv/kv_service.h"

#include <mutex>

namespace rdmarpc::examples::kv {
namespace {

Status EmptyKey() {
  return Status(StatusCode::kInvalidArgument, "key must not be empty");
}

Status NotFound(const std::string& key) {
  return Status(StatusCode::kNotFound, "key '" + key + "' not found");
}

}  // namespace

Status Store::Put(const std::string& key, std::string value) {
  if (key.empty()) return EmptyKey();
  if (value.size() > kMaxValueSize) {
    return Status(StatusCode::kInvalidArgument,
                  "value of " + std::to_string(value.size()) +
                      " bytes exceeds the maximum of " +
                      std::to_string(kMaxValueSize));
  }
  auto shared = std::make_shared<const std::string>(std::move(value));
  std::unique_lock lock(mu_);
  const auto it = map_.find(key);
  const uint64_t old_size =
      it == map_.end() ? 0 : key.size() + it->second->size();
  const uint64_t new_bytes = bytes_ - old_size + key.size() + shared->size();
  if (new_bytes > capacity_) {
    return Status(StatusCode::kResourceExhausted,
                  "store is full: " + std::to_string(bytes_) + " of " +
                      std::to_string(capacity_) + " bytes used");
  }
  bytes_ = new_bytes;
  if (it == map_.end()) {
    map_.emplace(key, std::move(shared));
  } else {
    it->second = std::move(shared);
  }
  return Status();
}

Status Store::Get(const std::string& key, std::string* value) const {
  if (key.empty()) return EmptyKey();
  std::shared_ptr<const std::string> found;
  {
    std::shared_lock lock(mu_);
    const auto it = map_.find(key);
    if (it == map_.end()) return NotFound(key);
    found = it->second;
  }
  *value = *found;  // Copied outside the lock.
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

uint64_t Store::bytes() const {
  std::shared_lock lock(mu_);
  return bytes_;
}

void KeyValueImpl::Put(
    std::shared_ptr<rpc::TypedCall<PutRequest, PutReply>> call) {
  // Move the value into the store instead of copying up to 64 MiB.
  PutRequest& request = call->mutable_request();
  call->Finish(store_.Put(request.key(), std::move(*request.mutable_value())));
}

void KeyValueImpl::Get(
    std::shared_ptr<rpc::TypedCall<GetRequest, GetReply>> call) {
  call->Finish(
      store_.Get(call->request().key(), call->response().mutable_value()));
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

}  // namespace rdmarpc::examples::kv
