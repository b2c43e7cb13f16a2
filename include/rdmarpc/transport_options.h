// TransportOptions: what every transport (tcp://, rdma://, auto://) takes,
// from the limits on what a peer may send to the RDMA device and port to use;
// PollMode: how a connection waits for its peer.
#ifndef RDMARPC_TRANSPORT_OPTIONS_H_
#define RDMARPC_TRANSPORT_OPTIONS_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "rdmarpc/tls_options.h"
#include "rdmarpc/tunables.h"

namespace rdmarpc {

// How a connection waits for what the peer sends. Busy and hybrid modes
// trade a core for latency: no sleep and wake-up per message.
enum class PollMode {
  // The event loop waits: RDMA on the CQ's completion channel, TCP for the
  // socket to become readable (default).
  kEvent,
  // Poll continuously from the event loop (RDMA: the CQ; TCP: non-blocking
  // reads), yielding to its other handlers between turns. Each connection
  // polls on its own: meant for a few connections per loop.
  kBusy,
  // Poll for up to hybrid_spin after activity, then wait as kEvent does.
  kHybrid,
};

// "event", "busy" or "hybrid" (as flags and tools spell them); nullopt for
// anything else.
inline std::optional<PollMode> PollModeFromName(std::string_view name) {
  if (name == "event") return PollMode::kEvent;
  if (name == "busy") return PollMode::kBusy;
  if (name == "hybrid") return PollMode::kHybrid;
  return std::nullopt;
}

// Options shared by every transport.
struct TransportOptions {
  // Largest payload this side accepts; larger ones are dropped and answered
  // with RESOURCE_EXHAUSTED.
  uint64_t max_payload_size = tunables::kDefaultMaxPayloadSize;
  // Bytes of frames queued on a connection and not yet handed to the
  // socket or the send queue: a peer that stops reading stalls the sender,
  // and Send answers RESOURCE_EXHAUSTED past this, so memory stays bounded.
  // One frame of any size is accepted into an empty queue, and a frame that
  // may wait (OutgoingFrame::may_wait) into any.
  uint64_t max_queued_bytes = tunables::kDefaultMaxQueuedBytes;
  // A connect's whole setup. With keepalive on, a server that has not
  // answered within keepalive_timeout, if shorter, is taken for hung (its
  // kernel may still accept): on TCP its HELLO; on RDMA its accept, counted
  // from the connect request and never less than rdma_cm's window to resend
  // a lost request (tunables::kRdmaCmResendWindow, 8.59 s).
  std::chrono::milliseconds connect_timeout = tunables::kConnectTimeout;
  // RDMA only. Bytes of receive grants (memory registered for peers' large
  // frames) this process may hold at once, counted over every connection
  // and checked against each connection's own limit. A payload that would
  // exceed it is dropped and answered with RESOURCE_EXHAUSTED.
  uint64_t max_grant_bytes = tunables::kDefaultMaxGrantBytes;
  PollMode poll_mode = PollMode::kEvent;
  std::chrono::microseconds hybrid_spin{50};
  // Keepalive (transport/keepalive.h): PING after `keepalive_interval` of
  // receiving nothing; close (DEADLINE_EXCEEDED, so calls fail UNAVAILABLE)
  // after `keepalive_timeout`. An interval of 0 turns keepalive off.
  std::chrono::milliseconds keepalive_interval = tunables::kKeepaliveInterval;
  std::chrono::milliseconds keepalive_timeout = tunables::kKeepaliveTimeout;
  // A peer that pings more often than this, more than
  // tunables::kMaxPingStrikes times in a row, is told TOO_MANY_PINGS and
  // disconnected; the peer's keepalive_interval must not be shorter. 0 lets
  // a peer ping as often as it likes (each PING is still answered with at
  // most one PONG on its way at a time).
  std::chrono::milliseconds min_ping_interval = tunables::kMinPingInterval;
  // A frame begun (on RDMA, a large frame granted) must arrive whole within
  // this, or the connection closes (DEADLINE_EXCEEDED): a peer trickling a
  // byte at a time (slowloris) holds a connection no longer. Checked at each
  // keepalive tick, so within an interval of it, and only with keepalive
  // on; 0 turns it off. At the default, a 64 MiB frame needs 6.7 MB/s.
  std::chrono::milliseconds frame_timeout = tunables::kFrameTimeout;
  // RDMA: the QP's local ACK timeout exponent (4.096 us << it per try, see
  // include/rdmarpc/tunables.h). Lower recovers a lost packet sooner on a lossy
  // link (docs/reliability.md measures 14 against 16), and gives up on a
  // stalled peer sooner too.
  uint8_t rdma_ack_timeout = tunables::kRdmaAckTimeout;
  // How many times the QP resends after an ACK timeout or a sequence NAK
  // before it fails the connection (3 bits; set by the connecting side).
  // Per the spec 7 is seven tries; rxe reads 7 as "forever", which rides out
  // heavy reordering (docs/reliability.md) and leaves a dead link to
  // keepalive.
  uint8_t rdma_retry_count = tunables::kRdmaRetryCount;
  // RDMA: bytes the process's receive and send pools may register in all
  // (checked by the group that would grow them); see
  // tunables::kDefaultRdmaMaxPoolBytes.
  uint64_t rdma_max_pool_bytes = tunables::kDefaultRdmaMaxPoolBytes;
  // RDMA: a large frame lands in a block of the device's grant pool, behind
  // a memory window bound for it (no ibv_reg_mr per frame), where the device
  // has type 2 windows. False registers every grant for itself.
  bool rdma_pooled_grants = true;
  // RDMA: which device, port and GID a connection or listener uses. Empty:
  // the device that owns the route to the peer (or the listener's address),
  // as rdma_cm picks it. Otherwise the source (or bind) address is the one
  // of GID `rdma_gid_index` of that port (-1: its first RoCE v2 GID holding
  // an IP address), and a connection whose queue pair ends up elsewhere
  // fails with the reason. URI: ?device=rxe1&port_num=1&gid_index=1.
  std::string rdma_device;
  uint8_t rdma_port_num = 1;
  int rdma_gid_index = -1;
  // RDMA: the IP type of service the queue pair's packets carry (its GRH
  // traffic class on RoCE), 0 to 255; -1 leaves rdma_cm's default. URI:
  // ?tos=104.
  int rdma_tos = -1;
  // TLS 1.3 (rdmarpc/tls_options.h). Set, every TCP connection is TLS,
  // tcp:// as well as tls://, and every RDMA connection is authenticated
  // with the same certificates before it is used (its data path is not
  // encrypted: docs/security.md); nothing falls back to plaintext, and a
  // peer without TLS is refused. Unset, tls:// still means TLS with the
  // defaults: a client trusts the system's CAs; a server, having no
  // certificate, fails.
  std::optional<TlsOptions> tls;
};

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace transport {
using rdmarpc::PollMode;
using rdmarpc::PollModeFromName;
using rdmarpc::TransportOptions;
}  // namespace transport

}  // namespace rdmarpc

#endif  // RDMARPC_TRANSPORT_OPTIONS_H_
