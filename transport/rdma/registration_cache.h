// A connection's memory regions for the user's MemoryRegistrations.
//
// A registration is registered with this connection's protection domain the
// first time a payload from it is sent, and the memory region is kept until
// the registration ends (the registry tells us) or the connection does.
// Local access only: these regions are read by our own RDMA WRITEs and never
// exposed to the peer (a bulk loan's window, bound to one QP, is how a peer
// reaches one: BulkRegion).
#ifndef RDMARPC_TRANSPORT_RDMA_REGISTRATION_CACHE_H_
#define RDMARPC_TRANSPORT_RDMA_REGISTRATION_CACHE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>

#include "rdmarpc/memory.h"
#include "transport/rdma/verbs.h"

namespace rdmarpc::transport::rdma {

class RegistrationCache final : public MemoryRegistration::Observer {
 public:
  explicit RegistrationCache(ibv_pd* pd);
  // Deregisters every region; the PD must still exist.
  ~RegistrationCache();
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  // The lkey for `registration`'s memory in this PD, registering it on first
  // use; nullopt (errno set) when ibv_reg_mr fails.
  std::optional<uint32_t> Lkey(const MemoryRegistration& registration);

  // Bulk loans and pulls (include/rdmarpc/bulk.h): `registration`'s memory
  // in this PD registered for local writes and memory-window binds (a pull
  // lands in it; a loan's window is bound on it), registering it on first
  // use; null (errno set) when ibv_reg_mr fails. Never remote access: the
  // peer reaches it only through a window bound to one QP.
  ibv_mr* BulkRegion(const MemoryRegistration& registration);
  // The same for exactly `bytes` (inside `registration`), on a device that
  // checks a window against its region only (rxe): a region of its own,
  // kept for the next loan of the same bytes, up to kMaxExactBulkRegions.
  // Shared: one evicted (or left by its registration) while a loan is bound
  // on it goes when that loan does. Null (errno set) when ibv_reg_mr fails.
  std::shared_ptr<ibv_mr> ExactBulkRegion(
      const MemoryRegistration& registration, std::span<std::byte> bytes);

  // Deregisters every region now (the device is going away); the cache
  // stays usable as an observer but must not be asked for an Lkey again.
  void Clear();

  size_t size() const;
  uint64_t registrations() const { return registrations_; }

  void OnUnregistered(uint64_t id) noexcept override;

 private:
  ibv_pd* const pd_;
  mutable std::mutex mu_;  // The registry calls OnUnregistered on any thread.
  std::unordered_map<uint64_t, MemoryRegion> regions_;  // By registration id.
  std::unordered_map<uint64_t, MemoryRegion> bulk_regions_;  // Likewise.
  struct Exact {
    uint64_t id;  // The registration's.
    std::byte* data;
    size_t size;
    bool operator==(const Exact&) const = default;
  };
  struct ExactHash {
    size_t operator()(const Exact& key) const noexcept {
      return std::hash<const void*>()(key.data) * 31 + key.size;
    }
  };
  std::unordered_map<Exact, std::shared_ptr<ibv_mr>, ExactHash> exact_;
  uint64_t registrations_ = 0;  // ibv_reg_mr calls made.
};

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_REGISTRATION_CACHE_H_
