// Every tunable default of rdmarpc, in one place, with its invariants checked
// at compile time. Options structs take their defaults from here.
#ifndef RDMARPC_TUNABLES_H_
#define RDMARPC_TUNABLES_H_

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace rdmarpc::tunables {

// --- Framing ---------------------------------------------------------------
// Fixed frame prefix: magic, version, type, header and payload lengths.
inline constexpr size_t kFramePrefixSize = 16;
// A call header carries names, a status message and descriptors: small. A
// larger one is a malformed frame, not a large message.
inline constexpr uint32_t kMaxCallHeaderSize = 64 * 1024;
// Largest payload a receiver accepts by default (the KV example stores 64 MiB
// values). A frame's payload length is a u32 on the wire.
inline constexpr uint64_t kDefaultMaxPayloadSize = 64ull << 20;
inline constexpr uint64_t kMaxPayloadSizeLimit = (1ull << 32) - 1;
// Slices in one outgoing frame's payload (scatter/gather without a copy).
inline constexpr size_t kMaxPayloadSlices = 4;

// An outgoing call header up to this size is kept inside its frame, not in a
// pooled block: every request whose service and method names come to 72
// bytes or fewer, and every response without a long status message.
inline constexpr size_t kInlineHeaderCapacity = 160;

static_assert(kMaxCallHeaderSize >= 1024, "headers must fit long names");
static_assert(kInlineHeaderCapacity % 16 == 0 &&
                  kInlineHeaderCapacity <= kMaxCallHeaderSize,
              "the inline header is copied in 16-byte steps");
static_assert(kDefaultMaxPayloadSize <= kMaxPayloadSizeLimit,
              "payload length must fit the u32 prefix field");

// --- Typed calls -----------------------------------------------------------
// A server's typed handler (include/rdmarpc/typed_call.h) gets request and
// response objects kept from an earlier call of its method that ended on
// the same thread, cleared: their strings and repeated fields keep their
// capacity, so a steady stream of calls parses and fills them without
// allocating. At most kTypedSpareMessages pairs per thread and method, and
// only pairs whose request and response each came to at most
// kTypedSpareMessageBytes on the wire: what they hold stays small. A typed
// client keeps its callbacks' responses the same way, as many per thread and
// response type.
inline constexpr size_t kTypedSpareMessages = 4;
inline constexpr size_t kTypedSpareMessageBytes = 4096;

static_assert(kTypedSpareMessages >= 1 && kTypedSpareMessages <= 64,
              "a few pairs cover the calls a thread has open at once");
static_assert(kTypedSpareMessageBytes * kTypedSpareMessages <=
                  size_t{256} * 1024,
              "the spares of one method on one thread stay under 256 KiB "
              "of wire bytes");

// --- Memory ----------------------------------------------------------------
// Released large blocks (received frames and grants of 64 KiB and more,
// base/large_block.h) kept for reuse, process-wide, by mapped capacity (a
// power of two): a kept block skips the kernel's page faults and zeroing.
inline constexpr uint64_t kLargeBlockCacheBytes = 256ull << 20;
// Of which each thread first keeps a few of its own (at most this many
// blocks, this many bytes), so a block stays with the core that reuses it.
inline constexpr int kLargeBlockThreadBlocks = 4;
inline constexpr size_t kLargeBlockThreadBytes = 512 << 10;
static_assert(kLargeBlockCacheBytes >=
                  2 * std::bit_ceil(kDefaultMaxPayloadSize +
                                    kMaxCallHeaderSize),
              "two largest frames must fit: one being read or written, one "
              "just released");

// --- TCP transport ---------------------------------------------------------
// Receive staging area: one read() can bring in many small frames, or the
// whole of a 64 KiB message.
inline constexpr size_t kTcpReceiveChunk = 128 << 10;
// Frames at most this large are copied out of the staging area; larger ones
// are read straight into their own block.
inline constexpr size_t kTcpCopyOutLimit = 16 << 10;
// A frame at least this large that the staging area holds from where it
// starts, with nothing staged behind it, is received in place: the staging
// block becomes the frame's and a fresh one replaces it. The bound keeps a
// frame from pinning a staging block many times its size.
inline constexpr size_t kTcpReceiveInPlaceMin = kTcpReceiveChunk / 4;
// After the prefix of a frame too large to receive in place, the next read
// into the staging area takes at most this much: the next frame's prefix
// and header and a little more, when that frame is large too, so that its
// payload is read straight into its block rather than up to a staging
// area's worth copied out. (Small frames behind it cost one short read.)
inline constexpr size_t kTcpLargeFrameHeadRead = 4 << 10;
static_assert(kTcpLargeFrameHeadRead >= kFramePrefixSize + 1024 &&
                  kTcpLargeFrameHeadRead <= kTcpCopyOutLimit,
              "a head read holds a typical header, and is a small copy");

static_assert(kTcpReceiveChunk >= kFramePrefixSize + kTcpCopyOutLimit,
              "a copied-out frame must fit the staging area");
static_assert(kTcpReceiveInPlaceMin > kTcpCopyOutLimit &&
                  kTcpReceiveInPlaceMin >= kTcpReceiveChunk / 4,
              "in place: frames too large to copy out, at least a quarter "
              "of the block they keep");
static_assert(kLargeBlockThreadBlocks >= 4 &&
                  kLargeBlockThreadBytes >= 4 * kTcpReceiveChunk,
              "each side of an in-process echo keeps its staging blocks and "
              "a 64 KiB frame's block");

// Frames the loop thread sends while it delivers the frames of one read
// (replies, a closed loop's next requests) leave together after the read's
// last one. Those of at most kTcpCoalesceFrameMax bytes (prefix, header and
// payload) are copied into one block of kTcpCoalesceCapacity bytes as they
// are sent, and the frame is released at once: a copy of a few dozen bytes
// costs less than moving a frame (a few hundred bytes of struct) into the
// queue, and the batch is one piece to write instead of three per frame.
// Larger frames, and those past the block's capacity, queue as before.
inline constexpr size_t kTcpCoalesceFrameMax = 512;
inline constexpr size_t kTcpCoalesceCapacity = 16 << 10;
static_assert(kTcpCoalesceFrameMax >= kFramePrefixSize + 64 &&
                  kTcpCoalesceCapacity >= 16 * kTcpCoalesceFrameMax &&
                  kTcpCoalesceCapacity <= (32 << 10),
              "a coalescing block takes many small frames, and is a pooled "
              "block (base/buffer_pool.h: at most 32 KiB)");

// TLS on TCP (transport/tcp/tcp_tls.cc). A batch's small pieces (prefixes,
// headers, small payloads) are copied into records of kTlsRecordPlaintext
// bytes, TLS's largest; ciphertext is made at most kTlsCipherAhead ahead of
// what the socket has taken (a batch's first record is sent alone, and each
// send after it may carry twice as much), and read kTlsReadChunk at a time.
inline constexpr size_t kTlsRecordPlaintext = 16 << 10;
inline constexpr size_t kTlsCipherAhead = 256 << 10;
inline constexpr size_t kTlsReadChunk = 64 << 10;
static_assert(kTlsRecordPlaintext == 16384,
              "TLS 1.3 carries at most 2^14 bytes of plaintext a record");
static_assert(kTlsCipherAhead >= 4 * kTlsRecordPlaintext &&
                  kTlsReadChunk >= kTlsRecordPlaintext + 256,
              "several records ahead; a read takes a whole record and its "
              "overhead");

// Bytes a connection queues for a peer that does not keep up, before Send
// refuses more (TransportOptions::max_queued_bytes).
inline constexpr uint64_t kDefaultMaxQueuedBytes = 256ull << 20;
static_assert(kDefaultMaxQueuedBytes >=
                  2 * (kDefaultMaxPayloadSize + kMaxCallHeaderSize),
              "largest frames must queue behind one another");

// Busy and hybrid polling (TransportOptions::poll_mode): non-blocking reads
// of an empty socket between trips through the event loop. Each empty read
// is a system call, and a trip adds a non-blocking epoll_wait; the turn's
// length is the longest a timer or another handler on the loop waits.
inline constexpr uint32_t kTcpBusyReadsPerTurn = 32;
static_assert(kTcpBusyReadsPerTurn >= 1 && kTcpBusyReadsPerTurn <= 1024,
              "a busy loop must still yield to timers and other handlers");

// Close() first writes what is already queued; a peer that does not read is
// cut off after this long.
inline constexpr std::chrono::milliseconds kCloseFlushTimeout{1000};

// Keepalive (transport/keepalive.h), both transports: a side that has
// received nothing for an interval sends PING, which the peer answers with
// PONG; one that has received nothing for the timeout closes the connection.
// A dead peer is noticed within timeout + interval (10 s by default), idle or
// busy, on either side.
inline constexpr std::chrono::milliseconds kKeepaliveInterval{2000};
inline constexpr std::chrono::milliseconds kKeepaliveTimeout{8000};
static_assert(kKeepaliveTimeout >= 2 * kKeepaliveInterval,
              "a peer gets at least one PING, and time to answer it, before "
              "the connection is declared dead");
static_assert(kKeepaliveTimeout + kKeepaliveInterval <=
                  std::chrono::seconds(10),
              "a dead peer is noticed within 10 s by default");
// A peer's PING is answered with PONG, but a peer that pings more often than
// every kMinPingInterval more than kMaxPingStrikes times in a row is told
// TOO_MANY_PINGS and cut off (gRPC's ping strikes): a legitimate peer pings
// once per its keepalive interval of silence, so a peer's
// keepalive_interval must not be set below the other side's
// min_ping_interval.
inline constexpr std::chrono::milliseconds kMinPingInterval{50};
inline constexpr uint32_t kMaxPingStrikes = 2;
static_assert(kMinPingInterval <= kKeepaliveInterval / 10,
              "a peer with the default keepalive never comes near the limit");
// A frame begun must arrive whole within this (TransportOptions::
// frame_timeout), checked at keepalive ticks.
inline constexpr std::chrono::milliseconds kFrameTimeout{10000};
static_assert(kFrameTimeout >= kKeepaliveTimeout,
              "a frame is given at least as long as a silent peer");
// Admission (include/rdmarpc/interceptor.h): the payload read whole from a
// peer none of whose calls has been admitted (ServerOptions::
// max_unadmitted_frame_bytes), and the refusals after which its connection
// is closed.
inline constexpr uint64_t kMaxUnadmittedFrameBytes = 4 << 10;
inline constexpr uint32_t kMaxAdmissionFailures = 8;

// --- RDMA transport --------------------------------------------------------
// Receive credits. A connection's receives come from its completion group's
// shared receive queue (transport/rdma/completion_group.h): a peer starts
// with kRdmaInitialCredits of them reserved for it, and is lent more, up to
// kRdmaReceiveDepth, while it keeps them busy and the pool has buffers to
// spare. An idle connection therefore pins kRdmaInitialCredits receive
// buffers, not kRdmaReceiveDepth.
inline constexpr uint32_t kRdmaReceiveDepth = 64;
inline constexpr uint32_t kRdmaInitialCredits = 3;
// A completion group's receive pool (and its send-staging pool) grows by
// chunks of this many buffers, registered at once.
inline constexpr uint32_t kRdmaPoolChunkBuffers = 64;
// After its receive pool failed to grow (a cap, the memlock limit), a group
// lends no more receives, and tries to grow again after this long: memory
// others held may be free by then.
inline constexpr std::chrono::milliseconds kRdmaReceiveGrowthRetry{1000};
// Its send-staging pool grows by chunks of this many slots; the first is
// registered with the group, so that a frame too large to go inline always
// has slots to wait for (kept small: every group pins it, busy or not).
inline constexpr uint32_t kRdmaSendChunkBuffers = 8;
// A process that may lock (pin) less than kRdmaSmallPinnedBudget bytes
// (RLIMIT_MEMLOCK without CAP_IPC_LOCK: Debian's default is 8 MiB) receives
// into buffers of kRdmaSmallReceiveBufferSize: an idle connection then pins
// 12 KiB, not 48 KiB, and frames over 4 KiB travel by rendezvous.
inline constexpr uint64_t kRdmaSmallPinnedBudget = 64ull << 20;
inline constexpr uint32_t kRdmaSmallReceiveBufferSize = 4096;
// Connections whose QPs share one CQ, one completion channel and one shared
// receive queue; a loop with more connections opens another group. The CQ
// holds every completion its QPs can produce at once (each QP's whole send
// queue, flushed when the link dies, plus every posted shared receive), so
// this also bounds its size: 128 * (128 + 64) + slack = 24,640 entries,
// under rxe's 32,767 and any hardware device's limit.
inline constexpr uint32_t kRdmaConnectionsPerGroup = 128;
// Bytes the completion groups' receive and send pools of one process may
// register in all, by default (TransportOptions::rdma_max_pool_bytes): past
// it a pool stops growing, busy peers are lent no more credits, and new
// connections are refused. A process that may lock less is held to that
// first, by the kernel.
inline constexpr uint64_t kDefaultRdmaMaxPoolBytes = 1ull << 30;
// Frames up to this size (prefix included) travel as one SEND; larger ones
// by rendezvous and RDMA WRITE WITH IMMEDIATE.
inline constexpr uint32_t kRdmaReceiveBufferSize = 16 * 1024;
// Send queue depth, and send-ring slots (one per outstanding work request).
inline constexpr uint32_t kRdmaSendDepth = 128;
// Selective signaling: every Nth send is signaled; its completion frees the
// slots of all sends before it (RC completes a send queue in order).
inline constexpr uint32_t kRdmaSignalEvery = 32;
// Busy and hybrid polling: empty CQ polls between trips through the event
// loop. A trip (the scheduler's locks and a non-blocking epoll_wait, so
// timers and other handlers run) costs far more than an empty poll, and adds
// its length to the time a completion waits to be seen.
inline constexpr uint32_t kRdmaBusyPollsPerYield = 64;
// CQ events are acknowledged in batches (ibv_ack_cq_events takes a lock).
inline constexpr uint32_t kRdmaCqEventAckBatch = 16;
// RNR never happens while credits are honoured. With no RNR retry at all, a
// single RNR NAK would fail the connection and be counted (rnr_errors), so
// tests asserting zero RNR errors prove no RNR ever occurred.
inline constexpr uint8_t kRdmaRnrRetry = 0;
inline constexpr int kRdmaCmTimeoutMs = 5000;
// The QP's local ACK timeout, as the verbs exponent: 4.096 us << 16 = 268 ms
// before a packet with no ACK is sent again, and kRdmaRetryCount such tries
// (about 1.9 s without progress) before the QP fails the connection.
inline constexpr uint8_t kRdmaAckTimeout = 16;
// Finite: rxe reads 7 as "retry forever", which would hide a dead link.
inline constexpr uint8_t kRdmaRetryCount = 6;
static_assert(kRdmaAckTimeout >= 12 && kRdmaAckTimeout <= 20,
              "between 17 ms and 4.3 s per try");
static_assert(kRdmaRetryCount < 7, "7 means retry forever");
// RDMA READs a queue pair may have outstanding, each way (bulk pulls,
// include/rdmarpc/bulk.h): both sides offer this much, or their device's
// max_qp_init_rd_atom and max_qp_rd_atom if lower, and the connection takes
// the smaller of the two offers (rdma_accept(3)). rxe allows 128; 16 READs
// of kBulkChunkSize keep 16 MiB in flight, past any link's bandwidth-delay
// product in a datacenter.
inline constexpr uint8_t kRdmaMaxReadDepth = 16;
static_assert(kRdmaMaxReadDepth >= 1);
// A connection whose port goes down (IBV_EVENT_PORT_ERR) and is still down
// this much later is closed: longer than the QP's retries (above) ride out.
inline constexpr std::chrono::milliseconds kRdmaPortDownGrace{3000};
static_assert(kRdmaPortDownGrace.count() >
                  7 * ((4096LL << kRdmaAckTimeout) / 1000000),
              "a flap the QP's retries survive must not close the connection");
// Releasing a connection's QP, windows and id longer than this (the kernel
// held the event loop's thread) is logged as a warning.
inline constexpr std::chrono::milliseconds kRdmaSlowTeardown{100};
// A listener whose device was removed tries this often to listen again on
// the same address and port (a device that comes back is used again).
inline constexpr std::chrono::milliseconds kRdmaRelistenInterval{1000};
// The most TLS handshake bytes an RDMA peer may send before it is
// authenticated (transport/rdma/protocol.h, Authentication): a certificate
// chain of a few certificates is 2 to 8 KiB.
inline constexpr uint64_t kRdmaAuthMaxBytes = uint64_t{64} << 10;
// Largest gather list: a header and every payload slice.
inline constexpr uint32_t kRdmaMaxSendSge = 1 + kMaxPayloadSlices;
// Inline data asked of the device per send (it may grant less, or none).
// Frames up to this size are staged in a dense area, one entry per work
// request of a chain, rather than in their 16 KiB-apart send-ring slots.
inline constexpr uint32_t kRdmaMaxInline = 256;
// Large payload bytes outside every MemoryRegistration are copied into a
// registered bounce pool (allocated on a connection's first such send) and
// written from there, this many chunks in flight at once.
inline constexpr uint32_t kRdmaBounceChunkSize = 1 << 20;
inline constexpr uint32_t kRdmaBounceChunks = 4;
// A loop's connections share its bounce chunks, registered one at a time
// while every one is busy (so a process that may pin little still sends
// through one), up to kRdmaGroupBounceChunks. One
// connection holds at most kRdmaBounceChunks, so a peer that stops
// acknowledging (until its QP times out) leaves the others half of them.
inline constexpr uint32_t kRdmaGroupBounceChunks = 2 * kRdmaBounceChunks;
// Receive grants (registered memory for peers' large frames) a process holds
// at once, over all its connections.
inline constexpr uint64_t kDefaultMaxGrantBytes = 1ull << 30;
// Large frames a peer may have under way to us at once (grants open or
// answered): each one's RTS, zeroing and registration overlap the WRITEs of
// the one before. Each holds up to a largest frame of registered memory.
inline constexpr uint32_t kRdmaMaxOpenGrants = 2;
// Bytes in one RDMA WRITE: below any port's max_msg_sz (at least 2^31).
inline constexpr uint32_t kRdmaMaxWriteSize = 1u << 30;
// Grants come from the device's grant pool (transport/rdma/grant_pool.h):
// blocks of a power of two from kRdmaGrantPoolMinBlock to
// kRdmaGrantPoolMaxBlock bytes, registered once, kRdmaGrantPoolChunkSize at
// a time (one block, when a block is larger), at most kRdmaGrantPoolMaxBytes
// per device. A larger frame, or one the pool cannot hold, is granted
// memory registered for it alone.
inline constexpr uint32_t kRdmaGrantPoolMinBlock = 32u << 10;
inline constexpr uint32_t kRdmaGrantPoolMaxBlock = 4u << 20;
inline constexpr uint32_t kRdmaGrantPoolChunkSize = 1u << 20;
inline constexpr uint64_t kRdmaGrantPoolMaxBytes = 64ull << 20;
// A frame larger than the receiver may pin at once, or than a grant-pool
// block (with pooled grants), is granted in segments of kRdmaSegmentSize
// (fewer when less may be pinned, never fewer than kRdmaMinSegment: below
// that the payload is dropped for the memory limit).
inline constexpr uint32_t kRdmaSegmentSize = 1u << 20;
inline constexpr uint32_t kRdmaMinSegment = 32u << 10;
// Standing grants (transport/rdma/protocol.h): once two large frames of one
// size class in a row from a peer have landed, its receiver grants the
// peer's next one before it is asked, up to kRdmaStandingGrants per
// connection, each a grant-pool block of that size class. A peer idle for
// a keepalive interval gives back those it holds. Twice the transfers a
// peer may have under way: with 2, a 1 MiB stream still asked by RTS for
// about one message in five (both used by the transfers under way, the
// next not yet back); with 4, for the first ones only (docs/benchmarks.md).
inline constexpr uint32_t kRdmaStandingGrants = 2 * kRdmaMaxOpenGrants;
static_assert(kRdmaStandingGrants >= 1 && kRdmaStandingGrants <= 64,
              "each pins up to a grant-pool block per connection");

static_assert(kRdmaReceiveDepth >= 4 && kRdmaReceiveDepth <= 65535,
              "credits travel in a u16; one is held back for CREDIT");
static_assert(kRdmaInitialCredits >= 2 &&
                  kRdmaInitialCredits <= kRdmaReceiveDepth,
              "a peer needs one credit to send with and one held back for "
              "CREDIT");
static_assert(kRdmaSmallReceiveBufferSize >= kFramePrefixSize + 64 &&
                  kRdmaSmallReceiveBufferSize <= kRdmaReceiveBufferSize,
              "a small receive buffer still holds any control message");
static_assert(kRdmaPoolChunkBuffers >= kRdmaReceiveDepth,
              "one chunk holds any single connection's receives");
static_assert(kRdmaSendChunkBuffers >= 1 &&
                  (kRdmaConnectionsPerGroup * kRdmaSendDepth) %
                          kRdmaSendChunkBuffers ==
                      0,
              "the send pool grows in whole chunks to its most");
static_assert(kRdmaConnectionsPerGroup *
                          (uint64_t{kRdmaSendDepth} + kRdmaReceiveDepth) +
                      kRdmaPoolChunkBuffers <
                  32767,
              "a group's CQ fits rxe's largest (32,767 entries)");
static_assert(kRdmaBusyPollsPerYield >= 1 && kRdmaBusyPollsPerYield <= 4096,
              "a busy loop must still yield to timers and other handlers");
static_assert(kRdmaSignalEvery <= kRdmaSendDepth / 2,
              "every window of the send queue must hold a signaled send");
static_assert(kRdmaMaxInline >= kFramePrefixSize &&
                  kRdmaMaxInline <= kRdmaReceiveBufferSize,
              "an inline send holds at least a prefix and fits a receive");
static_assert(kRdmaReceiveBufferSize >= kFramePrefixSize + 64,
              "a receive buffer must hold any control message");
static_assert(kRdmaBounceChunkSize > kRdmaReceiveBufferSize,
              "runs that fit a send-ring slot are staged there");
static_assert(kRdmaBounceChunks >= 2 && kRdmaBounceChunks < kRdmaSendDepth,
              "copying the next chunk overlaps writing the last");
static_assert(kRdmaMaxWriteSize >= kRdmaBounceChunkSize);
static_assert(kRdmaMaxOpenGrants >= 1 && kRdmaMaxOpenGrants <= 16 &&
                  kRdmaMaxOpenGrants < kRdmaReceiveDepth / 2,
              "each open transfer holds a receive for its RTS or landing");
static_assert(kLargeBlockCacheBytes >=
                  kRdmaMaxOpenGrants * std::bit_ceil(kDefaultMaxPayloadSize +
                                                     kMaxCallHeaderSize),
              "a connection's open grants of largest frames must fit the "
              "large-block cache");
static_assert(kRdmaMinSegment > kRdmaReceiveBufferSize &&
                  kRdmaMinSegment <= kRdmaSegmentSize &&
                  kRdmaSegmentSize <= kRdmaGrantPoolMaxBlock,
              "a segment is a large frame's worth, and fits a pool block");
static_assert(std::has_single_bit(kRdmaGrantPoolMinBlock) &&
                  std::has_single_bit(kRdmaGrantPoolMaxBlock) &&
                  kRdmaGrantPoolMinBlock <= kRdmaGrantPoolMaxBlock,
              "grant-pool blocks come in powers of two");
static_assert(kRdmaGrantPoolMinBlock > kRdmaReceiveBufferSize,
              "a grant is for a frame larger than a receive buffer");
static_assert(kRdmaGrantPoolChunkSize % kRdmaGrantPoolMinBlock == 0 &&
                  kRdmaGrantPoolMaxBytes >=
                      2 * std::max<uint64_t>(kRdmaGrantPoolChunkSize,
                                             kRdmaGrantPoolMaxBlock),
              "a chunk holds whole blocks; the pool holds two largest");
static_assert(kDefaultMaxGrantBytes >=
                  kDefaultMaxPayloadSize + kMaxCallHeaderSize,
              "a largest frame must fit the grant budget on its own");

// --- Bulk (include/rdmarpc/bulk.h)
// -------------------------------------------- Loans a call may carry
// (CallOptions::bulk), a connection may hold, and the process may hold; past
// each, the call fails RESOURCE_EXHAUSTED naming it. On RDMA each loan is a
// memory window, which the device counts (max_mw).
inline constexpr size_t kMaxBulkLoansPerCall = 16;
inline constexpr size_t kMaxBulkLoansPerConnection = 4096;
inline constexpr size_t kMaxBulkLoans = 65536;
// A loan's length, at most (the descriptor's field is 64 bits; 2^48 keeps
// offset + length far from overflow).
inline constexpr uint64_t kMaxBulkLength = 1ull << 48;
// Pulls and pushes move in chunks of at most this many bytes, at most
// kBulkWindowChunks of them in flight per connection, so a call's frame
// queued during a 64 MiB pull goes out after at most that many chunks.
inline constexpr uint32_t kBulkChunkSize = 1u << 20;
inline constexpr uint32_t kBulkWindowChunks = 4;
static_assert(kMaxBulkLoansPerCall <= kMaxBulkLoansPerConnection &&
              kMaxBulkLoansPerConnection <= kMaxBulkLoans);
static_assert(kMaxCallHeaderSize >=
                  (16 << 10) + (16 << 10) + 128 + kMaxBulkLoansPerCall * 32 + 4,
              "a request's names, headers and descriptors fit one header");
static_assert(kBulkChunkSize <= kDefaultMaxPayloadSize &&
              kBulkWindowChunks >= 2);
// On a device that checks a memory window against its memory region only
// (Soft-RoCE), each loan's window is bound on a region of exactly the lent
// bytes; a protection domain keeps this many of those regions for the next
// loan of the same bytes, so that an application lending the same buffers
// call after call registers each once. Regions only bound windows on: none
// is reachable by the peer without a live loan.
inline constexpr size_t kMaxExactBulkRegions = 1024;
static_assert(kMaxExactBulkRegions >= kMaxBulkLoansPerCall);
// A call that lent windows and that the client cancels (or whose deadline
// passes) completes once the server has answered that it touches them no
// more (its READs and WRITEs under way ended), so that none meets a dead
// key and breaks the connection; a server that does not answer within this
// has its windows invalidated anyway (ChannelStats::bulk_releases_timed_out).
inline constexpr std::chrono::milliseconds kBulkReleaseGrace{5000};

// --- Rails (transport/rails/railed_connection.h)
// ------------------------------ A connection of several rails
// (rdma://A:P?rails=B:P) has at most this many queue pairs; a bulk descriptor
// lists a key per rail.
inline constexpr size_t kMaxRails = 4;
// Pulls and pushes of more than kRailSliceThreshold bytes are sliced over
// every healthy rail, at most kRailSlicesInFlight per rail, in slices of
// whole kBulkChunkSize chunks that fill every rail's (a 4 MiB pull over two
// rails: four of 1 MiB), of at most kRailSliceSize; a rail that fails has
// its slices resent on the others. Smaller ones go whole on the primary.
inline constexpr uint64_t kRailSliceThreshold = 1 << 20;
inline constexpr uint64_t kRailSliceSize = 4 << 20;
inline constexpr uint32_t kRailSlicesInFlight = 2;
// A rail that failed is connected again after this, and again after each
// failure, while its connection lives.
inline constexpr std::chrono::milliseconds kRailRejoinDelay{1000};
// A rail other than the primary with slices or window binds outstanding
// and no progress for this long (no chunk, slice or bind completed on it) is
// taken for dead: closed at once, its slices sent on the others. No sooner
// than its QP's retries would give up (7 tries of 268 ms): a rail whose
// packets are being sent again is not dead, and a watch at 1 s took healthy
// rails of a lossy Soft-RoCE link for dead in 3 runs of 4. Soft-RoCE under
// load stretches those retries past 3 s; this bounds them.
inline constexpr std::chrono::milliseconds kRailStallTimeout{2000};
static_assert(kRailStallTimeout.count() >=
                  (kRdmaRetryCount + 1) *
                      ((4096LL << kRdmaAckTimeout) / 1000000),
              "a rail its QP still retries must not be taken for dead");
static_assert(kMaxRails >= 2 && kMaxRails <= 16);
static_assert(kMaxCallHeaderSize >=
                  (16 << 10) + (16 << 10) + 128 +
                      kMaxBulkLoansPerCall * (32 + 16 * kMaxRails) + 4,
              "a request's names, headers and railed descriptors fit");
static_assert(kRailSliceSize >= kBulkChunkSize &&
              kRailSliceSize % kBulkChunkSize == 0 &&
              kRailSliceThreshold <= kRailSliceSize &&
              kRailSlicesInFlight >= 1);

// --- RPC ---------------------------------------------------------------------
// Status messages longer than this are truncated, so a response header
// always fits kMaxCallHeaderSize.
inline constexpr size_t kMaxStatusMessageSize = 4096;
// Service plus method name of a request.
inline constexpr size_t kMaxMethodNameSize = 16 << 10;
// A deadline further away than this is no deadline (it also keeps
// now + timeout from overflowing the clock's range).
inline constexpr std::chrono::hours kMaxTimeout{24 * 365};

// Metadata (include/rdmarpc/metadata.h), each block as limits count it (keys,
// values and 32 bytes an entry): what a sender refuses to send above, and what
// a receiver accepts by default (gRPC's default too). The count bounds the
// encoded block, whose framing is at most 12 bytes an entry.
inline constexpr size_t kMaxMetadataSize = 16 << 10;
inline constexpr size_t kDefaultMaxMetadataSize = 8 << 10;

// A channel's request window (rdmarpc::ChannelOptions::
// max_request_bytes_in_flight): a new unary call's request is sent while
// fewer than this many request bytes are in flight (sent, not yet answered),
// or fewer than kMinCallsInFlight calls; later calls wait, in order, in the
// channel. Deeper than this, a loopback TCP pair only fills socket buffers:
// 64 KiB calls peak at 4-8 in flight, 1 MiB and 4 MiB calls at 2 (the size x
// load grid of docs/benchmarks.md), and past a few MiB the receive queues
// hit zero windows, drops and retransmits. 512 KiB is 40 us at 100 Gb/s,
// several datacenter round trips.
inline constexpr uint64_t kDefaultMaxRequestBytesInFlight = 512 << 10;
// Two calls, so the request of one travels while the other's response does.
inline constexpr uint32_t kMinCallsInFlight = 2;
static_assert(kMinCallsInFlight >= 2,
              "one call in flight would serialise the two directions");
static_assert(kDefaultMaxRequestBytesInFlight >= 64 << 10,
              "small calls must pipeline deeply: 16 B calls run at 128+ in "
              "flight");

static_assert(kMaxStatusMessageSize + 64 <= kMaxCallHeaderSize);
static_assert(kMaxMethodNameSize + 64 <= kMaxCallHeaderSize);
static_assert(kDefaultMaxMetadataSize <= kMaxMetadataSize);
// A request's names and headers, or a response's status message, headers
// and trailers, fit one call header together.
static_assert(kMaxMethodNameSize + kMaxMetadataSize + 128 <=
                  kMaxCallHeaderSize &&
              kMaxStatusMessageSize + 2 * kMaxMetadataSize + 128 <=
                  kMaxCallHeaderSize);

// Streams (docs/protocol.md, "Streams"). Each side of a streaming call may
// send this many messages, and this many payload bytes in all, before the
// reader's first WINDOW: part of the protocol, so both ends must agree. A
// window lets the next message go whole even when it alone is larger than
// the bytes left: a reader bounds its memory by its window plus one message.
inline constexpr uint64_t kInitialStreamWindowMessages = 16;
inline constexpr uint64_t kInitialStreamWindowBytes = 4ull << 20;
static_assert(kInitialStreamWindowMessages >= 2,
              "a writer must be able to keep one message in flight behind "
              "another");
static_assert(kInitialStreamWindowBytes >= 64 << 10);

// --- Channel ---------------------------------------------------------------
inline constexpr std::chrono::milliseconds kInitialReconnectBackoff{100};
inline constexpr std::chrono::milliseconds kMaxReconnectBackoff{5000};
inline constexpr double kReconnectBackoffMultiplier = 1.6;
// Event-loop threads all of a process's Channels share
// (rpc/client/client_loops.h): at most this many, and no more than the machine
// has hardware threads.
inline constexpr size_t kMaxClientLoops = 4;
static_assert(kMaxClientLoops >= 1);
// A whole connect: TCP's, or rdma_cm's address and route resolution and
// handshake. rdma_cm resends a connect request that got no answer after
// about 4.3 s (4.096 us << CMA_CM_RESPONSE_TIMEOUT 20): room for one lost
// request and its resend, which 5 s did not leave.
inline constexpr std::chrono::milliseconds kConnectTimeout{10000};
// rdma_cm's wait for the answer to a connect request, resent once: what a
// client waits for a listener's accept at least, keepalive or not.
inline constexpr std::chrono::milliseconds kRdmaCmResendWindow{
    2 * ((4096LL << 20) / 1000000) + 1};
static_assert(kConnectTimeout > kRdmaCmResendWindow,
              "a connect must outlive one lost request and its resend");

static_assert(kInitialReconnectBackoff <= kMaxReconnectBackoff);
static_assert(kReconnectBackoffMultiplier > 1.0);

// --- Server ----------------------------------------------------------------
inline constexpr int kDefaultServerWorkers = 2;
inline constexpr std::chrono::milliseconds kDefaultShutdownGrace{5000};
// Limits a server applies (ServerOptions); each refusal is a clear
// RESOURCE_EXHAUSTED, logged.
inline constexpr uint32_t kDefaultMaxCallsPerConnection = 16384;
inline constexpr uint32_t kDefaultMaxConnections = 10000;

static_assert(kDefaultServerWorkers >= 1);

}  // namespace rdmarpc::tunables

#endif  // RDMARPC_TUNABLES_H_
