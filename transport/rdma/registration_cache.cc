#include "transport/rdma/registration_cache.h"

namespace rdmarpc::transport::rdma {

RegistrationCache::RegistrationCache(ibv_pd* pd) : pd_(pd) {
  MemoryRegistration::AddObserver(this);
}

RegistrationCache::~RegistrationCache() {
  MemoryRegistration::RemoveObserver(this);
  // regions_ is destroyed now: every memory region deregistered.
}

std::optional<uint32_t> RegistrationCache::Lkey(
    const MemoryRegistration& registration) {
  std::lock_guard lock(mu_);
  auto it = regions_.find(registration.id());
  if (it != regions_.end()) return it->second->lkey;
  // Access 0: local read only, so read-only memory registers too.
  MemoryRegion region =
      RegisterRegion(pd_, registration.data(), registration.size(), 0);
  if (!region) return std::nullopt;
  ++registrations_;
  const uint32_t lkey = region->lkey;
  regions_.emplace(registration.id(), std::move(region));
  return lkey;
}

void RegistrationCache::Clear() {
  std::lock_guard lock(mu_);
  regions_.clear();
}

size_t RegistrationCache::size() const {
  std::lock_guard lock(mu_);
  return regions_.size();
}

void RegistrationCache::OnUnregistered(uint64_t id) noexcept {
  std::lock_guard lock(mu_);
  regions_.erase(id);
}

}  // namespace rdmarpc::transport::rdma
