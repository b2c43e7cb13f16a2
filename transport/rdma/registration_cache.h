// A connection's memory regions for the user's MemoryRegistrations.
//
// A registration is registered with this connection's protection domain the
// first time a payload from it is sent, and the memory region is kept until
// the registration ends (the registry tells us) or the connection does.
// Local access only: these regions are read by our own RDMA WRITEs and never
// exposed to the peer.
#ifndef RDMARPC_TRANSPORT_RDMA_REGISTRATION_CACHE_H_
#define RDMARPC_TRANSPORT_RDMA_REGISTRATION_CACHE_H_

#include <cstdint>
#include <mutex>
#include <optional>
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
  uint64_t registrations_ = 0;  // ibv_reg_mr calls made.
};

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_REGISTRATION_CACHE_H_
