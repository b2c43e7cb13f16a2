// Memory for receive grants registered one by one (those the grant pool,
// grant_pool.h, does not serve): the zero-filled blocks a peer's large frame
// is written into, which the application then owns as the frame's payload;
// and the process's count of granted bytes, for every grant.
//
// Zero-filled because a transfer may arrive as several WRITEs and the
// receiver cannot verify which bytes a one-sided WRITE covered: a peer that
// skips bytes must deliver zeros, never this process's old memory.
//
// Blocks of 64 KiB and more are LargeBlocks (base/large_block.h). Fresh
// anonymous memory is zeroed by the kernel page by page when the grant is
// registered (pinned), one fault per page; a block the application has
// released is kept and zeroed again with one memset, which costs about half
// as much (64 MiB in the Soft-RoCE VM: 520 ms fresh, 240 ms reused).
#ifndef RDMARPC_TRANSPORT_RDMA_GRANT_MEMORY_H_
#define RDMARPC_TRANSPORT_RDMA_GRANT_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <utility>

#include "rdmarpc/buffer.h"

namespace rdmarpc::transport::rdma {

// `size` zero bytes (an empty Buffer when memory is exhausted). Releasing the
// Buffer returns a large block to the cache.
Buffer ZeroedGrantBlock(size_t size);

// `size` bytes the caller overwrites whole (a segmented frame's, which its
// segments are copied into); an empty Buffer when memory is exhausted.
Buffer FrameBlock(size_t size);

// Bytes of receive grants held now by every connection of this process
// (checked against TransportOptions::max_grant_bytes).
uint64_t GrantedBytes();

// A grant's share of GrantedBytes(), returned when released or destroyed.
class GrantCharge {
 public:
  GrantCharge() = default;
  explicit GrantCharge(uint64_t bytes);
  GrantCharge(GrantCharge&& other) noexcept
      : bytes_(std::exchange(other.bytes_, 0)) {}
  GrantCharge& operator=(GrantCharge&& other) noexcept;
  ~GrantCharge() { Release(); }
  void Release();

 private:
  uint64_t bytes_ = 0;
};

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_GRANT_MEMORY_H_
