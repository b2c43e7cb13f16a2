// A Connection over a TCP stream socket (Boost.Asio).
//
// Receive: in event mode the loop waits for the socket to become readable,
// then one read() fills a staging area (a LargeBlock) that may hold many
// small frames; each is copied out into its own Buffer. A frame of at least
// kTcpReceiveInPlaceMin that the staging area can hold where it starts takes
// the staging block itself, and a fresh one replaces it. A frame too large
// for the staging area is read straight into its own block. So a 64 KiB or a
// 64 MiB payload is never copied on the way in. A payload over the limit is
// read and discarded in staging-sized pieces while its header is delivered.
// In busy and hybrid modes (TransportOptions::poll_mode) the loop reads the
// non-blocking socket in turns instead of waiting, posting each next turn so
// its other handlers run in between.
//
// Greeting: each side's first frame is a HELLO (a control frame of one byte,
// KeepaliveKind::kHello). A client's Connect (tcp_transport.cc) sends its
// own and completes only once the server's has arrived, within
// connect_timeout: the kernel accepts for a hung process, which never sends
// one. An accepted connection (Role::kServer) sends its HELLO at once and
// takes the client's as its first frame, within connect_timeout, or closes;
// a frame of another version is refused there, clearly, before any call.
//
// Send: frames queue under a mutex; the socket's executor writes everything
// queued in one gathered write, so frames produced while a write is in flight
// leave together. A frame sent from the loop thread while it delivers the
// last frame staged, with nothing queued, is written at once without
// queuing: a reply, or the next request of a closed loop. Small frames it
// sends while frames are staged behind the one it delivers are copied into
// one block (tunables::kTcpCoalesceFrameMax) that leaves, with anything
// queued, once the read's frames are delivered.
//
// TLS (tcp_tls.cc): given a TlsSession whose handshake is done, the same
// frames travel inside it. Reads take ciphertext from the socket into the
// session and decrypt into the staging area (or a large frame's block); a
// batch's frames are copied into records of up to 16 KiB (larger pieces
// encrypted where they are) and their ciphertext written. The write-now and
// coalescing paths are plaintext's: under TLS every frame goes through the
// queue, so a read's replies still leave together.
#ifndef RDMARPC_TRANSPORT_TCP_TCP_CONNECTION_H_
#define RDMARPC_TRANSPORT_TCP_TCP_CONNECTION_H_

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "transport/connection.h"
#include "transport/keepalive.h"
#include "transport/tls/tls.h"

namespace rdmarpc::transport::tcp {

// A bulk control frame's header (tcp_bulk.cc): a keepalive's is one byte.
inline constexpr uint32_t kTcpBulkHeaderSize = 40;

class TcpConnection final : public Connection,
                            public std::enable_shared_from_this<TcpConnection> {
 public:
  // kServer: accepted; the HELLOs are still to be exchanged. kClient: the
  // HELLOs were exchanged already (Connect).
  enum class Role { kClient, kServer };
  // `socket` is connected; TCP_NODELAY is set here. With `tls`, whose
  // handshake is done, frames travel inside it.
  TcpConnection(boost::asio::ip::tcp::socket socket,
                const TransportOptions& options, Role role = Role::kClient,
                std::unique_ptr<tls::TlsSession> tls = nullptr);
  ~TcpConnection() override;

  void Start(std::shared_ptr<ConnectionObserver> observer) override;
  Status Send(OutgoingFrame&& frame) override;
  void Close(const Status& reason) override;
  boost::asio::any_io_executor executor() const override;
  const std::string& peer() const override { return peer_; }
  const PeerIdentity* peer_identity() const override {
    return tls_ != nullptr && tls_->peer().authenticated() ? &tls_->peer()
                                                           : nullptr;
  }
  const ConnectionStats& stats() const override { return stats_; }
  uint64_t queued_bytes() const override {
    std::lock_guard lock(mu_);
    return queued_bytes_;
  }
  void RequireAdmission(uint64_t max_payload) override;
  void Admit() override {
    max_payload_now_ = options_.max_payload_size;
    unadmitted_ = false;
  }

  // Bulk (tcp_bulk.cc): the borrower sends READ and WRITE control frames
  // of kTcpBulkHeaderSize; the owner checks each against its LoanTable and
  // answers DATA or DONE (docs/protocol.md, "Bulk").
  StatusOr<BulkDescriptor> Lend(std::span<std::byte> bytes,
                                BulkAccess access) override {
    return loans_.Lend(bytes, access);
  }
  void Revoke(uint64_t key, UniqueFunction<void()> revoked) override {
    loans_.Revoke(key);
    revoked();
  }
  void Pull(const BulkDescriptor& loan, uint64_t offset,
            std::span<std::byte> destination, BulkCallback done) override;
  void Push(std::span<const std::byte> source, const BulkDescriptor& loan,
            uint64_t offset, BulkCallback done) override;

  // For tests (executor only): bytes of the coalescing block held now; 0
  // unless a read's replies are being coalesced or written.
  size_t coalesce_block_bytes() const { return coalesced_.block.size(); }

 private:
  struct QueuedFrame {
    // Built in place in the queue (emplace_back): the frame moves once.
    QueuedFrame(const EncodedPrefix& prefix, OutgoingFrame&& frame)
        : prefix(prefix), frame(std::move(frame)) {}
    EncodedPrefix prefix;
    OutgoingFrame frame;
  };
  // Where the frame being received stands.
  struct RxState {
    // kHello: an accepted connection's first frame, the client's HELLO.
    enum class Phase {
      kPrefix,
      kBody,
      kDiscard,
      kHello
    } phase = Phase::kPrefix;
    FramePrefix prefix;
    Buffer block;  // Header, then payload unless it is being discarded.
    size_t filled = 0;
    uint64_t discard_left = 0;
    // The block holds the header only, the payload (discard_left) to be
    // admitted (ConnectionObserver::AdmitHeader) before it is read.
    bool admission_pending = false;
    DropReason drop_reason = DropReason::kTooLarge;  // With discard_left.
  };

  // Receive path (executor only).
  void ConsumeStaged();
  // ConsumeStaged's prefix phase, on the `staged` bytes at `in`: false when
  // the loop stops (more to read, or the connection failed).
  bool TakePrefix(const std::byte* in, size_t staged);
  // TakePrefix's path for every other prefix: a bulk frame's, one whose
  // payload is over the limit, one refused (the connection fails).
  bool TakeOtherPrefix(const std::byte* in);
  static bool IsPlainPrefix(const FramePrefix& prefix);
  // Sets up the body's phase for `prefix`, `keep` bytes of it to be kept.
  void BeginBody(const FramePrefix& prefix, uint64_t keep);
  // TakePrefix's path for a frame whose payload is over max_payload_now_
  // (so either over max_payload_size, or not yet admitted).
  void TakeOverLimit(const DecodedPrefix& decoded);
  // The header of a frame awaiting admission is in: asks the observer, and
  // on yes makes room for the payload (true: go on reading the body).
  bool AdmitPending();
  // A block for a frame larger than the staging area, counted in the peer
  // memory budget; past it, the header's only, the payload discarded.
  Buffer LargeFrameBlock(uint64_t header_size, uint64_t payload_size);
  // TakePrefix's: rx_.block = LargeFrameBlock(...), out of line so that the
  // common path's one move into rx_.block stays inline.
  [[gnu::noinline]] void TakeLargeFrame(uint64_t header_size,
                                        uint64_t payload_size);
  // ConsumeStaged's HELLO phase: as TakePrefix, for the client's HELLO.
  bool TakeHello(const std::byte* in, size_t staged);
  // An accepted connection: the wait for the client's HELLO.
  void AwaitHello();
  void ReadMore();
  // One non-blocking read into the staging area, handed to OnRead (or
  // OnReadError); kWouldBlock when the socket had nothing.
  enum class ReadOutcome { kHandled, kWouldBlock };
  ReadOutcome ReadStaged();
  // What the next read into the staging area may take (after_large_frame_).
  size_t StagingSpace() const;
  // Event mode: once the socket is readable, `on_readable` reads:
  // OnStagingReadable into the staging area, OnBodyReadable the rest of a
  // large frame.
  void WaitReadable(void (TcpConnection::*on_readable)());
  void OnStagingReadable();
  void OnBodyReadable();
  // Busy and hybrid modes: up to kTcpBusyReadsPerTurn reads, until one
  // delivers what the receive path does not follow with a read (a large
  // body read asynchronously, a close); then the next turn is posted, or
  // (hybrid, quiet for hybrid_spin) the event-mode wait begins.
  void PollTurn();
  void OnRead(size_t bytes);  // Into the staging area.
  // Makes the staging block the block of the frame whose prefix was just
  // consumed (at least kTcpReceiveInPlaceMin long), if it fits there with
  // nothing staged behind it; false leaves all as it was.
  bool ReceiveInPlace(uint64_t frame_size);
  void OnBodyRead(const boost::system::error_code& error, size_t bytes);
  // The rest of a large frame, read straight into its block: recv until it
  // is whole (true: the caller delivers it) or the socket is empty (false:
  // a wait for readability goes on, and delivers it).
  bool ReadBody();
  void FinishBody();  // The block is whole: deliver it, go on with staging.
  void DeliverFrame();
  // Keepalive (transport/keepalive.h): the timer's next tick, and a PING or
  // PONG control frame (one byte of header).
  void ArmKeepalive();
  void SendKeepalive(KeepaliveKind kind);
  void OnKeepalive(KeepaliveKind kind);  // A control frame arrived.
  // The peer pinged too often: TOO_MANY_PINGS, then close.
  void TooManyPings();
  void OnReadError(const boost::system::error_code& error);

  // TLS (tcp_tls.cc, executor only). One non-blocking read's worth into
  // `into`: decrypted bytes already in the session, else ciphertext from
  // the socket, decrypted; kWouldBlock when neither gave any. *got is 0 when
  // the connection failed (it is closing then).
  ReadOutcome ReadTls(std::byte* into, size_t space, size_t* got);
  // ReadStaged under TLS: ReadTls into the staging area, then OnRead.
  [[gnu::noinline]] ReadOutcome ReadStagedTls(size_t space);
  // ReadMore's wait under TLS: decrypted bytes that wait in the session,
  // not the socket, get no readiness, so a read is posted instead (true).
  [[gnu::noinline]] bool PostTlsReadable();
  // ReadBody's read under TLS, as recv answers: > 0 bytes; -1 with errno
  // EAGAIN when nothing came; 0 when the connection failed (closing).
  ssize_t ReadBodyTls(std::byte* into, size_t space);
  // ContinueBatch under TLS: encrypts the batch's pieces into records a
  // little ahead of the socket and writes their ciphertext.
  bool ContinueTlsBatch();
  // Encrypts the batch's next pieces: one record of up to 16 KiB, or up to
  // `ahead` bytes of a large piece.
  bool EncryptGather(size_t ahead);
  // A control frame at once, best effort (HELLO, version announcement).
  void SendNow(std::span<const std::byte> bytes);

  // Send path (executor only).
  // Writes one frame at once, from the loop thread mid-delivery, when no
  // write is in flight or posted (Send has taken the token, flush_pending_);
  // what does not leave goes on as a batch.
  void WriteNow(const EncodedPrefix& prefix, OutgoingFrame&& frame);
  // From the loop thread mid-delivery, with more staged behind: copies a
  // small frame into coalesced_ (tunables::kTcpCoalesceFrameMax), to leave
  // with the others after the read's last frame; false if it must queue.
  bool Coalesce(const EncodedPrefix& prefix, const OutgoingFrame& frame,
                uint64_t payload);
  // After a write-now: gives the token back, or flushes what other threads
  // queued meanwhile.
  void LetGo();
  void Flush();
  // Writes the batch in writing_, whose first `already_written` bytes have
  // left: true once all of it has; false if the rest is left to an
  // asynchronous write, or the write failed (the connection is closing).
  bool WriteBatch(size_t already_written);
  // Writes on from gather_first_ until the batch has left (true), the
  // socket is full (false: a wait for room goes on with it) or the write
  // failed (false: the connection is closing).
  bool ContinueBatch();
  void AdvanceGather(size_t n);  // n more bytes of the batch have left.
  void PostFlush();              // Flush later, on the loop.
  // The socket is full: ContinueBatch once it has room.
  void WaitWritable();
  // Posts `handler` to the socket's loop, through loop_ when there is one.
  template <typename Handler>
  void PostToLoop(Handler handler);
  void FinishWrite(size_t bytes);  // The batch in writing_ has left.
  // What a frame costs while it waits (include/rdmarpc/peer_memory.h).
  static uint64_t QueuedCost(uint64_t header, uint64_t payload) {
    return sizeof(QueuedFrame) + header + payload;
  }
  // Send's refusal past the peer memory limit.
  Status PeerMemoryFull(uint64_t bytes) const;
  void OnWritten(const boost::system::error_code& error, size_t bytes);

  // Closes once the queue is written, or after kCloseFlushTimeout.
  void BeginClose(const Status& reason);
  void CloseNow(const Status& reason);
  // Bulk (tcp_bulk.cc, loop thread). A Pull or Push under way, and one
  // of its chunks in flight.
  struct BulkOp;
  struct BulkChunk {
    std::shared_ptr<BulkOp> op;
    std::byte* destination;  // A pull's; null for a push.
    uint64_t length;
  };
  // Checks a Pull or Push and queues it on the loop.
  void StartBulk(std::shared_ptr<BulkOp> op, const BulkDescriptor& loan,
                 BulkAccess wanted);
  // Sends chunks while fewer than kBulkWindowChunks are in flight.
  void PumpBulk();
  void FinishChunk(uint64_t id, const Status& status);
  // A bulk control frame arrived (its header and payload).
  void OnBulkFrame(std::span<const std::byte> header, Buffer payload,
                   bool payload_dropped);
  void AnswerBulk(uint8_t op, uint64_t id, const Status& status,
                  Buffer payload);
  // The connection closed: every bulk operation fails, every loan ends.
  void EndBulk(const Status& reason);
  // TakePrefix's check of a bulk frame's prefix: false is a protocol error.
  bool TakeBulkPrefix(DecodedPrefix& decoded);

  // The peer broke the protocol: counted, logged, closed.
  void ProtocolError(const Status& error);
  // A frame of another rdmarpc version: tell the peer ours, then close.
  void RefuseOtherVersion(const Status& error);

  boost::asio::ip::tcp::socket socket_;
  const TransportOptions options_;
  // Before Admit on a connection that requires admission: bulk frames are
  // a protocol error then (loop thread).
  bool unadmitted_ = false;
  LoanTable loans_;  // What this side lent the peer.
  // The borrower's operations (loop thread): those with chunks still to
  // send, in order, and the chunks in flight by id.
  std::deque<std::shared_ptr<BulkOp>> bulk_waiting_;
  std::unordered_map<uint64_t, BulkChunk> bulk_in_flight_;
  uint64_t next_bulk_chunk_ = 1;
  // The largest payload read whole: max_payload_size, or before admission
  // (RequireAdmission) the bound for a peer not yet admitted (loop thread).
  uint64_t max_payload_now_;
  std::string peer_;
  ConnectionStats stats_;
  std::shared_ptr<ConnectionObserver> observer_;  // Reset after OnClose.
  // Inside observer_->OnFrame (loop thread): CloseNow defers OnClose.
  bool in_observer_ = false;
  bool pong_sent_ = false;  // A PONG was queued (loop thread).
  bool torn_down_ = false;
  Role role_ = Role::kClient;
  std::atomic<bool> receive_stopped_{false};
  Status close_reason_;
  std::optional<Status> close_after_flush_;
  boost::asio::steady_timer close_timer_;
  boost::asio::steady_timer keepalive_timer_;
  KeepaliveClock keepalive_;
  // Flow control (include/rdmarpc/peer_memory.h): reading pauses, between
  // frames, while the process's peer memory is past 7/8 of its limit and
  // the peer has not read what is being written to it; it resumes once the
  // peer has read it or the memory is below 3/4, checked every
  // kReadPauseCheck and after each write.
  // While paused, what the peer reads counts as a sign of life for
  // keepalive.
  void PauseReading();
  void ArmPauseCheck();  // CheckPausedReading after kReadPauseCheck.
  void CheckPausedReading();
  bool MayResumeReading() const;
  // Bytes written to the socket so far, the batch under way's included.
  uint64_t WrittenSoFar() const {
    return stats_.bytes_sent.load(std::memory_order_relaxed) + gather_written_;
  }
  bool reading_paused_ = false;
  uint64_t sent_at_pause_check_ = 0;
  boost::asio::steady_timer pause_timer_;

  Buffer staging_;  // kTcpReceiveChunk bytes, a LargeBlock.
  size_t staged_begin_ = 0;
  size_t staged_end_ = 0;
  RxState rx_;

  mutable std::mutex mu_;
  std::vector<QueuedFrame> queue_;  // Guarded by mu_.
  uint64_t queued_bytes_ = 0;       // Guarded by mu_: what queue_ costs.
  // What the batch in writing_ costs (QueuedCost), counted in the peer
  // memory budget until it has left: set by the loop thread, read by Send.
  std::atomic<uint64_t> writing_bytes_{0};
  // The writer's token: a flush is posted or a write is in flight, and
  // either picks up queue_. Set and cleared under mu_, except by the write-
  // now path, which takes and gives it back without mu_ (see LetGo).
  std::atomic<bool> flush_pending_{false};
  std::atomic<size_t> queued_frames_{0};  // queue_.size(), set under mu_.
  std::atomic<bool> closing_{false};      // Set under mu_.

  std::vector<QueuedFrame> writing_;  // Frames in the write in flight.
  // Small frames copied together (Coalesce; loop thread). While
  // `coalescing`, the loop thread holds the writer's token and appends;
  // Flush then makes the block the batch's first piece (in_batch), and
  // FinishWrite releases it. A frame of the loop thread's that queued
  // instead (too large, no room) keeps those after it out of the block
  // (queued_frames_ is not 0 then), so they leave in the order sent.
  struct Coalesced {
    Buffer block;  // A kTcpCoalesceCapacity pooled block, or empty.
    size_t size = 0;
    size_t frames = 0;
    bool coalescing = false;
    bool in_batch = false;
  } coalesced_;
  std::vector<boost::asio::const_buffer> gather_;
  std::vector<iovec> iov_;      // gather_ as sendmsg takes it.
  size_t gather_first_ = 0;     // The first piece of gather_ not all sent,
  size_t gather_written_ = 0;   // the bytes of the batch sent,
  size_t gather_total_ = 0;     // and all of its bytes.
  bool direct_writes_ = false;  // The socket is non-blocking: Flush writes.
  // Send may write a reply at once or coalesce it: direct_writes_ without
  // TLS.
  bool write_now_ = false;
  std::unique_ptr<tls::TlsSession> tls_;
  bool flush_after_delivery_ = false;  // Loop thread only.
  // Mid-delivery: more received bytes are staged behind the frame being
  // delivered, so replies to it wait to leave with the others' (loop thread).
  bool more_staged_ = false;
  // The last read filled all the staging space it was given, so more may be
  // waiting in the socket (loop thread).
  bool read_filled_space_ = false;
  bool read_again_ = false;  // Read again without a wait since the last one.
  // The last frame begun was too large to receive in place: the next read
  // into staging takes at most kTcpLargeFrameHeadRead (loop thread).
  bool after_large_frame_ = false;
  // Busy and hybrid modes (loop thread): a turn is running, so ReadMore only
  // notes that the receive path wants more; bytes arrived since the last
  // turn looked; when a hybrid loop stops spinning.
  bool in_poll_turn_ = false;
  bool want_read_ = false;
  bool received_ = false;
  std::chrono::steady_clock::time_point spin_until_{};
  // The socket's io_context executor: unlike the type-erased one, it
  // allocates posted handlers with their own (pooled) allocator.
  std::optional<boost::asio::io_context::executor_type> loop_;
};

}  // namespace rdmarpc::transport::tcp

#endif  // RDMARPC_TRANSPORT_TCP_TCP_CONNECTION_H_
