// RAII for every rdma-core resource rdmarpc uses, and small verbs helpers.
//
// Each handle is a unique_ptr with the matching destroy call, so ownership
// is explicit and no cleanup path is written by hand. Destruction order is
// the caller's member order: QP (inside the CmId) before CQ before the
// completion channel; MRs before the PD.
#ifndef RDMARPC_TRANSPORT_RDMA_VERBS_H_
#define RDMARPC_TRANSPORT_RDMA_VERBS_H_

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "rdmarpc/status.h"

namespace rdmarpc::transport::rdma {

struct EventChannelDeleter {
  void operator()(rdma_event_channel* channel) const {
    rdma_destroy_event_channel(channel);
  }
};
using EventChannel = std::unique_ptr<rdma_event_channel, EventChannelDeleter>;

// Destroys the id's QP (if any) and then the id.
struct CmIdDeleter {
  void operator()(rdma_cm_id* id) const {
    if (id->qp != nullptr) rdma_destroy_qp(id);
    rdma_destroy_id(id);
  }
};
using CmId = std::unique_ptr<rdma_cm_id, CmIdDeleter>;

struct PdDeleter {
  void operator()(ibv_pd* pd) const { ibv_dealloc_pd(pd); }
};
using ProtectionDomain = std::unique_ptr<ibv_pd, PdDeleter>;

struct CompChannelDeleter {
  void operator()(ibv_comp_channel* channel) const {
    ibv_destroy_comp_channel(channel);
  }
};
using CompletionChannel = std::unique_ptr<ibv_comp_channel, CompChannelDeleter>;

struct CqDeleter {
  void operator()(ibv_cq* cq) const { ibv_destroy_cq(cq); }
};
using CompletionQueue = std::unique_ptr<ibv_cq, CqDeleter>;

struct MrDeleter {
  void operator()(ibv_mr* mr) const;
};
using MemoryRegion = std::unique_ptr<ibv_mr, MrDeleter>;

// Every memory region rdmarpc registers goes through here, so that:
//  - no region ever allows remote READ or atomics (a peer can only write,
//    and only where it was granted): such `access` fails with EPERM;
//  - LiveRegisteredBytes() counts what is registered now, which tests use
//    to prove that every region is deregistered when its owner closes.
// Null with errno set on failure, like ibv_reg_mr.
MemoryRegion RegisterRegion(ibv_pd* pd, void* addr, size_t length, int access);
uint64_t LiveRegisteredBytes();
// Successful ibv_reg_mr calls this process has made, in all.
uint64_t RegistrationCalls();
// Local operations (window binds, invalidations) that waited for a send
// queue to drain, process-wide (ConnectionStats::local_op_waits per
// connection).
void NoteLocalOpWait();
uint64_t LocalOpWaits();

// Bytes registered for pools that connections share (the completion groups'
// receive, send and bounce pools, the devices' grant pools), process-wide:
// part of LiveRegisteredBytes() that stays registered while its owners live
// (tests subtract it to see what one connection registered).
uint64_t PooledRegisteredBytes();
// Counts `bytes` more of pooled memory, before it is registered (so that
// pools growing at once cannot pass the cap together), if the total stays
// within `cap`; else RESOURCE_EXHAUSTED naming `what` and
// TransportOptions::rdma_max_pool_bytes.
Status ChargePooledBytes(uint64_t bytes, uint64_t cap, std::string_view what);
void UnchargePooledBytes(uint64_t bytes);
// Pools grown by a chunk, and the ibv_reg_mr calls those growths made (a
// grant-pool chunk registers a region per block): the registrations that
// serve many frames, apart from any one frame's own. Pools call
// NotePoolGrowth once a chunk is registered.
void NotePoolGrowth(uint64_t registrations);
uint64_t PoolGrowths();
uint64_t PoolGrowthRegistrations();

// The bytes this process may register (pin), when it is limited: its
// RLIMIT_MEMLOCK, unless it has CAP_IPC_LOCK or the limit is infinite. Read
// at most once a second; LockedMemoryLimitNow() reads it now.
std::optional<uint64_t> LockedMemoryLimit();
std::optional<uint64_t> LockedMemoryLimitNow();

// "WHAT: strerror(errno)" as UNAVAILABLE.
Status ErrnoStatus(std::string_view what, int error);

// Why registering `length` bytes failed with `error`. When the cause is the
// locked-memory limit (a process without CAP_IPC_LOCK may pin only
// RLIMIT_MEMLOCK bytes: Debian's default is 8 MiB), RESOURCE_EXHAUSTED naming
// the limit, what is registered, and how to raise it; else ErrnoStatus.
Status RegistrationFailed(std::string_view what, size_t length, int error);

struct MwDeleter {
  void operator()(ibv_mw* window) const { ibv_dealloc_mw(window); }
};
// A memory window (type 2: bound by a work request on one QP, usable by that
// QP's peer alone, until invalidated).
using MemoryWindow = std::unique_ptr<ibv_mw, MwDeleter>;

// Unmaps `size` bytes (RegisteredMemory's).
struct Unmapper {
  size_t size = 0;
  void operator()(std::byte* memory) const;
};

// Owned, registered memory.
class RegisteredMemory {
 public:
  static StatusOr<RegisteredMemory> Allocate(ibv_pd* pd, size_t size,
                                             int access);
  std::byte* data() const { return memory_.get(); }
  size_t size() const { return size_; }
  uint32_t lkey() const { return mr_->lkey; }

 private:
  // Mapped, not from malloc: page-aligned for the device, and a pool's
  // growth (bounded by its cap) does not read as the heap growing.
  std::unique_ptr<std::byte[], Unmapper> memory_;
  size_t size_ = 0;
  MemoryRegion mr_;  // Destroyed before memory_.
};

// OK when this host has at least one RDMA device with an active port;
// otherwise a FAILED_PRECONDITION naming the cause.
Status CheckRdmaAvailable();

// The device's name ("rxe0"), or "?" for no context, for messages.
std::string DeviceName(const ibv_context* context);

// The state of `port` of `context` now; nullopt (errno set) when the port
// cannot be queried, or when there is no context or port to ask about.
std::optional<ibv_port_state> PortState(ibv_context* context, uint8_t port);

// Whether `context` is Soft-RoCE (rdma_rxe): vendor id 0xffffff, part 0.
bool IsSoftRoce(ibv_context* context);

// One of rdmarpc's users of a verbs context (librdmacm's, shared by all ids
// on a device): a connection's resources, or a listening id.
//
// Why: when a device is removed (`rdma link delete`, hot-unplug, driver
// unload) the kernel finishes only once every process has closed its verbs
// files on it, unless the driver can disassociate them (hardware drivers
// can; rxe and siw cannot). librdmacm closes its context when the device
// leaves the device list and its last id is gone, but never notices the last
// device leaving (rdma-core 44: an empty list is an error to it), so the
// process would hold the device, and `rdma link delete` would hang, forever.
// Once MarkRemoved was called for a context, the last hold released points
// the context's two descriptors at /dev/null: the kernel may finish, and
// librdmacm, when it closes the context one day, closes those.
//
// Release a hold after freeing the QPs, CQs, MRs and PD it covers, and
// before destroying the rdma_cm id that keeps the context alive.
class DeviceHold {
 public:
  DeviceHold() = default;
  explicit DeviceHold(ibv_context* context);
  ~DeviceHold() { Release(); }
  DeviceHold(DeviceHold&& other) noexcept
      : context_(std::exchange(other.context_, nullptr)) {}
  DeviceHold& operator=(DeviceHold&& other) noexcept;

  void Release();

  // Called on RDMA_CM_EVENT_DEVICE_REMOVAL for an id on `context`, which
  // keeps the context alive meanwhile. With no hold left, releases at once.
  static void MarkRemoved(ibv_context* context);

 private:
  ibv_context* context_ = nullptr;
};

// Sets O_NONBLOCK on a verbs or rdma_cm file descriptor.
Status SetNonBlocking(int fd);

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_VERBS_H_
