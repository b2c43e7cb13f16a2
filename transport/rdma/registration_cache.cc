#include "transport/rdma/registration_cache.h"

#include "rdmarpc/tunables.h"

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

ibv_mr* RegistrationCache::BulkRegion(const MemoryRegistration& registration) {
  std::lock_guard lock(mu_);
  auto it = bulk_regions_.find(registration.id());
  if (it != bulk_regions_.end()) return it->second.get();
  MemoryRegion region =
      RegisterRegion(pd_, registration.data(), registration.size(),
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  if (!region) return nullptr;
  ++registrations_;
  ibv_mr* mr = region.get();
  bulk_regions_.emplace(registration.id(), std::move(region));
  return mr;
}

std::shared_ptr<ibv_mr> RegistrationCache::ExactBulkRegion(
    const MemoryRegistration& registration, std::span<std::byte> bytes) {
  const Exact key{registration.id(), bytes.data(), bytes.size()};
  std::shared_ptr<ibv_mr> evicted;  // Deregistered outside the lock.
  std::lock_guard lock(mu_);
  auto it = exact_.find(key);
  if (it != exact_.end()) return it->second;
  MemoryRegion region =
      RegisterRegion(pd_, bytes.data(), bytes.size(),
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  if (!region) return nullptr;
  ++registrations_;
  if (exact_.size() >= tunables::kMaxExactBulkRegions) {
    evicted = std::move(exact_.begin()->second);
    exact_.erase(exact_.begin());
  }
  std::shared_ptr<ibv_mr> shared(std::move(region));
  exact_.emplace(key, shared);
  return shared;
}

void RegistrationCache::Clear() {
  std::lock_guard lock(mu_);
  regions_.clear();
  bulk_regions_.clear();
  exact_.clear();
}

size_t RegistrationCache::size() const {
  std::lock_guard lock(mu_);
  return regions_.size() + bulk_regions_.size() + exact_.size();
}

void RegistrationCache::OnUnregistered(uint64_t id) noexcept {
  std::lock_guard lock(mu_);
  regions_.erase(id);
  bulk_regions_.erase(id);
  std::erase_if(exact_,
                [id](const auto& entry) { return entry.first.id == id; });
}

}  // namespace rdmarpc::transport::rdma
