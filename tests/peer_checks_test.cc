// The receiver's grant planning and the sender's grant checks for frames
// that go in segments, and the checks of standing grants on both sides
// (transport/rdma/protocol.h), and of admission's header first.
#include "transport/rdma/peer_checks.h"

#include <catch2/catch_test_macros.hpp>
#include <vector>

#include "rdmarpc/tunables.h"
#include "transport/frame.h"

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
  unknown.flags |= 4;
  pending.covered = 0;
  CHECK_FALSE(CheckGrant(unknown, pending).ok());
  // A standing grant is not an answer to an RTS.
  ControlMessage standing = Grant((3 << 20) + 10, false);
  standing.flags = kGrantStanding;
  CHECK_FALSE(CheckGrant(standing, pending).ok());
}

TEST_CASE("grant plan: an RTS with flags is not planned as a plain one") {
  ControlMessage rts = Rts(10, 1 << 20);
  rts.flags = kRtsStanding;
  CHECK_FALSE(PlanGrant(rts, 0, 2, kMaxPayload, 4 << 20).ok());
}

ControlMessage Standing(uint32_t number, uint32_t length) {
  ControlMessage grant;
  grant.kind = ControlKind::kGrant;
  grant.flags = kGrantStanding;
  grant.transfer = number;
  grant.rkey = 99;
  grant.length = length;
  return grant;
}

TEST_CASE("standing grant check: numbered in turn, a pool block, a few held") {
  CHECK(CheckStandingGrant(Standing(0, 2 << 20), 0, 0).ok());
  CHECK(CheckStandingGrant(Standing(5, 32 << 10), 5, 1).ok());
  // Out of turn.
  CHECK_FALSE(CheckStandingGrant(Standing(1, 2 << 20), 0, 0).ok());
  // Empty, or larger than any pool block.
  CHECK_FALSE(CheckStandingGrant(Standing(0, 0), 0, 0).ok());
  CHECK_FALSE(CheckStandingGrant(
                  Standing(0, tunables::kRdmaGrantPoolMaxBlock + 1), 0, 0)
                  .ok());
  // Dropping, or with other flags.
  ControlMessage odd = Standing(0, 2 << 20);
  odd.dropped = 1;
  CHECK_FALSE(CheckStandingGrant(odd, 0, 0).ok());
  odd = Standing(0, 2 << 20);
  odd.flags |= kGrantSegment;
  CHECK_FALSE(CheckStandingGrant(odd, 0, 0).ok());
  // One more than a sender holds.
  CHECK_FALSE(
      CheckStandingGrant(Standing(2, 2 << 20), 2, tunables::kRdmaStandingGrants)
          .ok());
}

TEST_CASE("standing RTS check: the oldest grant, by key, and the frame fits") {
  ControlMessage rts = Rts(10, 1 << 20);
  rts.flags = kRtsStanding;
  rts.rkey = 99;
  const StandingGrant grant{3, 99, 2 << 20};
  CHECK(CheckStandingRts(rts, 0, 2, grant).ok());
  CHECK(CheckStandingRts(rts, 1, 2, grant).ok());
  // Beyond the transfers the receiver lets a peer have under way.
  CHECK_FALSE(CheckStandingRts(rts, 2, 2, grant).ok());
  // No standing grant, another key, a frame one byte too large.
  CHECK_FALSE(CheckStandingRts(rts, 0, 2, std::nullopt).ok());
  CHECK_FALSE(CheckStandingRts(rts, 0, 2, StandingGrant{3, 98, 2 << 20}).ok());
  // Without kRtsStanding.
  CHECK_FALSE(CheckStandingRts(Rts(10, 1 << 20), 0, 2, grant).ok());
  ControlMessage full = Rts(10, (2 << 20) - 10);
  full.flags = kRtsStanding;
  full.rkey = 99;
  CHECK(CheckStandingRts(full, 0, 2, grant).ok());
  full.payload_size += 1;
  CHECK_FALSE(CheckStandingRts(full, 0, 2, grant).ok());
  // A header over the call header limit.
  ControlMessage header = rts;
  header.header_size = tunables::kMaxCallHeaderSize + 1;
  CHECK_FALSE(CheckStandingRts(header, 0, 2, grant).ok());
}

TEST_CASE("release check: the oldest, at least one, no more than are out") {
  ControlMessage release;
  release.kind = ControlKind::kRelease;
  release.transfer = 3;
  release.length = 2;
  const StandingGrant oldest{3, 99, 2 << 20};
  CHECK(CheckRelease(release, oldest, 2).ok());
  CHECK_FALSE(CheckRelease(release, oldest, 1).ok());
  CHECK_FALSE(CheckRelease(release, std::nullopt, 0).ok());
  release.length = 0;
  CHECK_FALSE(CheckRelease(release, oldest, 2).ok());
  release.length = 1;
  release.transfer = 4;  // Not the oldest.
  CHECK_FALSE(CheckRelease(release, oldest, 2).ok());
}

ControlMessage AdmissionGrant(uint16_t flags, uint32_t length) {
  ControlMessage grant;
  grant.kind = ControlKind::kGrant;
  grant.flags = flags;
  grant.transfer = 7;
  grant.length = length;
  return grant;
}

TEST_CASE(
    "admission grant check: the header asked for once, no key, refused only "
    "after") {
  PendingTransfer pending{7, 100, 1 << 20};
  const ControlMessage ask = AdmissionGrant(kGrantHeaderFirst, 100);
  const ControlMessage refuse = AdmissionGrant(kGrantRefused, 0);
  CHECK(CheckGrant(ask, pending).ok());
  // Refused before its header was sent: the receiver never saw it.
  CHECK_FALSE(CheckGrant(refuse, pending).ok());
  // Not the header's size; with a key; a header too large for a HEADER.
  CHECK_FALSE(CheckGrant(AdmissionGrant(kGrantHeaderFirst, 99), pending).ok());
  ControlMessage keyed = ask;
  keyed.rkey = 5;
  CHECK_FALSE(CheckGrant(keyed, pending).ok());
  PendingTransfer huge{7, kMaxHeaderFirst + 1, 1 << 20};
  CHECK_FALSE(
      CheckGrant(AdmissionGrant(kGrantHeaderFirst,
                                static_cast<uint32_t>(huge.header_size)),
                 huge)
          .ok());
  pending.header_sent = true;
  CHECK_FALSE(CheckGrant(ask, pending).ok());  // Asked twice.
  CHECK(CheckGrant(refuse, pending).ok());
  // Admitted: the plain grant follows.
  CHECK(CheckGrant(Grant(100 + (1 << 20), false), pending).ok());
  // Nothing for a transfer already under way.
  pending.covered = 1 << 20;
  CHECK_FALSE(CheckGrant(refuse, pending).ok());
  // Both flags at once.
  pending.covered = 0;
  CHECK_FALSE(
      CheckGrant(AdmissionGrant(kGrantHeaderFirst | kGrantRefused, 0), pending)
          .ok());
}

TEST_CASE("header check: the one asked for, its size exactly") {
  ControlMessage header;
  header.kind = ControlKind::kHeader;
  header.transfer = 7;
  header.length = 3;
  const std::vector<std::byte> bytes(3);
  CHECK(CheckHeader(header, bytes, AwaitedHeader{7, 3}).ok());
  CHECK_FALSE(CheckHeader(header, bytes, std::nullopt).ok());
  CHECK_FALSE(CheckHeader(header, bytes, AwaitedHeader{8, 3}).ok());
  CHECK_FALSE(CheckHeader(header, bytes, AwaitedHeader{7, 4}).ok());
}

TEST_CASE("inbound check: only a HEADER carries bytes after its message") {
  auto message = [](ControlKind kind, uint32_t length, uint32_t attached) {
    ControlMessage control;
    control.kind = kind;
    control.length = length;
    const EncodedPrefix prefix = EncodeFramePrefix(
        {FrameType::kControl, 0, sizeof(ControlMessage), attached});
    std::vector<std::byte> bytes(prefix.begin(), prefix.end());
    const auto body = std::as_bytes(std::span(&control, 1));
    bytes.insert(bytes.end(), body.begin(), body.end());
    bytes.resize(bytes.size() + attached, std::byte{0x5a});
    return bytes;
  };
  const auto header = message(ControlKind::kHeader, 40, 40);
  StatusOr<InboundMessage> inbound = CheckInbound(header, kMaxPayload);
  REQUIRE(inbound.ok());
  CHECK(inbound->attached.size() == 40);
  CHECK(inbound->attached[0] == std::byte{0x5a});
  // Its length and its bytes disagree; another kind with bytes attached.
  CHECK_FALSE(
      CheckInbound(message(ControlKind::kHeader, 41, 40), kMaxPayload).ok());
  CHECK_FALSE(
      CheckInbound(message(ControlKind::kPing, 40, 40), kMaxPayload).ok());
  CHECK(CheckInbound(message(ControlKind::kPing, 0, 0), kMaxPayload).ok());
}

TEST_CASE(
    "auth check: before authenticating only CREDIT and AUTH, within the "
    "limit; VERIFIED only to a client done with its handshake") {
  auto inbound = [](std::optional<ControlKind> kind, uint16_t flags,
                    uint32_t length) {
    InboundMessage message;
    message.prefix.type = kind ? FrameType::kControl : FrameType::kRpc;
    if (kind) {
      ControlMessage control;
      control.kind = *kind;
      control.flags = flags;
      control.length = length;
      message.control = control;
    }
    return message;
  };
  const auto bytes = inbound(ControlKind::kAuth, 0, 100);
  auto checked = CheckBeforeAuth(bytes, /*server=*/true, false, 0);
  REQUIRE(checked.ok());
  CHECK(*checked == AuthInbound::kBytes);
  CHECK(*CheckBeforeAuth(inbound(ControlKind::kCredit, 0, 0), true, false, 0) ==
        AuthInbound::kCredit);
  // Past the limit.
  const auto over =
      CheckBeforeAuth(bytes, true, false, tunables::kRdmaAuthMaxBytes - 99);
  CHECK(over.status().code() == StatusCode::kResourceExhausted);
  // A frame, an RTS, a PING: the peer has not authenticated.
  for (const auto& message :
       {inbound(std::nullopt, 0, 0), inbound(ControlKind::kRts, 0, 0),
        inbound(ControlKind::kPing, 0, 0),
        inbound(ControlKind::kHeader, 0, 4)}) {
    const auto refused = CheckBeforeAuth(message, true, false, 0);
    CHECK(refused.status().code() == StatusCode::kUnauthenticated);
  }
  // VERIFIED: to a client whose handshake is done, and never from one.
  const auto verified = inbound(ControlKind::kAuth, kAuthVerified, 0);
  CHECK(*CheckBeforeAuth(verified, /*server=*/false, /*done=*/true, 0) ==
        AuthInbound::kVerified);
  CHECK_FALSE(CheckBeforeAuth(verified, false, /*done=*/false, 0).ok());
  CHECK_FALSE(CheckBeforeAuth(verified, /*server=*/true, true, 0).ok());
  // An empty AUTH, unknown flags.
  CHECK_FALSE(
      CheckBeforeAuth(inbound(ControlKind::kAuth, 0, 0), true, false, 0).ok());
  CHECK_FALSE(
      CheckBeforeAuth(inbound(ControlKind::kAuth, 4, 10), true, false, 0).ok());
}

}  // namespace
}  // namespace rdmarpc::transport::rdma
