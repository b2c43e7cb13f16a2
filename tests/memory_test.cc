// MemoryRegistration (the registry behind zero-copy sends) and the plan that
// cuts a large frame into RDMA WRITEs. Neither needs a device.
#include "rdmarpc/memory.h"

#include <algorithm>
#include <catch2/catch_test_macros.hpp>
#include <cstring>
#include <numeric>
#include <vector>

#include "transport/rdma/write_plan.h"

namespace rdmarpc::transport {
namespace {

std::span<const std::byte> Bytes(const std::vector<std::byte>& v, size_t from,
                                 size_t n) {
  return std::span(v).subspan(from, n);
}

TEST_CASE("memory: a registration is found for ranges inside it only") {
  std::vector<std::byte> memory(1 << 16);
  auto registration = MemoryRegistration::Register(memory);
  REQUIRE(registration.ok());
  CHECK(MemoryRegistration::Find(Bytes(memory, 0, memory.size())) ==
        *registration);
  CHECK(MemoryRegistration::Find(Bytes(memory, 100, 200)) == *registration);
  std::vector<std::byte> other(16);
  CHECK(MemoryRegistration::Find(other) == nullptr);
  // One byte past the end is not inside.
  CHECK(MemoryRegistration::Find(std::span(memory.data() + 1, memory.size())) ==
        nullptr);
}

TEST_CASE("memory: registering a range inside a registration is a cache hit") {
  std::vector<std::byte> memory(4096);
  auto outer = MemoryRegistration::Register(memory);
  REQUIRE(outer.ok());
  auto inner = MemoryRegistration::Register(std::span(memory).subspan(10, 20));
  REQUIRE(inner.ok());
  CHECK(*inner == *outer);
  // A partial overlap is refused with a clear error.
  auto overlap = MemoryRegistration::Register(
      std::span(memory.data() + 2048, 4096 - 2048 + 1));
  // (memory.data() + 4096 may or may not be mapped: only the range matters.)
  CHECK(overlap.status().code() == StatusCode::kInvalidArgument);
  CHECK(MemoryRegistration::Register({}).status().code() ==
        StatusCode::kInvalidArgument);
}

TEST_CASE("memory: ending a registration forgets it and tells observers") {
  struct Seen : MemoryRegistration::Observer {
    Seen() { MemoryRegistration::AddObserver(this); }
    ~Seen() { MemoryRegistration::RemoveObserver(this); }
    void OnUnregistered(uint64_t id) noexcept override { ids.push_back(id); }
    std::vector<uint64_t> ids;
  } seen;
  std::vector<std::byte> memory(4096);
  const size_t live = MemoryRegistration::LiveCount();
  uint64_t id = 0;
  {
    auto registration = MemoryRegistration::Register(memory);
    REQUIRE(registration.ok());
    id = (*registration)->id();
    CHECK(MemoryRegistration::LiveCount() == live + 1);
  }
  CHECK(MemoryRegistration::LiveCount() == live);
  CHECK(MemoryRegistration::Find(memory) == nullptr);
  CHECK(seen.ids == std::vector<uint64_t>{id});
  // The same memory registered again is a new registration, never the old
  // one (ids are not reused), so no cache can hand out a stale region.
  auto again = MemoryRegistration::Register(memory);
  REQUIRE(again.ok());
  CHECK((*again)->id() != id);
}

TEST_CASE("memory: impossible sizes are refused, not wrapped") {
  CHECK(MemoryRegistration::Allocate(0).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(MemoryRegistration::Allocate(SIZE_MAX - 10).status().code() ==
        StatusCode::kResourceExhausted);
}

TEST_CASE("memory: slices keep an allocated registration alive") {
  Buffer slice;
  {
    auto arena = MemoryRegistration::Allocate(10000);
    REQUIRE(arena.ok());
    CHECK(reinterpret_cast<uintptr_t>((*arena)->data()) % 4096 == 0);
    std::memset((*arena)->data(), 7, 10000);
    slice = (*arena)->Slice(5000, 100);
  }
  // The arena's last shared_ptr is gone; the slice still holds it.
  CHECK(MemoryRegistration::Find(slice.span()) != nullptr);
  CHECK(slice.size() == 100);
  CHECK(slice.data()[99] == std::byte{7});
  const std::byte* where = slice.data();
  slice.Reset();
  CHECK(MemoryRegistration::Find(std::span(where, 1)) == nullptr);
}

using rdma::PlanWrites;
using rdma::WritePlan;
using rdma::WriteSource;

// Every byte of every source appears once, in order, and each WRITE keeps
// to the limits.
void CheckPlan(const WritePlan& plan, std::span<const WriteSource> sources,
               uint32_t max_sge, uint32_t staging,
               uint32_t max_length = 1u << 30) {
  std::vector<const std::byte*> expected, planned;
  for (const auto& source : sources) {
    for (const std::byte& b : source.bytes) expected.push_back(&b);
  }
  uint32_t next = 0;
  for (const auto& write : plan.writes) {
    CHECK(write.first_segment == next);
    CHECK(write.sges <= max_sge);
    CHECK(write.staged_bytes <= staging);
    CHECK(write.length <= max_length);
    uint64_t length = 0, staged = 0;
    uint32_t direct = 0;
    int staged_runs = 0;
    for (uint32_t i = 0; i < write.segments; ++i) {
      const auto& segment = plan.segments[write.first_segment + i];
      CHECK(segment.size > 0);
      // The staging buffer is one gather entry: its bytes must be one run.
      if (segment.staged &&
          (i == 0 || !plan.segments[write.first_segment + i - 1].staged)) {
        ++staged_runs;
      }
      for (uint32_t b = 0; b < segment.size; ++b) {
        planned.push_back(segment.data + b);
      }
      length += segment.size;
      if (segment.staged) {
        staged += segment.size;
      } else {
        ++direct;
      }
    }
    CHECK(write.length == length);
    CHECK(write.staged_bytes == staged);
    CHECK(write.sges == direct + (staged > 0 ? 1 : 0));
    CHECK(staged_runs <= 1);
    next += write.segments;
  }
  CHECK(next == plan.segments.size());
  CHECK(planned == expected);
}

TEST_CASE("write plan: registered memory goes direct in one WRITE") {
  std::vector<std::byte> header(100), payload(5 << 20);
  const WriteSource sources[] = {{header, std::nullopt}, {payload, 42u}};
  const WritePlan plan = PlanWrites(sources, 5, 1 << 20, 1u << 30);
  REQUIRE(plan.writes.size() == 1);
  CHECK(plan.writes[0].staged_bytes == 100);
  CHECK(plan.writes[0].sges == 2);
  CHECK(plan.segments[1].lkey == 42);
  CheckPlan(plan, sources, 5, 1 << 20);
}

TEST_CASE("write plan: unregistered memory is staged chunk by chunk") {
  std::vector<std::byte> header(100), payload((5 << 20) + 7);
  const WriteSource sources[] = {{header, std::nullopt},
                                 {payload, std::nullopt}};
  const WritePlan plan = PlanWrites(sources, 5, 1 << 20, 1u << 30);
  // 100 + 5 MiB + 7 bytes in 1 MiB staging buffers: 6 WRITEs.
  CHECK(plan.writes.size() == 6);
  for (const auto& write : plan.writes) CHECK(write.sges == 1);
  CheckPlan(plan, sources, 5, 1 << 20);
}

TEST_CASE("write plan: mixed slices respect the gather limit") {
  std::vector<std::byte> memory(1000);
  std::vector<WriteSource> sources;
  for (int i = 0; i < 9; ++i) {
    // Alternating registered and unregistered slices of 100 bytes.
    sources.push_back({Bytes(memory, i * 100, 100),
                       i % 2 ? std::optional<uint32_t>(7) : std::nullopt});
  }
  for (uint32_t max_sge : {1u, 2u, 5u}) {
    for (uint32_t staging : {1u, 64u, 100u, 4096u}) {
      for (uint32_t max_length : {staging, staging + 150, 1u << 30}) {
        CheckPlan(PlanWrites(sources, max_sge, staging, max_length), sources,
                  max_sge, staging, max_length);
      }
    }
  }
}

TEST_CASE("write plan: no WRITE exceeds the maximum length") {
  std::vector<std::byte> header(10), payload(10000);
  const WriteSource sources[] = {{header, std::nullopt}, {payload, 3u}};
  const WritePlan plan = PlanWrites(sources, 5, 64, 1000);
  CHECK(plan.writes.size() == 11);  // 10 + 10000 bytes, 1000 at a time.
  CheckPlan(plan, sources, 5, 64, 1000);
}

// A segment grant covers part of a frame: the sources are cut to it, and
// the segments planned one after another cover every byte once, in order.
TEST_CASE("write plan: segments of a frame cover it once, in order") {
  std::vector<std::byte> memory(1000);
  std::vector<WriteSource> frame;
  size_t at = 0;
  for (int i = 0; i < 5; ++i) {  // 100, 150, 200, 250, 300 bytes.
    const size_t size = 100 + 50 * i;
    frame.push_back({Bytes(memory, at, size),
                     i % 2 ? std::optional<uint32_t>(9) : std::nullopt});
    at += size;
  }
  std::vector<const std::byte*> whole, cut;
  for (const auto& source : frame) {
    for (const std::byte& b : source.bytes) whole.push_back(&b);
  }
  for (uint64_t segment : {1u, 99u, 100u, 101u, 333u, 1000u}) {
    cut.clear();
    for (uint64_t offset = 0; offset < whole.size(); offset += segment) {
      const uint64_t length =
          std::min<uint64_t>(segment, whole.size() - offset);
      std::vector<WriteSource> sources = frame;
      const size_t kept = rdma::SliceSources(sources, offset, length);
      uint64_t bytes = 0;
      for (size_t i = 0; i < kept; ++i) {
        CHECK(!sources[i].bytes.empty());
        bytes += sources[i].bytes.size();
        for (const std::byte& b : sources[i].bytes) cut.push_back(&b);
      }
      CHECK(bytes == length);
      // Each source keeps its registration.
      for (size_t i = 0; i < kept; ++i) {
        const auto* first = sources[i].bytes.data();
        const auto owner =
            std::find_if(frame.begin(), frame.end(), [&](auto& f) {
              return first >= f.bytes.data() &&
                     first < f.bytes.data() + f.bytes.size();
            });
        REQUIRE(owner != frame.end());
        CHECK(owner->lkey == sources[i].lkey);
      }
      CheckPlan(PlanWrites(std::span(sources.data(), kept), 2, 64, 1 << 20),
                std::span(sources.data(), kept), 2, 64);
    }
    CHECK(cut == whole);
  }
}

TEST_CASE("write plan: an empty frame is one empty WRITE") {
  const WritePlan plan = PlanWrites({}, 5, 1 << 20, 1u << 30);
  REQUIRE(plan.writes.size() == 1);
  CHECK(plan.writes[0].length == 0);
  CHECK(plan.writes[0].sges == 0);
}

}  // namespace
}  // namespace rdmarpc::transport
