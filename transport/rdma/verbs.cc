#include "transport/rdma/verbs.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/log.h"

namespace rdmarpc::transport::rdma {
namespace {

std::atomic<uint64_t> live_registered_bytes{0};
std::atomic<uint64_t> registration_calls{0};
std::atomic<uint64_t> pooled_bytes{0};
std::atomic<uint64_t> pool_growths{0};
std::atomic<uint64_t> pool_growth_registrations{0};
std::atomic<uint64_t> local_op_waits{0};

}  // namespace

void MrDeleter::operator()(ibv_mr* mr) const {
  live_registered_bytes.fetch_sub(mr->length, std::memory_order_relaxed);
  ibv_dereg_mr(mr);
}

MemoryRegion RegisterRegion(ibv_pd* pd, void* addr, size_t length, int access) {
  if ((access & (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)) != 0) {
    errno = EPERM;
    return nullptr;
  }
  MemoryRegion region(ibv_reg_mr(pd, addr, length, access));
  if (region) {
    live_registered_bytes.fetch_add(region->length, std::memory_order_relaxed);
    registration_calls.fetch_add(1, std::memory_order_relaxed);
  }
  return region;
}

uint64_t PooledRegisteredBytes() {
  return pooled_bytes.load(std::memory_order_relaxed);
}

Status ChargePooledBytes(uint64_t bytes, uint64_t cap, std::string_view what) {
  const uint64_t pooled =
      pooled_bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (pooled + bytes <= cap) return Status();
  pooled_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  return Status(StatusCode::kResourceExhausted,
                std::string(what) + ": this process's pools hold " +
                    std::to_string(pooled) + " bytes, and " +
                    std::to_string(bytes) + " more would pass their cap of " +
                    std::to_string(cap) +
                    " (TransportOptions::rdma_max_pool_bytes)");
}

void UnchargePooledBytes(uint64_t bytes) {
  pooled_bytes.fetch_sub(bytes, std::memory_order_relaxed);
}

void NotePoolGrowth(uint64_t registrations) {
  pool_growths.fetch_add(1, std::memory_order_relaxed);
  pool_growth_registrations.fetch_add(registrations, std::memory_order_relaxed);
}

uint64_t PoolGrowths() { return pool_growths.load(std::memory_order_relaxed); }

uint64_t PoolGrowthRegistrations() {
  return pool_growth_registrations.load(std::memory_order_relaxed);
}

uint64_t LiveRegisteredBytes() {
  return live_registered_bytes.load(std::memory_order_relaxed);
}

uint64_t RegistrationCalls() {
  return registration_calls.load(std::memory_order_relaxed);
}

void NoteLocalOpWait() {
  local_op_waits.fetch_add(1, std::memory_order_relaxed);
}

uint64_t LocalOpWaits() {
  return local_op_waits.load(std::memory_order_relaxed);
}

Status ErrnoStatus(std::string_view what, int error) {
  return Status(StatusCode::kUnavailable,
                std::string(what) + ": " + std::strerror(error));
}

namespace {
bool CanLockAnyMemory() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  return (data[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32))) != 0;
}
}  // namespace

std::optional<uint64_t> LockedMemoryLimitNow() {
  rlimit limit{};
  if (CanLockAnyMemory() || getrlimit(RLIMIT_MEMLOCK, &limit) != 0 ||
      limit.rlim_cur == RLIM_INFINITY) {
    return std::nullopt;
  }
  return limit.rlim_cur;
}

std::optional<uint64_t> LockedMemoryLimit() {
  // Two system calls: read again at most once a second (a grant is planned
  // on every large frame). The coarse clock is the kernel's tick, read from
  // the vDSO without touching a hardware clock.
  static std::atomic<int64_t> read_at_ns{INT64_MIN};
  static std::atomic<uint64_t> cached{0};  // UINT64_MAX: no limit.
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  const int64_t now_ns = now.tv_sec * 1'000'000'000 + now.tv_nsec;
  const int64_t then = read_at_ns.load(std::memory_order_acquire);
  if (then != INT64_MIN && now_ns - then < 1'000'000'000) {
    const uint64_t limit = cached.load(std::memory_order_relaxed);
    if (limit == UINT64_MAX) return std::nullopt;
    return limit;
  }
  const std::optional<uint64_t> limit = LockedMemoryLimitNow();
  cached.store(limit.value_or(UINT64_MAX), std::memory_order_relaxed);
  read_at_ns.store(now_ns, std::memory_order_release);
  return limit;
}

Status RegistrationFailed(std::string_view what, size_t length, int error) {
  const std::optional<uint64_t> limit = LockedMemoryLimitNow();
  if ((error != ENOMEM && error != EAGAIN && error != EPERM) || !limit) {
    return ErrnoStatus(what, error);
  }
  return Status(
      StatusCode::kResourceExhausted,
      std::string(what) + ": " + std::strerror(error) + " registering " +
          std::to_string(length) + " bytes: this process may lock " +
          std::to_string(*limit) + " bytes (RLIMIT_MEMLOCK) and has " +
          std::to_string(LiveRegisteredBytes()) +
          " registered; raise `ulimit -l` (limits.conf memlock, systemd "
          "LimitMEMLOCK) or give it CAP_IPC_LOCK");
}

void Unmapper::operator()(std::byte* memory) const { munmap(memory, size); }

StatusOr<RegisteredMemory> RegisteredMemory::Allocate(ibv_pd* pd, size_t size,
                                                      int access) {
  RegisteredMemory memory;
  void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return ErrnoStatus("mmap (registered pool)", errno);
  memory.memory_ = std::unique_ptr<std::byte[], Unmapper>(
      static_cast<std::byte*>(mapped), Unmapper{size});
  memory.size_ = size;
  memory.mr_ = RegisterRegion(pd, memory.memory_.get(), size, access);
  if (!memory.mr_) return RegistrationFailed("ibv_reg_mr", size, errno);
  return memory;
}

namespace {

// RESOURCE_EXHAUSTED when this process cannot open one more file. Looking
// for devices opens sysfs, and rdma-core reports a failure there as "no
// devices" (ENOSYS), so a process out of descriptors would be told that the
// machine has no RDMA device.
Status OutOfDescriptors() {
  const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    close(fd);
    return Status();
  }
  const int error = errno;
  if (error != EMFILE && error != ENFILE) return Status();
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  return Status(
      StatusCode::kResourceExhausted,
      std::string("cannot look for RDMA devices: ") + std::strerror(error) +
          (error == EMFILE
               ? " (this process's limit is " + std::to_string(limit.rlim_cur) +
                     " open files; raise it with ulimit -n)"
               : " (the system's file table is full)"));
}

}  // namespace

Status CheckRdmaAvailable() {
  int count = 0;
  ibv_device** devices = ibv_get_device_list(&count);
  if (devices == nullptr || count == 0) {
    if (devices != nullptr) ibv_free_device_list(devices);
    if (Status exhausted = OutOfDescriptors(); !exhausted.ok()) {
      return exhausted;
    }
    return Status(StatusCode::kFailedPrecondition,
                  "no RDMA device found (no RDMA NIC, or its driver or "
                  "rdma_rxe is not loaded; ibv_devices lists none)");
  }
  std::string inactive;
  bool usable = false;
  for (int i = 0; i < count && !usable; ++i) {
    ibv_context* context = ibv_open_device(devices[i]);
    if (context == nullptr) {
      if (Status exhausted = OutOfDescriptors(); !exhausted.ok()) {
        ibv_free_device_list(devices);
        return exhausted;
      }
      continue;
    }
    ibv_device_attr device{};
    if (ibv_query_device(context, &device) == 0) {
      for (uint8_t port = 1; port <= device.phys_port_cnt; ++port) {
        if (PortState(context, port) == IBV_PORT_ACTIVE) usable = true;
      }
    }
    if (!usable) inactive += std::string(" ") + ibv_get_device_name(devices[i]);
    ibv_close_device(context);
  }
  ibv_free_device_list(devices);
  if (!usable) {
    return Status(
        StatusCode::kFailedPrecondition,
        "no RDMA device has an active port (devices:" + inactive + ")");
  }
  return Status();
}

std::string DeviceName(const ibv_context* context) {
  return context != nullptr ? ibv_get_device_name(context->device) : "?";
}

std::optional<ibv_port_state> PortState(ibv_context* context, uint8_t port) {
  if (context == nullptr || port == 0) return std::nullopt;
  ibv_port_attr attr{};
  if (ibv_query_port(context, port, &attr) != 0) return std::nullopt;
  return attr.state;
}

bool IsSoftRoce(ibv_context* context) {
  constexpr uint32_t kRxeVendorId = 0xffffff;  // The kernel's RXE_VENDOR_ID.
  ibv_device_attr attr{};
  return context != nullptr && ibv_query_device(context, &attr) == 0 &&
         attr.vendor_id == kRxeVendorId && attr.vendor_part_id == 0;
}

namespace {

struct ContextUse {
  int holds = 0;
  bool removed = false;
};

std::mutex device_mu;
std::unordered_map<ibv_context*, ContextUse>& Uses() {
  static auto* uses = new std::unordered_map<ibv_context*, ContextUse>;
  return *uses;
}

// Closes the files behind `context`'s descriptors, keeping the numbers (now
// /dev/null) for librdmacm to close later.
void ReleaseFiles(ibv_context* context) {
  const int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) {
    Log().error(
        "cannot open /dev/null: {}: the process keeps its files on "
        "a removed RDMA device",
        std::strerror(errno));
    return;
  }
  dup3(null, context->cmd_fd, O_CLOEXEC);
  dup3(null, context->async_fd, O_CLOEXEC);
  close(null);
  Log().info("released this process's files on removed RDMA device {}",
             DeviceName(context));
}

}  // namespace

DeviceHold::DeviceHold(ibv_context* context) : context_(context) {
  if (context_ == nullptr) return;
  std::lock_guard lock(device_mu);
  ++Uses()[context_].holds;
}

DeviceHold& DeviceHold::operator=(DeviceHold&& other) noexcept {
  if (this != &other) {
    Release();
    context_ = std::exchange(other.context_, nullptr);
  }
  return *this;
}

void DeviceHold::Release() {
  ibv_context* context = std::exchange(context_, nullptr);
  if (context == nullptr) return;
  std::lock_guard lock(device_mu);
  auto it = Uses().find(context);
  if (it == Uses().end() || --it->second.holds > 0) return;
  if (it->second.removed) ReleaseFiles(context);
  Uses().erase(it);
}

void DeviceHold::MarkRemoved(ibv_context* context) {
  if (context == nullptr) return;
  std::lock_guard lock(device_mu);
  auto it = Uses().find(context);
  if (it != Uses().end()) {
    it->second.removed = true;
  } else {
    // Every hold is gone already; the caller's id keeps the context alive.
    ReleaseFiles(context);
  }
}

Status SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return ErrnoStatus("fcntl(O_NONBLOCK)", errno);
  }
  return Status();
}

}  // namespace rdmarpc::transport::rdma
