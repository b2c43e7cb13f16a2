// ConnectionStats: the counters every connection keeps (frames, bytes,
// system calls, protocol errors, RDMA's credits and completions), and
// kConnectionCounters, each counter's name and help as exporters show it.
#ifndef RDMARPC_CONNECTION_STATS_H_
#define RDMARPC_CONNECTION_STATS_H_

#include <atomic>
#include <cstdint>
#include <iterator>

namespace rdmarpc {

// One rail of a connection of several (rdma://A:P?rails=B:P,
// docs/protocol.md "Rails"), as Channel::rails() and the server's metrics
// show it.
struct RailStats {
  uint8_t rail = 0;
  bool up = false;             // Its connection is up now.
  uint64_t slices = 0;         // Bulk slices completed on it.
  uint64_t bulk_bytes = 0;     // Their bytes.
  uint64_t slices_resent = 0;  // Of those, slices a failed rail had first.
  uint64_t failures = 0;       // Times its connection failed.
  uint64_t joins = 0;          // Times it (re)joined the session.
  uint64_t bytes_sent = 0;     // By its connection now up (0 while down).
  uint64_t bytes_received = 0;
};

// Counters a connection keeps; read from any thread.
struct ConnectionStats {
  std::atomic<uint64_t> frames_sent{0};
  std::atomic<uint64_t> frames_received{0};
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> bytes_received{0};
  // Calls that moved data, to show batching at work: sendmsg and recv on
  // TCP; on RDMA, ibv_post_send (a doorbell on a NIC, a system call under
  // Soft-RoCE) as write_calls.
  std::atomic<uint64_t> write_calls{0};
  std::atomic<uint64_t> read_calls{0};
  std::atomic<uint64_t> oversized_frames_dropped{0};
  // Set when this connection closed because the peer broke the protocol
  // (a malformed frame, a bad credit, grant or immediate value).
  std::atomic<uint64_t> protocol_errors{0};
  // Keepalive: PINGs sent (nothing received for an interval), and 1 when
  // this connection closed because the peer sent nothing for the timeout.
  std::atomic<uint64_t> keepalive_pings{0};
  std::atomic<uint64_t> keepalive_timeouts{0};
  // 1 when this connection closed because the peer pinged too often
  // (TransportOptions::min_ping_interval).
  std::atomic<uint64_t> pings_refused{0};
  // TCP only: 1 when this accepted connection closed because the client's
  // HELLO did not arrive within connect_timeout.
  std::atomic<uint64_t> hello_timeouts{0};
  // Payloads discarded unread (TCP) or never granted (RDMA) because their
  // call was refused on its header, the peer not yet admitted
  // (ServerInterceptor::Admit).
  std::atomic<uint64_t> payloads_refused{0};
  // TCP only: times reading paused because the process's peer memory was
  // full while the peer had not read what was queued for it
  // (include/rdmarpc/peer_memory.h).
  std::atomic<uint64_t> reads_paused{0};
  // 1 when this connection closed because a frame begun did not arrive
  // whole within frame_timeout.
  std::atomic<uint64_t> slow_frames{0};
  // TCP only: frames handed over in the block they were read into, uncopied.
  std::atomic<uint64_t> frames_received_in_place{0};
  // TCP only: bytes copied from the receive staging area into their frame's
  // own block (small frames whole; a large frame's first bytes).
  std::atomic<uint64_t> received_bytes_copied{0};
  // Frames written (TCP) or posted (RDMA) as they were sent, without being
  // queued: a reply from the loop thread with nothing else waiting.
  std::atomic<uint64_t> frames_written_directly{0};
  // Small frames sent from the loop thread while it delivered a batch of
  // frames, that left together after the batch's last one: on TCP copied
  // into one block for one write (tunables::kTcpCoalesceFrameMax), on RDMA
  // chained for one ibv_post_send.
  std::atomic<uint64_t> frames_coalesced{0};
  // Frames that found the queue past max_queued_bytes and, allowed to wait
  // (OutgoingFrame::may_wait), were queued anyway.
  std::atomic<uint64_t> frames_waited_for_room{0};
  // TCP only: waits for the socket to become readable (event mode, and
  // hybrid once quiet), and reads that found it empty (busy, hybrid).
  std::atomic<uint64_t> read_waits{0};
  std::atomic<uint64_t> empty_reads{0};
  // TCP only: waits for a full socket to take more of a batch.
  std::atomic<uint64_t> write_waits{0};
  // RDMA only.
  std::atomic<uint64_t> inline_sends{0};
  std::atomic<uint64_t> rdma_writes{0};  // WRITE WITH IMMEDIATE transfers.
  // Chunks of bulk pulls and pushes (RDMA READ, WRITE) completed: a rail
  // with transfers under way and this count still is making no progress.
  std::atomic<uint64_t> bulk_chunks{0};
  // Transfers whose RTS went out while an earlier one was still under way.
  std::atomic<uint64_t> pipelined_transfers{0};
  // Standing grants (the receiver's grants for transfers not yet asked for):
  // those this side offered, transfers it wrote into one with no round trip,
  // and those it gave back unused once idle.
  std::atomic<uint64_t> standing_grants{0};
  std::atomic<uint64_t> standing_transfers{0};
  std::atomic<uint64_t> standing_grants_released{0};
  // Bytes of those transfers written straight from a MemoryRegistration, and
  // bytes copied into registered staging memory first.
  std::atomic<uint64_t> zero_copy_bytes{0};
  std::atomic<uint64_t> staged_bytes{0};
  // ibv_reg_mr calls for MemoryRegistrations (registration-cache misses).
  std::atomic<uint64_t> registrations{0};
  // Grants from the device's grant pool, and grants registered for
  // themselves (larger than a pool block, or the pool full).
  std::atomic<uint64_t> pooled_grants{0};
  std::atomic<uint64_t> registered_grants{0};
  // Frames received in segments (larger than what may be pinned at once,
  // or than a grant-pool block), and their segments.
  std::atomic<uint64_t> segmented_frames{0};
  std::atomic<uint64_t> segments_received{0};
  std::atomic<uint64_t> segments_sent{0};  // Before each frame's last one.
  std::atomic<uint64_t> credit_stalls{0};  // Flushes held back by credits.
  // Times a local operation (a bulk loan's bind or invalidation, a grant's
  // invalidation) waited for the send queue to drain first: Soft-RoCE's
  // rule (docs/protocol.md section 4); 0 on other devices.
  std::atomic<uint64_t> local_op_waits{0};
  std::atomic<uint64_t> credit_messages{0};  // Explicit CREDIT messages sent.
  // Receive credits lent the peer beyond its initial ones (it was busy), and
  // kept back from it (the shared receive pool was short).
  std::atomic<uint64_t> credits_lent{0};
  std::atomic<uint64_t> credits_withheld{0};
  // Credits given back unused once keepalive found the connection idle,
  // and those an idle peer gave back to the shared receive pool.
  std::atomic<uint64_t> credits_given_back{0};
  std::atomic<uint64_t> credits_taken_back{0};
  std::atomic<uint64_t> rnr_errors{0};
  // Signaled zero-length WRITEs posted so that a window's bind or
  // invalidation learns when the send queue is idle (rxe only).
  std::atomic<uint64_t> completion_probes{0};
  // Completion-channel wake-ups, and batches of completions drained, that
  // had completions of this connection's.
  std::atomic<uint64_t> cq_events{0};
  std::atomic<uint64_t> cq_polls{0};

  // Adds each of `other`'s counts to this one's: a sum over connections,
  // such as a server's over every connection it has had.
  void Add(const ConnectionStats& other);
};

// Every counter of ConnectionStats, with the name and help an exporter
// shows it under (rpc/builtin/prometheus.cc: rdmarpc_transport_NAME_total; base
// units last, as Prometheus names go).
struct ConnectionCounter {
  std::atomic<uint64_t> ConnectionStats::*member;
  const char* name;
  const char* help;
};
inline constexpr ConnectionCounter kConnectionCounters[] = {
    {&ConnectionStats::frames_sent, "frames_sent", "Frames sent."},
    {&ConnectionStats::frames_received, "frames_received", "Frames received."},
    {&ConnectionStats::bytes_sent, "sent_bytes",
     "Bytes sent, framing included."},
    {&ConnectionStats::bytes_received, "received_bytes",
     "Bytes received, framing included."},
    {&ConnectionStats::write_calls, "write_calls",
     "sendmsg calls (TCP) or ibv_post_send calls (RDMA)."},
    {&ConnectionStats::read_calls, "read_calls", "recv calls (TCP)."},
    {&ConnectionStats::oversized_frames_dropped, "oversized_frames_dropped",
     "Frames over the size limit, dropped."},
    {&ConnectionStats::protocol_errors, "protocol_errors",
     "Connections closed for a protocol error."},
    {&ConnectionStats::keepalive_pings, "keepalive_pings",
     "Keepalive PINGs sent (nothing received for an interval)."},
    {&ConnectionStats::keepalive_timeouts, "keepalive_timeouts",
     "Connections closed because the peer sent nothing, not even a keepalive "
     "PONG."},
    {&ConnectionStats::pings_refused, "pings_refused",
     "Connections closed because the peer pinged more often than "
     "min_ping_interval allows (too many pings)."},
    {&ConnectionStats::hello_timeouts, "hello_timeouts",
     "TCP: accepted connections closed because the client's HELLO did not "
     "arrive within connect_timeout."},
    {&ConnectionStats::payloads_refused, "payloads_refused",
     "Payloads discarded unread (TCP) or never granted (RDMA) because their "
     "call was refused on its header before the peer was admitted."},
    {&ConnectionStats::reads_paused, "reads_paused",
     "TCP: times reading paused while the process's peer memory was full and "
     "the peer had not read what was queued for it."},
    {&ConnectionStats::slow_frames, "slow_frames",
     "Connections closed because a frame begun did not arrive whole within "
     "frame_timeout."},
    {&ConnectionStats::frames_received_in_place, "frames_received_in_place",
     "Frames handed over in the block they were read into (TCP)."},
    {&ConnectionStats::received_bytes_copied, "received_copied_bytes",
     "Bytes copied from the receive staging area into their frame's block "
     "(TCP)."},
    {&ConnectionStats::frames_written_directly, "frames_written_directly",
     "Frames sent at once, without being queued."},
    {&ConnectionStats::frames_coalesced, "frames_coalesced",
     "Small frames sent while a batch of received frames was delivered, "
     "that left together after its last (one write, one post)."},
    {&ConnectionStats::frames_waited_for_room, "frames_waited_for_room",
     "Frames queued past the queue's limit because they may wait."},
    {&ConnectionStats::read_waits, "read_waits",
     "Waits for the socket to become readable (TCP)."},
    {&ConnectionStats::empty_reads, "empty_reads",
     "Reads that found the socket empty (TCP, busy or hybrid polling)."},
    {&ConnectionStats::write_waits, "write_waits",
     "Waits for a full socket to take more (TCP)."},
    {&ConnectionStats::inline_sends, "inline_sends",
     "SENDs with their data inline (RDMA)."},
    {&ConnectionStats::rdma_writes, "rdma_writes",
     "WRITE WITH IMMEDIATE transfers (RDMA)."},
    {&ConnectionStats::bulk_chunks, "bulk_chunks",
     "Chunks of bulk pulls and pushes completed (RDMA READ and WRITE)."},
    {&ConnectionStats::pipelined_transfers, "pipelined_transfers",
     "Transfers asked for while an earlier one was under way (RDMA)."},
    {&ConnectionStats::standing_grants, "standing_grants",
     "Standing grants offered to the peer (RDMA)."},
    {&ConnectionStats::standing_transfers, "standing_transfers",
     "Transfers written into a standing grant, with no round trip (RDMA)."},
    {&ConnectionStats::standing_grants_released, "standing_grants_released",
     "Standing grants given back unused once idle (RDMA)."},
    {&ConnectionStats::zero_copy_bytes, "zero_copy_bytes",
     "Bytes written straight from registered user memory (RDMA)."},
    {&ConnectionStats::staged_bytes, "staged_bytes",
     "Bytes copied into registered staging memory before a transfer (RDMA)."},
    {&ConnectionStats::registrations, "registrations",
     "ibv_reg_mr calls for user memory (RDMA)."},
    {&ConnectionStats::pooled_grants, "pooled_grants",
     "Grants from the device's grant pool (RDMA)."},
    {&ConnectionStats::registered_grants, "registered_grants",
     "Grants registered for themselves: too large for a pool block, or the "
     "pool full (RDMA)."},
    {&ConnectionStats::segmented_frames, "segmented_frames",
     "Frames received in segments (RDMA)."},
    {&ConnectionStats::segments_received, "segments_received",
     "Segments received (RDMA)."},
    {&ConnectionStats::segments_sent, "segments_sent",
     "Segments sent before each segmented frame's last (RDMA)."},
    {&ConnectionStats::credit_stalls, "credit_stalls",
     "Flushes held back for lack of credits (RDMA)."},
    {&ConnectionStats::local_op_waits, "local_op_waits",
     "Local operations (window binds, invalidations) that waited for the send "
     "queue to drain: Soft-RoCE's rule (RDMA)."},
    {&ConnectionStats::credit_messages, "credit_messages",
     "Explicit CREDIT messages sent (RDMA)."},
    {&ConnectionStats::credits_lent, "credits_lent",
     "Receive credits lent a busy peer beyond its initial ones (RDMA)."},
    {&ConnectionStats::credits_withheld, "credits_withheld",
     "Receive credits kept back, the shared receive pool short (RDMA)."},
    {&ConnectionStats::credits_given_back, "credits_given_back",
     "Credits given back unused, the connection idle (RDMA)."},
    {&ConnectionStats::credits_taken_back, "credits_taken_back",
     "Credits an idle peer gave back to the shared receive pool (RDMA)."},
    {&ConnectionStats::rnr_errors, "rnr_errors",
     "Receiver-not-ready errors (RDMA; never expected)."},
    {&ConnectionStats::completion_probes, "completion_probes",
     "Signaled zero-length WRITEs that tell when the send queue is idle (RDMA, "
     "rxe)."},
    {&ConnectionStats::cq_events, "cq_events",
     "Completion-channel wake-ups (RDMA)."},
    {&ConnectionStats::cq_polls, "cq_polls",
     "Batches of completions drained (RDMA)."},
};
// A counter added to ConnectionStats and not here would be left out of
// every sum and every export.
static_assert(std::size(kConnectionCounters) * sizeof(std::atomic<uint64_t>) ==
              sizeof(ConnectionStats));

inline void ConnectionStats::Add(const ConnectionStats& other) {
  for (const ConnectionCounter& counter : kConnectionCounters) {
    (this->*counter.member)
        .fetch_add((other.*counter.member).load(std::memory_order_relaxed),
                   std::memory_order_relaxed);
  }
}

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace transport {
using rdmarpc::ConnectionCounter;
using rdmarpc::ConnectionStats;
using rdmarpc::kConnectionCounters;
}  // namespace transport

}  // namespace rdmarpc

#endif  // RDMARPC_CONNECTION_STATS_H_
