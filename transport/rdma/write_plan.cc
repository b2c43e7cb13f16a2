#include "transport/rdma/write_plan.h"

#include <algorithm>
#include <cassert>

namespace rdmarpc::transport::rdma {

size_t SliceSources(std::span<WriteSource> sources, uint64_t offset,
                    uint64_t length) {
  size_t kept = 0;
  uint64_t at = 0;  // Where the current source starts in the frame.
  const uint64_t end = offset + length;
  for (size_t i = 0; i < sources.size(); ++i) {
    const WriteSource source = sources[i];  // Slot `kept` may be this one.
    const uint64_t from = std::max(at, offset);
    const uint64_t to = std::min(at + source.bytes.size(), end);
    if (from < to) {
      sources[kept++] = {source.bytes.subspan(from - at, to - from),
                         source.lkey};
    }
    at += source.bytes.size();
  }
  return kept;
}

WritePlan PlanWrites(std::span<const WriteSource> sources, uint32_t max_sge,
                     uint32_t staging_size, uint32_t max_length) {
  assert(max_sge >= 1 && staging_size >= 1 && max_length >= staging_size);
  WritePlan plan;
  PlannedWrite current;
  bool staging_open = false;  // The last segment is staged and may grow.
  auto close = [&] {
    if (current.segments > 0) plan.writes.push_back(current);
    current = PlannedWrite{};
    current.first_segment = static_cast<uint32_t>(plan.segments.size());
    staging_open = false;
  };
  for (const WriteSource& source : sources) {
    size_t offset = 0;
    while (offset < source.bytes.size()) {
      const size_t rest = source.bytes.size() - offset;
      if (current.length == max_length) close();
      WriteSegment segment;
      segment.data = source.bytes.data() + offset;
      if (source.lkey) {
        if (current.sges == max_sge) close();
        segment.size = static_cast<uint32_t>(
            std::min<uint64_t>(rest, max_length - current.length));
        segment.lkey = *source.lkey;
        ++current.sges;
        staging_open = false;
      } else {
        if (!staging_open || current.staged_bytes == staging_size) {
          // One staging buffer per WRITE: a second run starts a new WRITE.
          if (current.staged_bytes > 0 || current.sges == max_sge) close();
          ++current.sges;
          staging_open = true;
        }
        segment.size = static_cast<uint32_t>(
            std::min<uint64_t>({rest, staging_size - current.staged_bytes,
                                max_length - current.length}));
        segment.staged = true;
        current.staged_bytes += segment.size;
      }
      plan.segments.push_back(segment);
      ++current.segments;
      current.length += segment.size;
      offset += segment.size;
    }
  }
  close();
  if (plan.writes.empty()) plan.writes.push_back(PlannedWrite{});
  return plan;
}

}  // namespace rdmarpc::transport::rdma
