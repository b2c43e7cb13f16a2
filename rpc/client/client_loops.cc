#include "rpc/client/client_loops.h"

#include <algorithm>
#include <mutex>
#include <thread>
#include <utility>

#include "rdmarpc/tunables.h"

namespace rdmarpc::rpc {

namespace {
std::mutex pool_mu;
std::weak_ptr<ClientLoops>& CurrentPool() {
  static auto* pool = new std::weak_ptr<ClientLoops>();  // Never destroyed.
  return *pool;
}
}  // namespace

std::shared_ptr<ClientLoops> ClientLoops::Shared() {
  std::lock_guard lock(pool_mu);
  std::shared_ptr<ClientLoops> pool = CurrentPool().lock();
  if (!pool) {
    pool = std::make_shared<ClientLoops>(DefaultSize());
    CurrentPool() = pool;
  }
  return pool;
}

size_t ClientLoops::DefaultSize() {
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  return std::min<size_t>(cores, tunables::kMaxClientLoops);
}

ClientLoops::ClientLoops(size_t size) {
  loops_.reserve(std::max<size_t>(size, 1));
  for (size_t i = 0; i < std::max<size_t>(size, 1); ++i) {
    loops_.push_back(std::make_unique<EventLoop>());
  }
}

ClientLoops::~ClientLoops() {
  for (auto& loop : loops_) loop->Stop();
  // Handlers that were ready (posted completions) run rather than vanish.
  for (auto& loop : loops_) loop->RunPending();
}

EventLoop& ClientLoops::Next() {
  return *loops_[next_.fetch_add(1, std::memory_order_relaxed) % loops_.size()];
}

bool ClientLoops::InLoopThread() const {
  return std::any_of(loops_.begin(), loops_.end(),
                     [](const auto& loop) { return loop->InLoopThread(); });
}

void ClientLoops::Release(std::shared_ptr<ClientLoops> pool) {
  if (!pool) return;
  std::unique_lock lock(pool_mu);
  // Every holder comes from Shared() and leaves through here, both under
  // pool_mu: the count cannot change meanwhile.
  if (pool.use_count() > 1) {
    pool.reset();  // Not the last: no destructor runs.
    return;
  }
  CurrentPool().reset();  // The next Shared() starts a new pool.
  lock.unlock();
  if (pool->InLoopThread()) {
    std::thread([pool = std::move(pool)]() mutable { pool.reset(); }).detach();
  } else {
    pool.reset();
  }
}

}  // namespace rdmarpc::rpc
