#include "transport/rdma/grant_pool.h"

#include <sys/mman.h>

#include <bit>
#include <cstring>
#include <utility>

namespace rdmarpc::transport::rdma {

using tunables::kRdmaGrantPoolChunkSize;
using tunables::kRdmaGrantPoolMaxBlock;
using tunables::kRdmaGrantPoolMaxBytes;
using tunables::kRdmaGrantPoolMinBlock;

bool GrantPool::Supported(ibv_context* verbs) {
  ibv_device_attr attr{};
  if (ibv_query_device(verbs, &attr) != 0) return false;
  return attr.max_mw > 0 &&
         (attr.device_cap_flags &
          (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0;
}

GrantPool::~GrantPool() {
  for (auto& [start, chunk] : chunks_) {
    chunk->regions.clear();
    munmap(chunk->memory, chunk->size);
  }
  UnchargePooledBytes(registered_);
}

void GrantPool::Retire() {
  bool last = false;
  {
    std::lock_guard lock(mu_);
    retired_ = true;
    // No region may outlive the PD; blocks still out are plain memory now.
    for (auto& [start, chunk] : chunks_) chunk->regions.clear();
    UnchargePooledBytes(std::exchange(registered_, 0));
    last = out_ == 0;
  }
  if (last) delete this;
}

std::optional<GrantPool::Block> GrantPool::Acquire(size_t size,
                                                   uint64_t max_pooled_bytes) {
  const int size_class = SizeClass(size);
  if (size_class < 0) return std::nullopt;
  const size_t block_size = size_t{kRdmaGrantPoolMinBlock} << size_class;
  std::lock_guard lock(mu_);
  if (retired_) return std::nullopt;
  std::vector<std::byte*>& free = free_[size_class];
  if (free.empty() && !Grow(size_class, max_pooled_bytes).ok()) {
    return std::nullopt;
  }
  std::byte* block = free.back();
  free.pop_back();
  const Chunk* chunk = ChunkOf(block);
  ++out_;
  return Block{Buffer(block, size, &GrantPool::Release, this),
               chunk->regions[(block - chunk->memory) / block_size].get()};
}

int GrantPool::SizeClass(size_t size) {
  if (size == 0 || size > kRdmaGrantPoolMaxBlock) return -1;
  const size_t block_size =
      std::max<size_t>(std::bit_ceil(size), kRdmaGrantPoolMinBlock);
  return std::countr_zero(block_size) -
         std::countr_zero(kRdmaGrantPoolMinBlock);
}

bool GrantPool::HasFree(size_t size) const {
  const int size_class = SizeClass(size);
  if (size_class < 0) return false;
  std::lock_guard lock(mu_);
  return !retired_ && !free_[size_class].empty();
}

Status GrantPool::Grow(int size_class, uint64_t max_pooled_bytes) {
  const size_t block_size = size_t{kRdmaGrantPoolMinBlock} << size_class;
  const size_t chunk_size =
      std::max<size_t>(block_size, kRdmaGrantPoolChunkSize);
  if (registered_ + chunk_size > kRdmaGrantPoolMaxBytes) {
    return Status(StatusCode::kResourceExhausted, "grant pool full");
  }
  // Where the process may lock only so much, the pool leaves as much again
  // for what must be registered (receive pools, grants larger than a block).
  if (const std::optional<uint64_t> lockable = LockedMemoryLimit();
      lockable && LiveRegisteredBytes() + 2 * chunk_size > *lockable) {
    return Status(StatusCode::kResourceExhausted, "locked-memory limit");
  }
  if (Status s = ChargePooledBytes(chunk_size, max_pooled_bytes, "grant pool");
      !s.ok()) {
    return s;
  }
  void* memory = mmap(nullptr, chunk_size, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    UnchargePooledBytes(chunk_size);
    return ErrnoStatus("mmap (grant pool)", errno);
  }
  auto chunk = std::make_unique<Chunk>();
  chunk->memory = static_cast<std::byte*>(memory);
  chunk->size = chunk_size;
  chunk->block_size = block_size;
  const size_t blocks = chunk_size / block_size;
  for (size_t i = 0; i < blocks; ++i) {
    chunk->regions.push_back(
        RegisterRegion(pd_, chunk->memory + i * block_size, block_size,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND));
    if (!chunk->regions.back()) {
      const int error = errno;
      chunk->regions.clear();
      munmap(memory, chunk_size);
      UnchargePooledBytes(chunk_size);
      return RegistrationFailed("ibv_reg_mr (grant pool)", block_size, error);
    }
  }
  for (size_t i = blocks; i-- > 0;) {
    free_[size_class].push_back(chunk->memory + i * block_size);
  }
  registered_ += chunk_size;
  chunks_.emplace(chunk->memory, std::move(chunk));
  NotePoolGrowth(blocks);
  return Status();
}

GrantPool::Chunk* GrantPool::ChunkOf(const std::byte* address) const {
  auto it = chunks_.upper_bound(address);
  if (it == chunks_.begin()) return nullptr;
  --it;
  Chunk* chunk = it->second.get();
  return address < chunk->memory + chunk->size ? chunk : nullptr;
}

void GrantPool::Release(void* pool, std::byte* block) noexcept {
  static_cast<GrantPool*>(pool)->Return(block);
}

void GrantPool::Return(std::byte* block) {
  const Chunk* chunk = nullptr;
  {
    std::lock_guard lock(mu_);
    chunk = ChunkOf(block);
  }
  // Outside the lock: chunks are never freed while a block is out. All of
  // it: where windows are not bounds-checked, the peer could reach it all.
  std::memset(block, 0, chunk->block_size);
  bool last = false;
  {
    std::lock_guard lock(mu_);
    --out_;
    if (retired_) {
      last = out_ == 0;
    } else {
      const int size_class = std::countr_zero(chunk->block_size) -
                             std::countr_zero(kRdmaGrantPoolMinBlock);
      free_[size_class].push_back(block);
    }
  }
  if (last) delete this;
}

std::optional<uint32_t> GrantPool::Lkey(
    std::span<const std::byte> bytes) const {
  std::lock_guard lock(mu_);
  const Chunk* chunk = ChunkOf(bytes.data());
  if (chunk == nullptr || chunk->regions.empty()) return std::nullopt;
  const size_t index = (bytes.data() - chunk->memory) / chunk->block_size;
  const std::byte* end = chunk->memory + (index + 1) * chunk->block_size;
  if (bytes.data() + bytes.size() > end) return std::nullopt;
  return chunk->regions[index]->lkey;
}

uint64_t GrantPool::registered_bytes() const {
  std::lock_guard lock(mu_);
  return registered_;
}

uint64_t GrantPool::blocks_out() const {
  std::lock_guard lock(mu_);
  return out_;
}

}  // namespace rdmarpc::transport::rdma
