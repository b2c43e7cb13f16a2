#include "transport/rdma/peer_checks.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "rdmarpc/tunables.h"

namespace rdmarpc::transport::rdma {
namespace {

Status Violation(const std::string& what) {
  return Status(StatusCode::kInternal, "malformed frame: " + what);
}

}  // namespace

StatusOr<ConnParams> CheckConnParams(std::span<const std::byte> private_data) {
  ConnParams params;
  // Magic and version first: they keep their place in every version.
  if (private_data.size() < sizeof(params.magic) + sizeof(params.version)) {
    return Status(StatusCode::kUnavailable,
                  "not an rdmarpc peer (no connection parameters)");
  }
  std::memcpy(&params.magic, private_data.data(), sizeof(params.magic));
  std::memcpy(&params.version, private_data.data() + sizeof(params.magic),
              sizeof(params.version));
  if (params.magic != kConnMagic) {
    return Status(StatusCode::kUnavailable,
                  "not an rdmarpc peer (no rdmarpc magic in its connection "
                  "parameters)");
  }
  if (params.version != kConnVersion) {
    return Status(StatusCode::kUnimplemented,
                  "the peer speaks rdmarpc RDMA protocol version " +
                      std::to_string(params.version) +
                      "; this build speaks version " +
                      std::to_string(kConnVersion));
  }
  if (private_data.size() < sizeof(ConnParams)) {
    return Status(StatusCode::kUnavailable,
                  "truncated rdmarpc connection parameters (" +
                      std::to_string(private_data.size()) + " bytes)");
  }
  std::memcpy(&params, private_data.data(), sizeof(params));
  if (params.receive_depth < 2 || params.initial_credits < 2 ||
      params.initial_credits > params.receive_depth ||
      params.receive_buffer_size < tunables::kFramePrefixSize + 64) {
    return Status(
        StatusCode::kUnavailable,
        "unusable rdmarpc connection parameters (receive depth " +
            std::to_string(params.receive_depth) + ", initial credits " +
            std::to_string(params.initial_credits) + ", receive buffers of " +
            std::to_string(params.receive_buffer_size) + " bytes)");
  }
  if (params.rail >= tunables::kMaxRails ||
      (params.rail_flags & ~kRailPrimary) != 0 || params.reserved != 0 ||
      (params.flags & ~kConnTls) != 0 ||
      (!params.is_rail() && (params.rail != 0 || params.rail_flags != 0 ||
                             params.rail_epoch != 0))) {
    return Status(StatusCode::kUnavailable,
                  "unusable rdmarpc connection parameters (rail " +
                      std::to_string(params.rail) + ", rail flags " +
                      std::to_string(params.rail_flags) + ")");
  }
  return params;
}

StatusOr<InboundMessage> CheckInbound(std::span<const std::byte> message,
                                      uint64_t max_payload_size) {
  if (message.size() < tunables::kFramePrefixSize) {
    return Violation("short message of " + std::to_string(message.size()) +
                     " bytes");
  }
  const DecodedPrefix decoded = DecodeFramePrefix(
      message.first(tunables::kFramePrefixSize), max_payload_size);
  // The handshake agreed on the version: a frame of another one is as
  // malformed as any.
  if (decoded.verdict == PrefixVerdict::kMalformed ||
      decoded.verdict == PrefixVerdict::kOtherVersion) {
    return decoded.error;
  }
  const FramePrefix& prefix = decoded.prefix;
  if (uint64_t{tunables::kFramePrefixSize} + prefix.header_size +
          prefix.payload_size !=
      message.size()) {
    return Violation("frame length does not match the message");
  }
  InboundMessage inbound;
  inbound.prefix = prefix;
  if (prefix.type == FrameType::kControl) {
    inbound.control = DecodeControl(
        message.subspan(tunables::kFramePrefixSize, prefix.header_size));
    // Only a HEADER (the frame header it is for) and an AUTH (handshake
    // bytes) carry a payload.
    const bool attaches =
        inbound.control && (inbound.control->kind == ControlKind::kHeader ||
                            inbound.control->kind == ControlKind::kAuth);
    if (!inbound.control ||
        (attaches ? prefix.payload_size != inbound.control->length
                  : prefix.payload_size != 0)) {
      return Violation("bad control message");
    }
    inbound.attached = message.subspan(
        tunables::kFramePrefixSize + prefix.header_size, prefix.payload_size);
    return inbound;
  }
  inbound.payload_too_large =
      decoded.verdict == PrefixVerdict::kPayloadTooLarge;
  return inbound;
}

StatusOr<AuthInbound> CheckBeforeAuth(const InboundMessage& inbound,
                                      bool server, bool handshake_done,
                                      uint64_t received_before) {
  if (!inbound.control) {
    return Status(StatusCode::kUnauthenticated,
                  "peer sent a frame before authenticating");
  }
  const ControlMessage& message = *inbound.control;
  if (message.kind == ControlKind::kCredit) return AuthInbound::kCredit;
  if (message.kind != ControlKind::kAuth) {
    return Status(StatusCode::kUnauthenticated,
                  "peer sent a control message of kind " +
                      std::to_string(static_cast<int>(message.kind)) +
                      " before authenticating");
  }
  if (message.flags == kAuthVerified) {
    if (server || !handshake_done || message.length != 0) {
      return Violation(server ? "a client may not send VERIFIED"
                              : "VERIFIED before the handshake was done");
    }
    return AuthInbound::kVerified;
  }
  if (message.flags != 0 || message.length == 0) {
    return Violation("bad AUTH message");
  }
  if (received_before + message.length > tunables::kRdmaAuthMaxBytes) {
    return Status(StatusCode::kResourceExhausted,
                  "peer sent more than " +
                      std::to_string(tunables::kRdmaAuthMaxBytes) +
                      " bytes of TLS handshake");
  }
  return AuthInbound::kBytes;
}

Status CreditReturnViolation(uint32_t held, uint16_t returned,
                             uint32_t peer_receive_depth) {
  return Violation("peer returned more credits than it was owed (" +
                   std::to_string(held) + " held, " + std::to_string(returned) +
                   " returned, depth " + std::to_string(peer_receive_depth) +
                   ")");
}

Status CheckGiveBack(uint32_t count, uint32_t held) {
  if (count >= 1 && count <= held) return Status();
  return Violation("peer gave back " + std::to_string(count) +
                   " credits while holding " + std::to_string(held));
}

namespace {

// What every RTS must meet, plain or standing: `flags` as expected, room
// for one more transfer under way, a header within the call header limit.
Status CheckRts(const ControlMessage& rts, uint16_t flags, uint32_t ahead,
                uint32_t max_open_grants) {
  if (rts.kind != ControlKind::kRts) return Violation("not an RTS");
  if (rts.flags != flags) {
    return Violation("RTS with flags " + std::to_string(rts.flags) + " where " +
                     std::to_string(flags) + " was expected");
  }
  if (ahead >= max_open_grants) {
    return Violation("transfer " + std::to_string(rts.transfer) + " while " +
                     std::to_string(ahead) + " are under way (the limit is " +
                     std::to_string(max_open_grants) + ")");
  }
  if (rts.header_size > tunables::kMaxCallHeaderSize) {
    return Violation("transfer header of " + std::to_string(rts.header_size) +
                     " bytes");
  }
  return Status();
}

}  // namespace

StatusOr<GrantPlan> PlanGrant(const ControlMessage& rts, uint32_t ahead,
                              uint32_t max_open_grants,
                              uint64_t max_payload_size, uint64_t budget_left,
                              uint64_t whole_limit) {
  if (Status s = CheckRts(rts, 0, ahead, max_open_grants); !s.ok()) return s;
  GrantPlan plan;
  plan.length = uint64_t{rts.header_size} + rts.payload_size;
  if (rts.payload_size > max_payload_size) {
    plan.drop_reason = DropReason::kTooLarge;
  } else if (plan.length > budget_left && ahead > 0) {
    plan.wait = true;
    return plan;
  } else if (plan.length > budget_left &&
             budget_left < tunables::kRdmaMinSegment) {
    plan.drop_reason = DropReason::kMemoryLimit;
  } else if (plan.length > budget_left || plan.length > whole_limit) {
    plan.segment = true;
    plan.length = PlanSegment(plan.length, budget_left);
    return plan;
  }
  if (plan.drop_reason != DropReason::kNone) {
    plan.length = rts.header_size;
    plan.dropped_payload = rts.payload_size;
  }
  return plan;
}

uint64_t PlanSegment(uint64_t remaining, uint64_t budget_left) {
  const uint64_t floor =
      std::min<uint64_t>(remaining, tunables::kRdmaMinSegment);
  return std::max(floor, std::min({remaining, budget_left,
                                   uint64_t{tunables::kRdmaSegmentSize}}));
}

namespace {

// A GRANT with kGrantHeaderFirst or kGrantRefused: no key, and for a
// transfer not yet granted, whose header was (refused) or was not (header
// first) sent.
Status CheckAdmissionGrant(const ControlMessage& grant,
                           const PendingTransfer& pending) {
  const bool first = grant.flags == kGrantHeaderFirst;
  if (grant.addr != 0 || grant.rkey != 0) {
    return Violation("admission grant with a key");
  }
  if (pending.covered != 0 || pending.writing) {
    return Violation("admission grant for a transfer granted already");
  }
  if (first) {
    if (pending.header_sent || grant.dropped != 0 ||
        grant.length != pending.header_size ||
        pending.header_size > kMaxHeaderFirst) {
      return Violation("header asked for twice, or a header of " +
                       std::to_string(pending.header_size) +
                       " bytes asked for as " + std::to_string(grant.length));
    }
    return Status();
  }
  if (!pending.header_sent || grant.length != 0) {
    return Violation("refusal of a transfer whose header was not asked for");
  }
  return Status();
}

}  // namespace

Status CheckGrant(const ControlMessage& grant,
                  const std::optional<PendingTransfer>& pending) {
  if (grant.kind != ControlKind::kGrant) return Violation("not a GRANT");
  if (!pending || pending->id != grant.transfer) {
    return Violation("grant for no open transfer");
  }
  if (grant.flags == kGrantHeaderFirst || grant.flags == kGrantRefused) {
    return CheckAdmissionGrant(grant, *pending);
  }
  if ((grant.flags & ~kGrantSegment) != 0) {
    return Violation("grant with unknown flags " + std::to_string(grant.flags));
  }
  if ((grant.flags & kGrantSegment) == 0) {
    const uint64_t want =
        pending->header_size + (grant.dropped ? 0 : pending->payload_size);
    if (pending->covered != 0 || grant.length != want) {
      return Violation(
          "grant of " + std::to_string(grant.length) +
          " bytes for a transfer of " + std::to_string(want) +
          (pending->covered != 0 ? " already partly granted" : ""));
    }
    return Status();
  }
  const uint64_t left =
      pending->header_size + pending->payload_size - pending->covered;
  if (grant.dropped != 0 || grant.length == 0 || grant.length > left) {
    return Violation("segment grant of " + std::to_string(grant.length) +
                     " bytes for a transfer with " + std::to_string(left) +
                     " left" + (grant.dropped != 0 ? ", dropping" : ""));
  }
  if (pending->writing) {
    return Violation("segment grant before the segment before was written");
  }
  return Status();
}

Status CheckHeader(const ControlMessage& header,
                   std::span<const std::byte> bytes,
                   const std::optional<AwaitedHeader>& awaited) {
  if (header.kind != ControlKind::kHeader) return Violation("not a HEADER");
  if (!awaited || awaited->id != header.transfer) {
    return Violation("HEADER for transfer " + std::to_string(header.transfer) +
                     ", whose header was not asked for");
  }
  if (bytes.size() != awaited->header_size || header.flags != 0) {
    return Violation("HEADER of " + std::to_string(bytes.size()) +
                     " bytes for a header of " +
                     std::to_string(awaited->header_size));
  }
  return Status();
}

Status CheckStandingGrant(const ControlMessage& grant, uint32_t expected,
                          size_t held) {
  if (grant.kind != ControlKind::kGrant || grant.flags != kGrantStanding) {
    return Violation("not a standing GRANT");
  }
  if (grant.transfer != expected) {
    return Violation("standing grant " + std::to_string(grant.transfer) +
                     " where " + std::to_string(expected) + " comes next");
  }
  if (grant.dropped != 0 || grant.length == 0 ||
      grant.length > tunables::kRdmaGrantPoolMaxBlock) {
    return Violation("standing grant of " + std::to_string(grant.length) +
                     " bytes" + (grant.dropped != 0 ? ", dropping" : ""));
  }
  if (held >= tunables::kRdmaStandingGrants) {
    return Violation("standing grant while " + std::to_string(held) +
                     " are held (the limit is " +
                     std::to_string(tunables::kRdmaStandingGrants) + ")");
  }
  return Status();
}

Status CheckStandingRts(const ControlMessage& rts, uint32_t ahead,
                        uint32_t max_open_grants,
                        const std::optional<StandingGrant>& oldest) {
  if (Status s = CheckRts(rts, kRtsStanding, ahead, max_open_grants); !s.ok()) {
    return s;
  }
  if (!oldest || oldest->rkey != rts.rkey) {
    return Violation("transfer " + std::to_string(rts.transfer) +
                     " into a standing grant not held (key " +
                     std::to_string(rts.rkey) + ")");
  }
  const uint64_t total = uint64_t{rts.header_size} + rts.payload_size;
  if (total > oldest->length) {
    return Violation("transfer of " + std::to_string(total) +
                     " bytes into a standing grant of " +
                     std::to_string(oldest->length));
  }
  return Status();
}

Status CheckRelease(const ControlMessage& release,
                    const std::optional<StandingGrant>& oldest, size_t out) {
  if (release.kind != ControlKind::kRelease) return Violation("not a RELEASE");
  if (!oldest || oldest->number != release.transfer || release.length == 0 ||
      release.length > out) {
    return Violation("release of " + std::to_string(release.length) +
                     " standing grants from " +
                     std::to_string(release.transfer) + " while " +
                     std::to_string(out) + " are out" +
                     (oldest ? ", the oldest " + std::to_string(oldest->number)
                             : std::string()));
  }
  return Status();
}

Status CheckLanding(uint32_t imm, uint32_t bytes,
                    const std::optional<OpenGrant>& open) {
  if (!open || imm != open->id || bytes > open->length) {
    return Violation("unexpected RDMA write (immediate " + std::to_string(imm) +
                     ", " + std::to_string(bytes) + " bytes, " +
                     (open ? "open grant " + std::to_string(open->id) + " of " +
                                 std::to_string(open->length) + " bytes"
                           : std::string("no open grant")) +
                     ")");
  }
  return Status();
}

}  // namespace rdmarpc::transport::rdma
