// The checks a receiver applies to everything its RDMA peer does: each SEND
// that lands in a receive buffer, each control message, each WRITE WITH
// IMMEDIATE. They are kept apart from the verbs calls so that they read in
// one place and are fuzzed on their own (tests/fuzz/rdma_control_fuzz.cc).
//
// The peer is not trusted. A failed check is a protocol error: the
// connection closes with the returned status, logged; the process goes on.
#ifndef RDMARPC_TRANSPORT_RDMA_PEER_CHECKS_H_
#define RDMARPC_TRANSPORT_RDMA_PEER_CHECKS_H_

#include <cstdint>
#include <optional>
#include <span>

#include "rdmarpc/status.h"
#include "transport/frame.h"
#include "transport/rdma/protocol.h"

namespace rdmarpc::transport::rdma {

// The peer's ConnParams, from an rdma_cm event's private data (a connect
// request, an accept or a reject; rdma_cm may pad it with zeros). Errors:
//   UNIMPLEMENTED  rdmarpc of another version (the message names both);
//   UNAVAILABLE    not rdmarpc at all, or parameters it cannot work with.
StatusOr<ConnParams> CheckConnParams(std::span<const std::byte> private_data);

// A SEND that landed in one of our receive buffers.
struct InboundMessage {
  FramePrefix prefix;
  // An RPC frame whose payload exceeds our maximum: deliver its header only.
  bool payload_too_large = false;
  // Set when prefix.type is kControl.
  std::optional<ControlMessage> control;
  // A HEADER's payload (the frame header it carries), an AUTH's (TLS
  // handshake bytes).
  std::span<const std::byte> attached;
};

// `message` is the whole SEND (byte_len of its completion). The prefix's
// lengths must account for every byte of it.
StatusOr<InboundMessage> CheckInbound(std::span<const std::byte> message,
                                      uint64_t max_payload_size);

// A message (CheckInbound's) from a peer that has not authenticated yet
// (protocol.h, Authentication): a CREDIT; an AUTH's handshake bytes, while
// the peer's bytes so far, `received_before`, and these stay within
// kRdmaAuthMaxBytes; or, to a client whose handshake is done, VERIFIED.
// Anything else: UNAUTHENTICATED for a frame or another control message
// (the connection closes), RESOURCE_EXHAUSTED past the limit, INTERNAL for
// a malformed AUTH.
enum class AuthInbound { kCredit, kBytes, kVerified };
StatusOr<AuthInbound> CheckBeforeAuth(const InboundMessage& inbound,
                                      bool server, bool handshake_done,
                                      uint64_t received_before);

// CheckCreditReturn's error, out of line.
Status CreditReturnViolation(uint32_t held, uint16_t returned,
                             uint32_t peer_receive_depth);
// The peer returns `returned` credits while we hold `held`: it can never
// have posted more receives than the depth it announced. Inline: it runs on
// every message.
inline Status CheckCreditReturn(uint32_t held, uint16_t returned,
                                uint32_t peer_receive_depth) {
  if (uint64_t{held} + returned <= peer_receive_depth) return Status();
  return CreditReturnViolation(held, returned, peer_receive_depth);
}

// A GIVE_BACK of `count` credits from a peer we believe holds `held`
// (after the GIVE_BACK's own): at least one, and no more than it holds.
Status CheckGiveBack(uint32_t count, uint32_t held);

// What to grant for an RTS.
struct GrantPlan {
  uint64_t length = 0;  // Bytes the peer may write: the header, maybe more.
  uint64_t dropped_payload = 0;  // Non-zero: the payload is not granted.
  DropReason drop_reason = DropReason::kNone;
  // Not now: the payload exceeds the budget while grants ahead of it are
  // open. Plan it again once they have landed.
  bool wait = false;
  // `length` is the frame's first segment, not all of it (PlanSegment plans
  // the others).
  bool segment = false;
};

// An RTS. `ahead`: the peer's transfers to us already under way (granted or
// waiting), at most `max_open_grants` in all. `budget_left`: registered
// bytes this receiver may still grant. A frame that does not fit waits
// while transfers are ahead (their landing frees memory); with none ahead it
// goes in segments (of what the budget allows, at least kRdmaMinSegment),
// or is dropped when not even that fits: it is never waited for on other
// connections' account. A frame over `whole_limit` goes in segments too.
StatusOr<GrantPlan> PlanGrant(const ControlMessage& rts, uint32_t ahead,
                              uint32_t max_open_grants,
                              uint64_t max_payload_size, uint64_t budget_left,
                              uint64_t whole_limit = UINT64_MAX);

// The next segment of a segmented frame with `remaining` bytes not yet
// granted: up to kRdmaSegmentSize, and what the budget allows, though never
// less than kRdmaMinSegment (the frame is under way; it does not wait).
uint64_t PlanSegment(uint64_t remaining, uint64_t budget_left);

// The transfer of ours that a GRANT must answer.
struct PendingTransfer {
  uint32_t id = 0;
  uint64_t header_size = 0;
  uint64_t payload_size = 0;
  // Bytes of it covered by segments granted so far, and whether WRITEs of
  // the last of them are still to be posted.
  uint64_t covered = 0;
  bool writing = false;
  // Its header went as a HEADER, asked for by kGrantHeaderFirst.
  bool header_sent = false;
};

// A GRANT: it must answer our oldest transfer not yet covered by grants:
// for exactly the bytes we asked for (or the header alone when it drops the
// payload), or, with kGrantSegment, for the next non-empty segment of them,
// once the segment before has been written. kGrantHeaderFirst asks for the
// header (at most kMaxHeaderFirst bytes) of a transfer not yet granted whose
// header was not sent; kGrantRefused ends one whose header was sent; neither
// carries an address or a key.
Status CheckGrant(const ControlMessage& grant,
                  const std::optional<PendingTransfer>& pending);

// A GRANT with kGrantStanding (protocol.h): a grant for a transfer of ours
// not yet asked for. It must be numbered `expected` (the one after the last
// we took), for at least one byte and at most a grant-pool block, drop
// nothing, and come while we hold fewer than kRdmaStandingGrants (`held`).
Status CheckStandingGrant(const ControlMessage& grant, uint32_t expected,
                          size_t held);

// A standing grant of ours, sent to the peer and not yet used or given back.
struct StandingGrant {
  uint32_t number = 0;
  uint32_t rkey = 0;
  uint64_t length = 0;
};

// An RTS with kRtsStanding: the peer writes the frame into our oldest
// standing grant at once. It must name that grant by its key, the frame must
// fit it, and `ahead` and `max_open_grants` are as for PlanGrant. A payload
// over our maximum is no error: it lands, and only its header is delivered.
Status CheckStandingRts(const ControlMessage& rts, uint32_t ahead,
                        uint32_t max_open_grants,
                        const std::optional<StandingGrant>& oldest);

// A RELEASE: the peer gives back `release.length` of our standing grants
// (at least one, no more than the `out` it holds), the oldest first, which
// must be numbered `release.transfer`.
Status CheckRelease(const ControlMessage& release,
                    const std::optional<StandingGrant>& oldest, size_t out);

// A HEADER: it must carry the header of our oldest transfer whose header we
// asked for (`awaited`, with the size its RTS declared), none else.
struct AwaitedHeader {
  uint32_t id = 0;
  uint64_t header_size = 0;
};
Status CheckHeader(const ControlMessage& header,
                   std::span<const std::byte> bytes,
                   const std::optional<AwaitedHeader>& awaited);

// A grant of ours, open for the peer's WRITEs.
struct OpenGrant {
  uint32_t id = 0;
  uint64_t length = 0;
};

// A WRITE WITH IMMEDIATE completed: `imm` must name our oldest open grant
// (transfers land in order), and the last WRITE (`bytes`) fits inside it. (The
// memory region bounds every WRITE; the NIC rejects any outside it.)
Status CheckLanding(uint32_t imm, uint32_t bytes,
                    const std::optional<OpenGrant>& open);

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_PEER_CHECKS_H_
