#include "transport/rdma/loop_state.h"

#include <atomic>
#include <utility>

namespace rdmarpc::transport::rdma {

namespace {

uint64_t NextLoopId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

LoopState& LoopState::Of(boost::asio::io_context& context) {
  return boost::asio::use_service<LoopState>(context);
}

LoopState::LoopState(boost::asio::execution_context& context)
    : service(context), id_(NextLoopId()) {}

void LoopState::Hold(std::shared_ptr<void> owner) {
  const void* object = owner.get();
  std::lock_guard lock(mu_);
  held_[object] = std::move(owner);
}

std::shared_ptr<void> LoopState::Release(const void* object) {
  std::lock_guard lock(mu_);
  auto it = held_.find(object);
  if (it == held_.end()) return nullptr;
  std::shared_ptr<void> owner = std::move(it->second);
  held_.erase(it);
  return owner;
}

size_t LoopState::held() {
  std::lock_guard lock(mu_);
  return held_.size();
}

void LoopState::shutdown() {
  std::unordered_map<const void*, std::shared_ptr<void>> held;
  {
    std::lock_guard lock(mu_);
    held.swap(held_);
  }
  // Outside the lock: what is let go of may be destroyed here, its timers
  // and descriptors with it. Asio shuts services down newest first: the
  // reactor is still up when this service came after it (as when a
  // connection created it), and when it did not, the reactor's shutdown has
  // already let go of every operation and a descriptor's deregistration
  // does nothing.
  held.clear();
}

}  // namespace rdmarpc::transport::rdma
