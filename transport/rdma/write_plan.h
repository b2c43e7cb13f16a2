// How a large frame is cut into RDMA WRITEs.
//
// The frame's bytes (header, then payload slices) land contiguously in the
// peer's grant. Bytes from registered memory are gathered straight from
// where they are (one scatter/gather entry each); runs of unregistered bytes
// are copied into one staging buffer per WRITE (a send-ring slot when small,
// else a bounce-pool chunk) and sent from there. A WRITE has at most
// `max_sge` entries, at most one staging buffer of at most `staging_size`
// bytes, and at most `max_length` bytes in all (below the port's maximum
// message size); the last WRITE carries the immediate.
#ifndef RDMARPC_TRANSPORT_RDMA_WRITE_PLAN_H_
#define RDMARPC_TRANSPORT_RDMA_WRITE_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace rdmarpc::transport::rdma {

struct WriteSource {
  std::span<const std::byte> bytes;
  std::optional<uint32_t> lkey;  // Registered memory, or nullopt: copy it.
};

struct WriteSegment {
  const std::byte* data = nullptr;
  uint32_t size = 0;
  uint32_t lkey = 0;
  bool staged = false;  // Copied into the WRITE's staging buffer.
};

struct PlannedWrite {
  uint32_t first_segment = 0;
  uint32_t segments = 0;
  uint32_t staged_bytes = 0;  // Size of the staging buffer it needs.
  uint32_t sges = 0;          // Direct segments, plus one if staged.
  uint64_t length = 0;        // Bytes this WRITE puts into the grant.
};

struct WritePlan {
  std::vector<WriteSegment> segments;
  std::vector<PlannedWrite> writes;  // Never empty: a 0-byte frame is 1 WRITE.
};

// Bytes [offset, offset + length) of the concatenated `sources`, in place:
// the sources before and after that range dropped, those at its edges cut.
// Returns how many are left, from the front (the range must be inside).
size_t SliceSources(std::span<WriteSource> sources, uint64_t offset,
                    uint64_t length);

// Each source is at most 4 GiB - 1 (the grant length is a u32).
WritePlan PlanWrites(std::span<const WriteSource> sources, uint32_t max_sge,
                     uint32_t staging_size, uint32_t max_length);

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_WRITE_PLAN_H_
