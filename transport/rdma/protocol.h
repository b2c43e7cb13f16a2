// The RDMA transport's own protocol, under the rdmarpc frame format.
//
// Connection setup (rdma_cm private data, both directions): ConnParams. The
// connecting side sends its own; the listener checks them (CheckConnParams)
// and accepts with its own, or rejects with its own when they do not fit, so
// that a connecting side of another version learns the listener's version.
// `magic` and `version` open ConnParams in every version.
//
// Every message a side SENDs is a frame whose prefix's credits field
// (transport/frame.h) carries `credits`: receives the sender lends the peer
// anew since its last message. A side may SEND (or WRITE WITH IMMEDIATE)
// only while it holds a credit, so the receiver never runs out of receives
// and RNR never happens; one credit is held back for a CREDIT message, so
// credits can always flow back.
//
// The receiver's receives are buffers posted to a shared receive queue
// (completion_group.h) that many connections draw from: the credits it has
// lent all its peers never exceed the buffers posted there. A peer starts
// with `initial_credits`; each message it sends uses one, which the receiver
// returns once the buffer is re-posted, returns with one more while the peer
// keeps most of its credits in use and the pool has buffers to spare (never
// past `receive_depth`), or keeps (one fewer) while the pool is short and
// the peer holds more than it started with. A message beyond the peer's
// credits is a protocol error that closes its connection. A side that finds
// its connection idle (keepalive: nothing received for an interval) gives
// back the credits it holds beyond `initial_credits` with a GIVE_BACK
// {length = count}, so that an idle peer does not keep receives the shared
// queue's other peers could use; more than it holds is a protocol error.
//
// Frames up to the receive buffer size travel as one SEND (inline when they
// fit max_inline_data). A larger frame travels by rendezvous:
//   1. sender -> RTS {transfer, header_size, payload_size}      (control SEND)
//   2. receiver takes (TransportOptions::rdma_pooled_grants, on by
//      default) a zeroed block of header+payload bytes from its
//      device's grant pool (grant_pool.h), binds a type 2 memory window on
//      this connection's QP to exactly that block (remote write only), and
//      answers GRANT {transfer, addr, rkey, length}: the window's rkey,
//      which no other QP can use. A frame larger than a pool block, or one
//      the pool cannot hold, gets a block registered for it alone. A
//      payload over the receiver's maximum is not granted: length covers
//      the header alone and `dropped` is set
//   3. sender -> header+payload into the grant as one or more RDMA WRITEs
//      (write_plan.h: registered memory is gathered in place, the rest is
//      staged through registered memory); the last is a WRITE WITH
//      IMMEDIATE, immediate = transfer id, and consumes a credit like a SEND
//   4. receiver checks the immediate against its oldest open grant, and
//      closes it to the peer before delivering the block without a copy:
//      a window is invalidated (a LOCAL_INV work request; the frame, and
//      every message received after it, waits for its completion), a
//      region deregistered
// Segments: a frame larger than the receiver may pin at once (what is left
// of max_grant_bytes or of RLIMIT_MEMLOCK), or larger than a grant-pool
// block when grants come from the pool, is granted in segments of up to
// kRdmaSegmentSize. Each GRANT then has kGrantSegment set and covers the
// next `length` bytes of the frame, from where the one before ended. The
// sender writes each segment like a whole frame, the last WRITE of each
// with the immediate; the receiver copies a landed segment into the frame's
// own (unregistered) memory and grants the next, until the frame is
// covered. No GRANT for a later transfer goes out before a segmented
// frame's last one, so grants still answer transfers in order. A frame is
// dropped for the memory limit only when not even kRdmaMinSegment can be
// pinned.
// A grant starts zero-filled: the receiver cannot tell which bytes one-sided
// WRITEs covered, so a peer that skips some delivers zeros, never this
// process's old memory (a pool block is zeroed when the application
// releases it). The grant's window or region bounds every WRITE.
//
// Admission (a server whose interceptors admit calls, include/rdmarpc/
// interceptor.h): until one of its calls has been admitted, a peer is lent
// nothing beyond its initial credits' receive buffers: none of its RTSs is
// granted before its header has been seen. The receiver answers such an RTS
// with a GRANT with kGrantHeaderFirst {transfer, length = header_size, no
// address, no key}; the sender SENDs the frame's header as a HEADER
// {transfer, length = header_size}, the header its payload, outside the
// order of frames (like any control message). Admitted, the transfer goes
// on as above (its GRANT follows, the header written again with the rest).
// Refused, the GRANT has kGrantRefused {transfer, dropped}: the sender
// writes nothing and the frame is over; the receiver delivers the header
// with the payload dropped. No later RTS is answered before a HEADER asked
// for has arrived. A header that does not fit one receive buffer with its
// HEADER message (kMaxHeaderFirst) cannot be admitted: the connection is
// closed, the peer told why with a HEADER_TOO_LARGE {length = its size}.
//
// Pipelining: a sender may have up to the receiver's `max_open_grants`
// transfers under way, so the next RTS, and the receiver's zeroing and
// registering of its grant, overlap the WRITEs of the one before. Grants
// answer RTSs in order, and transfers are written in order. A receiver short
// of grant memory (max_grant_bytes) while grants of this connection are open
// answers the RTS once they have landed instead of dropping the payload.
//
// Standing grants: the round trip of RTS and GRANT is skipped for a peer
// that keeps sending large frames alike (a stream of them). Once a second
// whole frame of the same grant-pool size class in a row has landed from a
// pooled grant, the receiver may grant the peer's next one before it is
// asked: a GRANT with kGrantStanding, `transfer` a
// sequence number of the receiver's standing grants (0, 1, ...), `length`
// a whole grant-pool block of the landed frame's size class, bound to a
// window as any pooled grant. The peer holds at most kRdmaStandingGrants.
// A sender with a frame that fits its oldest standing grant sends the RTS
// with kRtsStanding and `rkey` that grant's key, and posts the frame's
// WRITEs right behind it without waiting; RC delivers the RTS first, and
// the receiver makes the grant that transfer's (checking the key and that
// the frame fits), then everything goes as in step 4. A frame that fits
// none asks by RTS as above; the standing grant stays. A sender that finds
// its connection idle (keepalive) gives back the standing grants it holds
// with one RELEASE {transfer = the oldest's number, length = how many}; the
// receiver invalidates their windows and returns the blocks. A standing
// RTS, or a RELEASE, that names no standing grant of the receiver's, or
// not the oldest, is a protocol error.
//
// Authentication (TransportOptions::tls on both sides; both announce
// kConnTls in ConnParams::flags, and a listener rejects a request whose
// kConnTls differs from its own, answering with its ConnParams so the
// connecting side can say which of them lacks TLS): once rdma_cm has
// established the connection, and before anything else, the two run a TLS
// 1.3 handshake (transport/tls, the same certificates and checks as
// tls://) over the QP. Its records travel as AUTH messages {length = bytes
// attached}, each a SEND of at most one receive buffer: a certificate
// flight larger than that is split, and waits for credits like any
// message. Until the server has verified the client, each side lends the
// other only its initial credits (kRdmaInitialCredits receive buffers):
// used credits come back (CREDIT, or the prefix of an AUTH), no more are
// lent, and the only messages either accepts are AUTH and CREDIT. An RPC
// frame, an RTS (so no GRANT and no key), a HEADER, a PING or anything
// else before then is a protocol error that closes the connection, as is
// more than kRdmaAuthMaxBytes of handshake. The server, once it has
// verified the client's Finished (and certificate, when it requires one),
// sends an AUTH with kAuthVerified and no bytes; the client hands the
// connection over when that arrives (two round trips in all: ClientHello
// and the server's flight, the client's flight and VERIFIED). A side that
// refuses the other's certificate sends its TLS alert in an AUTH and
// closes; the peer reads the alert and fails naming it. A handshake not
// done within connect_timeout closes the connection. The RDMA path is not
// encrypted: frames, WRITEs and READs stay in the clear (docs/security.md).
//
// Order: control messages may go at any time, but frames (SENDs and WRITE
// WITH IMMEDIATEs) are posted in the order the sender queued them, so a
// small frame behind a large one waits until that one's last WRITE is
// posted; RC delivers them to the receiver in that order.
#ifndef RDMARPC_TRANSPORT_RDMA_PROTOCOL_H_
#define RDMARPC_TRANSPORT_RDMA_PROTOCOL_H_

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

#include "rdmarpc/tunables.h"

namespace rdmarpc::transport::rdma {

inline constexpr uint32_t kConnMagic = 0x52524443;  // "RRDC"
// 3: receives come from a shared receive queue; a peer starts with
// initial_credits and may be lent up to receive_depth.
// 4: a GRANT may cover a segment of its frame (kGrantSegment).
// 5: an idle side gives back credits (kGiveBack).
// 6: standing grants (kGrantStanding, kRtsStanding, kRelease).
// 7: kTooManyPings.
// 8: admission: kGrantHeaderFirst, kHeader, kGrantRefused, kHeaderTooLarge.
// 9: rails: ConnParams names a session and rail; bulk descriptors of
//    format 2 (include/rdmarpc/bulk.h).
// 10: authentication: ConnParams::flags (kConnTls), kAuth.
inline constexpr uint16_t kConnVersion = 10;

// Carried in rdma_cm private data (at most 56 bytes for RC accept).
struct ConnParams {
  uint32_t magic = kConnMagic;
  uint16_t version = kConnVersion;
  // The most credits the peer may ever hold (a credit return beyond it is a
  // protocol error).
  uint16_t receive_depth = 0;
  uint32_t receive_buffer_size = 0;  // Largest SEND the peer may post.
  // Transfers the peer may have under way to this side at once; zero means
  // one.
  uint16_t max_open_grants = 0;
  // Credits the peer holds once connected (receives reserved for it);
  // between 2 and receive_depth.
  uint16_t initial_credits = 0;
  // Rails (transport/rails/railed_connection.h): the connecting side's
  // session, 16 random bytes (all zero: not a rail), this connection's rail
  // number in it (below kMaxRails), and flags: kRailPrimary on the rail
  // that opens the session. The listener's answer leaves them zero.
  // rail_epoch counts the rail's connections in the session (0 first),
  // so a bulk descriptor names which of them lent it.
  std::array<uint8_t, 16> session{};
  uint8_t rail = 0;
  uint8_t rail_flags = 0;
  uint16_t rail_epoch = 0;
  // kConnTls: this side authenticates with TLS before anything else.
  uint16_t flags = 0;
  uint16_t reserved = 0;

  bool is_rail() const {
    for (uint8_t b : session) {
      if (b != 0) return true;
    }
    return false;
  }
};
inline constexpr uint8_t kRailPrimary = 1;
inline constexpr uint16_t kConnTls = 1;  // ConnParams::flags.
// What a connecting side says of the rail it opens (ConnParams' fields).
struct RailHello {
  std::array<uint8_t, 16> session{};  // All zero: not a rail.
  uint8_t rail = 0;
  bool primary = false;
  uint16_t epoch = 0;
};
// ConnParams and ControlMessage travel in host byte order: both ends are
// little-endian (the frame prefix is little-endian by definition).
static_assert(std::endian::native == std::endian::little);
static_assert(sizeof(ConnParams) == 40);  // rdma_cm REQ private data: 56.
static_assert(offsetof(ConnParams, session) == 16);
static_assert(offsetof(ConnParams, version) == 4);

// This side's parameters, as it announces them; `tls`: it authenticates.
inline ConnParams LocalConnParams(bool tls = false) {
  ConnParams params;
  params.flags = tls ? kConnTls : 0;
  params.receive_depth = tunables::kRdmaReceiveDepth;
  params.initial_credits = tunables::kRdmaInitialCredits;
  params.receive_buffer_size = tunables::kRdmaReceiveBufferSize;
  params.max_open_grants = tunables::kRdmaMaxOpenGrants;
  return params;
}

// A listener out of resources for another connection (it could not
// register its share of memory) rejects it with these: its own version, and
// no receives at all.
inline ConnParams RefusalConnParams() {
  ConnParams params;
  return params;  // receive_depth and initial_credits 0.
}
inline bool IsRefusal(const ConnParams& params) {
  return params.magic == kConnMagic && params.version == kConnVersion &&
         params.receive_depth == 0 && params.initial_credits == 0;
}

inline uint32_t OpenGrantsAllowed(const ConnParams& params) {
  return params.max_open_grants == 0 ? 1 : params.max_open_grants;
}

enum class ControlKind : uint8_t {
  kCredit = 1,  // Nothing but the credits in the prefix.
  kRts = 2,
  kGrant = 3,
  kPing = 4,  // Keepalive (transport/keepalive.h): answered with kPong.
  kPong = 5,
  // Credits given back unused (`length` of them) by an idle side.
  kGiveBack = 6,
  // Standing grants given back unused: `length` of them, the oldest first,
  // numbered `transfer` onwards.
  kRelease = 7,
  // The last message before this side closes the connection of a peer that
  // pinged too often (transport/keepalive.h).
  kTooManyPings = 8,
  // A frame's header, asked for by a GRANT with kGrantHeaderFirst: the
  // message's payload, `length` bytes, for transfer `transfer`.
  kHeader = 9,
  // The last message before this side closes the connection of a peer not
  // yet admitted whose call header (`length` bytes) is over kMaxHeaderFirst.
  kHeaderTooLarge = 10,
  // Authentication (see above): TLS handshake bytes, `length` of them
  // attached; with kAuthVerified, none: the server verified the client.
  kAuth = 11,
};
// ControlMessage::flags of an AUTH.
inline constexpr uint16_t kAuthVerified = 1;

// ControlMessage::flags of a GRANT.
inline constexpr uint16_t kGrantSegment = 1;   // Covers a segment only.
inline constexpr uint16_t kGrantStanding = 2;  // For a transfer not yet asked.
// No key: send the header as a HEADER first (admission).
inline constexpr uint16_t kGrantHeaderFirst = 4;
// No key: the header was refused admission; write nothing.
inline constexpr uint16_t kGrantRefused = 8;
// ControlMessage::flags of an RTS: the frame is written into the sender's
// oldest standing grant, whose key is in `rkey`.
inline constexpr uint16_t kRtsStanding = 1;

struct ControlMessage {
  ControlKind kind = ControlKind::kCredit;
  uint8_t dropped = 0;  // GRANT: the payload exceeded the maximum.
  uint16_t flags = 0;   // GRANT: kGrantSegment, kGrantStanding. RTS.
  uint32_t transfer = 0;
  uint32_t header_size = 0;   // RTS.
  uint32_t payload_size = 0;  // RTS.
  uint64_t addr = 0;          // GRANT.
  uint32_t rkey = 0;          // GRANT; RTS with kRtsStanding.
  // GRANT: bytes the sender may write (kGrantHeaderFirst: the header's
  // size). GIVE_BACK: credits given back. RELEASE: standing grants given
  // back. HEADER: the header's size. AUTH: the handshake bytes attached.
  uint32_t length = 0;
};
static_assert(sizeof(ControlMessage) == 32);

// The largest header a HEADER message carries: what the smallest receive
// buffer holds besides the frame prefix and the message itself.
inline constexpr uint64_t kMaxHeaderFirst =
    tunables::kRdmaSmallReceiveBufferSize - tunables::kFramePrefixSize -
    sizeof(ControlMessage);

inline std::optional<ControlMessage> DecodeControl(
    std::span<const std::byte> bytes) {
  if (bytes.size() != sizeof(ControlMessage)) return std::nullopt;
  ControlMessage message;
  std::memcpy(&message, bytes.data(), sizeof(message));
  if (message.kind < ControlKind::kCredit ||
      message.kind > ControlKind::kAuth) {
    return std::nullopt;
  }
  return message;
}

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_PROTOCOL_H_
