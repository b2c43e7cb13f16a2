// GrantPool: registered memory that peers' large frames land in, one pool
// per device (DeviceDomain), registered once and reused, so that a grant
// costs no ibv_reg_mr.
//
// Blocks are powers of two from tunables::kRdmaGrantPoolMinBlock to
// kRdmaGrantPoolMaxBlock, carved from chunks mapped as the pool grows (up to
// kRdmaGrantPoolMaxBytes, within TransportOptions::rdma_max_pool_bytes and,
// in a process that may lock only so much, leaving as much again
// unregistered). Each block is registered once, as a memory region of its
// own, for local write and window binding only: its own rkey lets no peer
// in. A peer is let into one block by a type 2 memory window bound on its QP
// (rdma_rendezvous.cc), which only that QP can use and which is invalidated
// before the frame is delivered.
//
// Why a region per block, not per chunk: rxe (Linux 6.1) checks a write
// through a window against the window's region, not the window. There a
// peer can write anywhere in its block (past its grant, into the block's
// slack, which nobody reads), and no further; devices that enforce window
// bounds stop it at the grant.
//
// A block goes to the application as the frame's Buffer. When that Buffer
// is released (on any thread), the whole block is zeroed there, off the
// event loop, and is free again: every block handed out is zero, so a peer
// that writes less than its grant delivers zeros, never another peer's old
// data.
//
// Thread-safe: loops on the same device share the pool.
#ifndef RDMARPC_TRANSPORT_RDMA_GRANT_POOL_H_
#define RDMARPC_TRANSPORT_RDMA_GRANT_POOL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "rdmarpc/buffer.h"
#include "rdmarpc/tunables.h"
#include "transport/rdma/verbs.h"

namespace rdmarpc::transport::rdma {

class GrantPool {
 public:
  // Whether `verbs`'s device binds type 2 memory windows (without them,
  // every grant is registered for itself).
  static bool Supported(ibv_context* verbs);

  explicit GrantPool(ibv_pd* pd) : pd_(pd) {}
  GrantPool(const GrantPool&) = delete;
  GrantPool& operator=(const GrantPool&) = delete;

  struct Block {
    Buffer buffer;  // `size` zero bytes; releasing it returns the block.
    ibv_mr* region = nullptr;  // The block's, to bind a window on.
  };
  // A block for a grant of `size` bytes, or nullopt when `size` is out of
  // the pool's range, or no block is free and the pool may not grow.
  std::optional<Block> Acquire(size_t size, uint64_t max_pooled_bytes);

  // Whether a block for `size` bytes is free now (taking it pins nothing).
  bool HasFree(size_t size) const;

  // The lkey under which `bytes` (inside one block, such as a received
  // frame sent on) can be sent without a copy, if they lie in the pool.
  std::optional<uint32_t> Lkey(std::span<const std::byte> bytes) const;

  // Bytes registered, and blocks handed out and not yet released.
  uint64_t registered_bytes() const;
  uint64_t blocks_out() const;

  // For DeviceDomain's destructor, before it frees the PD: deregisters the
  // chunks. The pool deletes itself once every block handed out is back.
  void Retire();

 private:
  static constexpr int kClasses =
      std::countr_zero(tunables::kRdmaGrantPoolMaxBlock) -
      std::countr_zero(tunables::kRdmaGrantPoolMinBlock) + 1;
  struct Chunk {
    std::byte* memory = nullptr;  // mmap'ed: zero when new.
    size_t size = 0;
    size_t block_size = 0;
    std::vector<MemoryRegion> regions;  // One per block.
  };
  ~GrantPool();  // Retire deletes.
  // The size class of a grant of `size` bytes, or -1 if out of range.
  static int SizeClass(size_t size);
  static void Release(void* pool, std::byte* block) noexcept;
  void Return(std::byte* block);
  // The chunk holding `address`, or null. Called under mu_.
  Chunk* ChunkOf(const std::byte* address) const;
  Status Grow(int size_class, uint64_t max_pooled_bytes);

  ibv_pd* const pd_;
  mutable std::mutex mu_;
  bool retired_ = false;
  uint64_t registered_ = 0;
  uint64_t out_ = 0;
  std::map<const std::byte*, std::unique_ptr<Chunk>> chunks_;  // By start.
  std::array<std::vector<std::byte*>, kClasses> free_;
};

// Deletes through Retire (the pool may outlive its domain's PD).
struct GrantPoolRetirer {
  void operator()(GrantPool* pool) const { pool->Retire(); }
};

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_GRANT_POOL_H_
