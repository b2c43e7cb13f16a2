#include "transport/peer_budget.h"

#include <unistd.h>

#include <utility>

namespace rdmarpc::transport {

namespace {

uint64_t QuarterOfMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 1ull << 30;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 4;
}

// A received block and what it counts, freed together.
struct Charged {
  Buffer block;
  uint64_t charge;
};

}  // namespace

uint64_t DefaultPeerBytesLimit() { return QuarterOfMemory(); }

bool TryChargePeerBytes(uint64_t n) {
  std::atomic<uint64_t>& bytes = PeerBytes();
  const uint64_t limit = PeerBytesLimit().load(std::memory_order_relaxed);
  uint64_t used = bytes.load(std::memory_order_relaxed);
  do {
    if (used + n > limit) return false;
  } while (
      !bytes.compare_exchange_weak(used, used + n, std::memory_order_relaxed));
  return true;
}

Status PeerMemoryFullError(uint64_t bytes, const std::string& peer) {
  return Status(StatusCode::kResourceExhausted,
                "cannot queue " + std::to_string(bytes) + " bytes for " + peer +
                    ": the process holds " + std::to_string(PeerMemoryUsed()) +
                    " bytes for its peers, its limit " +
                    std::to_string(PeerMemoryLimit()) +
                    " (rdmarpc::SetPeerMemoryLimit)");
}

Buffer ChargedBuffer(Buffer block, uint64_t charge) {
  auto* charged = new Charged{std::move(block), charge};
  return Buffer(
      charged->block.data(), charged->block.size(),
      [](void* context, std::byte*) noexcept {
        auto* held = static_cast<Charged*>(context);
        ReleasePeerBytes(held->charge);
        delete held;
      },
      charged);
}

}  // namespace rdmarpc::transport

namespace rdmarpc {

uint64_t PeerMemoryLimit() {
  return transport::PeerBytesLimit().load(std::memory_order_relaxed);
}
void SetPeerMemoryLimit(uint64_t bytes) {
  transport::PeerBytesLimit().store(bytes, std::memory_order_relaxed);
}
uint64_t PeerMemoryUsed() {
  return transport::PeerBytes().load(std::memory_order_relaxed);
}

}  // namespace rdmarpc
