// The receiver's grant planning and the sender's grant checks for frames
// that go in segments (transport/rdma/protocol.h).
#include "transport/rdma/peer_checks.h"

#include <catch2/catch_test_macros.hpp>

#include "base/tunables.h"

namespace rdmarpc::transport::rdma {
namespace {

using tunables::kRdmaMinSegment;
using tunables::kRdmaSegmentSize;

ControlMessage Rts(uint32_t header, uint32_t payload) {
  ControlMessage rts;
  rts.kind = ControlKind::kRts;
  rts.transfer = 7;
  rts.header_size = header;
  rts.payload_size = payload;
  return rts;
}

constexpr uint64_t kMaxPayload = 64ull << 20;

TEST_CASE("grant plan: a frame within the budget is granted whole") {
  auto plan = PlanGrant(Rts(10, 3 << 20), 0, 2, kMaxPayload, 4 << 20);
  REQUIRE(plan.ok());
  CHECK_FALSE(plan->segment);
  CHECK_FALSE(plan->wait);
  CHECK(plan->length == (3 << 20) + 10);
}

TEST_CASE("grant plan: over the budget with none ahead, in segments") {
  auto plan = PlanGrant(Rts(10, 64 << 20), 0, 2, kMaxPayload, 3 << 20);
  REQUIRE(plan.ok());
  CHECK(plan->segment);
  CHECK(plan->drop_reason == DropReason::kNone);
  CHECK(plan->length == kRdmaSegmentSize);
  // What the budget allows, when that is less than a segment.
  plan = PlanGrant(Rts(10, 64 << 20), 0, 2, kMaxPayload, 100 << 10);
  REQUIRE(plan.ok());
  CHECK(plan->segment);
  CHECK(plan->length == 100 << 10);
}

TEST_CASE("grant plan: over the budget behind another, it waits") {
  auto plan = PlanGrant(Rts(10, 64 << 20), 1, 2, kMaxPayload, 3 << 20);
  REQUIRE(plan.ok());
  CHECK(plan->wait);
}

TEST_CASE("grant plan: not a segment's worth left, the payload is dropped") {
  auto plan =
      PlanGrant(Rts(10, 1 << 20), 0, 2, kMaxPayload, kRdmaMinSegment - 1);
  REQUIRE(plan.ok());
  CHECK_FALSE(plan->segment);
  CHECK(plan->drop_reason == DropReason::kMemoryLimit);
  CHECK(plan->length == 10);
  CHECK(plan->dropped_payload == 1 << 20);
}

TEST_CASE("grant plan: over the whole-frame limit, in segments") {
  auto plan = PlanGrant(Rts(10, 6 << 20), 0, 2, kMaxPayload, 1ull << 30,
                        /*whole_limit=*/4 << 20);
  REQUIRE(plan.ok());
  CHECK(plan->segment);
  CHECK(plan->length == kRdmaSegmentSize);
}

TEST_CASE("segment plan: a segment, the budget, the rest, at least the least") {
  CHECK(PlanSegment(10 << 20, 1ull << 30) == kRdmaSegmentSize);
  CHECK(PlanSegment(10 << 20, 200 << 10) == 200 << 10);
  CHECK(PlanSegment(10 << 20, 0) == kRdmaMinSegment);  // Never waits.
  CHECK(PlanSegment(1000, 0) == 1000);
  CHECK(PlanSegment(300 << 10, 1ull << 30) == 300 << 10);
}

ControlMessage Grant(uint32_t length, bool segment) {
  ControlMessage grant;
  grant.kind = ControlKind::kGrant;
  grant.transfer = 7;
  grant.length = length;
  grant.flags = segment ? kGrantSegment : 0;
  return grant;
}

TEST_CASE("grant check: segments cover the frame, one after another") {
  PendingTransfer pending{7, 10, 3 << 20};
  CHECK(CheckGrant(Grant(1 << 20, true), pending).ok());
  pending.covered = 1 << 20;
  pending.writing = true;  // Its WRITEs not all posted yet.
  CHECK_FALSE(CheckGrant(Grant(1 << 20, true), pending).ok());
  pending.writing = false;
  CHECK(CheckGrant(Grant(1 << 20, true), pending).ok());
  // Past the frame's end.
  CHECK_FALSE(CheckGrant(Grant((2 << 20) + 11, true), pending).ok());
  CHECK(CheckGrant(Grant((2 << 20) + 10, true), pending).ok());
  // Empty, or dropping the payload part-way.
  CHECK_FALSE(CheckGrant(Grant(0, true), pending).ok());
  ControlMessage dropping = Grant(1 << 20, true);
  dropping.dropped = 1;
  CHECK_FALSE(CheckGrant(dropping, pending).ok());
  // A whole grant for a frame already partly granted.
  CHECK_FALSE(CheckGrant(Grant((3 << 20) + 10, false), pending).ok());
  // Flags this version does not know.
  ControlMessage unknown = Grant(1 << 20, true);
  unknown.flags |= 2;
  pending.covered = 0;
  CHECK_FALSE(CheckGrant(unknown, pending).ok());
}

}  // namespace
}  // namespace rdmarpc::transport::rdma
