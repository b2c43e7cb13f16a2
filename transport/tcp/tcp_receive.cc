// TcpConnection: the receive path (staging, frames, polling).
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/read.hpp>
#include <cerrno>
#include <cstring>

#include "base/buffer_pool.h"
#include "base/copy_bytes.h"
#include "base/large_block.h"
#include "base/log.h"
#include "base/log_throttle.h"
#include "base/pooled_handler.h"
#include "base/receive_clock.h"
#include "transport/peer_budget.h"
#include "transport/tcp/tcp_connection_internal.h"

namespace rdmarpc::transport::tcp {

namespace asio = boost::asio;
using tunables::kFramePrefixSize;

namespace {
// What a recv that returned `n` <= 0 (not EAGAIN or EINTR) means.
boost::system::error_code RecvFailure(ssize_t n) {
  return n == 0 ? boost::system::error_code(asio::error::eof)
                : boost::system::error_code(errno,
                                            boost::system::system_category());
}
}  // namespace
using tunables::kTcpCopyOutLimit;
using tunables::kTcpReceiveChunk;

// Inlined into its one caller, on the call path: split out for reading only.
// A plain RPC frame's or keepalive's prefix within the limits is taken here;
// anything else (a bulk frame, a payload over the limit, a malformed prefix)
// by TakeOtherPrefix.
[[gnu::always_inline]] inline bool TcpConnection::TakePrefix(
    const std::byte* in, size_t staged) {
  if (staged < kFramePrefixSize) {
    ReadMore();
    return false;
  }
  FramePrefix prefix;
  if (!AcceptFramePrefix(in, max_payload_now_, &prefix) ||
      !IsPlainPrefix(prefix)) [[unlikely]] {
    return TakeOtherPrefix(in);
  }
  rx_.discard_left = 0;
  BeginBody(prefix, uint64_t{prefix.header_size} + prefix.payload_size);
  return true;
}

// An RPC frame's or keepalive's (one byte of header): TCP's other frames
// are bulk's, and no TCP frame carries credits.
bool TcpConnection::IsPlainPrefix(const FramePrefix& prefix) {
  const bool keepalive = prefix.type == FrameType::kControl &&
                         prefix.header_size == 1 && prefix.payload_size == 0;
  return prefix.credits == 0 && (prefix.type == FrameType::kRpc || keepalive);
}

[[gnu::noinline]] bool TcpConnection::TakeOtherPrefix(const std::byte* in) {
  DecodedPrefix decoded =
      DecodeFramePrefix(std::span(in, kFramePrefixSize), max_payload_now_);
  if (decoded.verdict == PrefixVerdict::kMalformed) {
    ProtocolError(decoded.error);
    return false;
  }
  if (decoded.verdict == PrefixVerdict::kOtherVersion) {
    RefuseOtherVersion(decoded.error);
    return false;
  }
  if (!IsPlainPrefix(decoded.prefix) && !TakeBulkPrefix(decoded)) {
    return false;
  }
  rx_.discard_left = 0;
  uint64_t keep = decoded.prefix.header_size;
  if (decoded.verdict == PrefixVerdict::kPayloadTooLarge) {
    TakeOverLimit(decoded);
  } else {
    keep += decoded.prefix.payload_size;
  }
  BeginBody(decoded.prefix, keep);
  return true;
}

[[gnu::always_inline]] inline void TcpConnection::BeginBody(
    const FramePrefix& prefix, uint64_t keep) {
  staged_begin_ += kFramePrefixSize;
  rx_.prefix = prefix;
  rx_.filled = 0;
  after_large_frame_ = keep > kTcpReceiveChunk;
  if (after_large_frame_) [[unlikely]] {
    TakeLargeFrame(prefix.header_size, keep - prefix.header_size);
  } else if (keep < tunables::kTcpReceiveInPlaceMin || !ReceiveInPlace(keep)) {
    rx_.block = PooledBuffer(keep);
  }
  rx_.phase = RxState::Phase::kBody;
}

Buffer TcpConnection::LargeFrameBlock(uint64_t header_size,
                                      uint64_t payload_size) {
  const uint64_t size = header_size + payload_size;
  if (TryChargePeerBytes(size)) {
    return ChargedBuffer(PooledBuffer(size), size);
  }
  Bump(stats_.oversized_frames_dropped);
  if (const auto held = ThrottleLog("payload refused", peer_)) {
    Log().warn(
        "{}: payload of {} bytes refused: the process holds {} bytes "
        "for its peers, its limit {}; discarding it{}",
        peer_, payload_size, PeerMemoryUsed(), PeerMemoryLimit(),
        HeldBack(*held));
  }
  rx_.discard_left = payload_size;
  rx_.drop_reason = DropReason::kPeerMemory;
  return PooledBuffer(header_size);
}

void TcpConnection::TakeLargeFrame(uint64_t header_size,
                                   uint64_t payload_size) {
  rx_.block = LargeFrameBlock(header_size, payload_size);
}

void TcpConnection::TakeOverLimit(const DecodedPrefix& decoded) {
  rx_.drop_reason = DropReason::kTooLarge;
  rx_.discard_left = decoded.prefix.payload_size;
  if (decoded.prefix.payload_size <= options_.max_payload_size) {
    // Over max_payload_now_ only: the peer is not admitted yet. Its header
    // first (AdmitPending).
    rx_.admission_pending = true;
    return;
  }
  Bump(stats_.oversized_frames_dropped);
  // A peer can send these at will: once per host and interval.
  if (const auto held = ThrottleLog("payload refused", peer_)) {
    Log().warn(
        "{}: payload of {} bytes exceeds the receiver's maximum of {}; "
        "discarding it{}",
        peer_, decoded.prefix.payload_size, options_.max_payload_size,
        HeldBack(*held));
  }
}

bool TcpConnection::AdmitPending() {
  rx_.admission_pending = false;
  if (!observer_->AdmitHeader(rx_.block.span())) {
    Bump(stats_.payloads_refused);
    return false;  // Delivered with its payload dropped, which is discarded.
  }
  // Admitted: the header moves to a block with room for the payload, which
  // is read as any frame's body.
  const size_t header_size = rx_.block.size();
  const uint64_t payload_size = std::exchange(rx_.discard_left, 0);
  Buffer block = header_size + payload_size > kTcpReceiveChunk
                     ? LargeFrameBlock(header_size, payload_size)
                     : PooledBuffer(header_size + payload_size);
  if (rx_.discard_left > 0) return false;  // Over the peer memory limit.
  std::memcpy(block.data(), rx_.block.data(), header_size);
  rx_.block = std::move(block);
  rx_.filled = header_size;
  return true;
}

bool TcpConnection::TakeHello(const std::byte* in, size_t staged) {
  if (staged < kTcpControlFrameSize) {
    ReadMore();
    return false;
  }
  const Status hello = CheckHello(std::span(in, kTcpControlFrameSize));
  if (hello.code() == StatusCode::kUnimplemented) {
    RefuseOtherVersion(hello);
    return false;
  }
  if (!hello.ok()) {
    ProtocolError(Status(
        StatusCode::kInternal,
        "malformed frame: the first frame from " + peer_ + " is not a HELLO"));
    return false;
  }
  staged_begin_ += kTcpControlFrameSize;
  rx_.phase = RxState::Phase::kPrefix;
  close_timer_.cancel();
  return true;
}

void TcpConnection::ConsumeStaged() {
  using Phase = RxState::Phase;
  if (rx_.phase == Phase::kHello) [[unlikely]] {
    if (torn_down_ || receive_stopped_ ||
        !TakeHello(staging_.data() + staged_begin_,
                   staged_end_ - staged_begin_)) {
      return;
    }
  }
  while (!torn_down_ && !receive_stopped_) {
    const size_t staged = staged_end_ - staged_begin_;
    std::byte* in = staging_.data() + staged_begin_;
    switch (rx_.phase) {
      case Phase::kPrefix:
        if (!TakePrefix(in, staged)) return;
        break;
      case Phase::kBody: {
        const size_t need = rx_.block.size() - rx_.filled;
        const size_t take = std::min(need, staged);
        if (take > 0) {
          CopyBytes(rx_.block.data() + rx_.filled, in, take);
          Bump(stats_.received_bytes_copied, take);
        }
        rx_.filled += take;
        staged_begin_ += take;
        if (rx_.filled < rx_.block.size()) {
          // Everything staged is consumed. A large remainder goes straight
          // into the block; a small one through the staging area.
          if (need - take >= kTcpCopyOutLimit && direct_writes_ &&
              (options_.poll_mode == PollMode::kEvent || tls_ != nullptr)) {
            staged_begin_ = staged_end_ = 0;
            if (!ReadBody()) return;  // The rest comes with readability.
          } else if (need - take >= kTcpCopyOutLimit) {  // Polling, blocking.
            staged_begin_ = staged_end_ = 0;
            Bump(stats_.read_calls);
            asio::async_read(
                socket_,
                asio::buffer(rx_.block.data() + rx_.filled,
                             rx_.block.size() - rx_.filled),
                [self = shared_from_this()](
                    const boost::system::error_code& error, size_t bytes) {
                  self->OnBodyRead(error, bytes);
                });
            return;
          } else {
            return ReadMore();
          }
        }
        if (rx_.admission_pending && AdmitPending()) [[unlikely]] {
          break;  // The payload, read on as the body.
        }
        const bool discard = rx_.discard_left > 0;
        more_staged_ = staged_end_ > staged_begin_;
        DeliverFrame();
        more_staged_ = false;
        rx_.phase = discard ? Phase::kDiscard : Phase::kPrefix;
        break;
      }
      case Phase::kHello:  // Taken before the loop, once.
        return;
      case Phase::kDiscard: {
        const size_t take =
            static_cast<size_t>(std::min<uint64_t>(rx_.discard_left, staged));
        staged_begin_ += take;
        rx_.discard_left -= take;
        if (rx_.discard_left > 0) return ReadMore();
        rx_.phase = Phase::kPrefix;
        break;
      }
    }
  }
}

void TcpConnection::RefuseOtherVersion(const Status& error) {
  // Best effort, before anything else of ours: a peer of another version
  // reads this side's version from it and names both in its own error. The
  // socket's buffer is empty or nearly so (a peer of another version gets no
  // frame of ours), so this never blocks.
  const EncodedPrefix announcement = VersionAnnouncement();
  SendNow(announcement);
  ProtocolError(error);
}

void TcpConnection::ProtocolError(const Status& error) {
  Bump(stats_.protocol_errors);
  if (const auto held = ThrottleLog("protocol error", peer_)) {
    Log().warn("{}: closing: {}{}", peer_, error.message(), HeldBack(*held));
  }
  CloseNow(error);
}

bool TcpConnection::ReceiveInPlace(uint64_t frame_size) {
  const size_t staged = staged_end_ - staged_begin_;
  if (staged > frame_size || staged_begin_ + frame_size > kTcpReceiveChunk) {
    return false;
  }
  Buffer fresh = LargeBlock(kTcpReceiveChunk, BlockFill::kAnything);
  if (fresh.empty()) return false;  // Copy out, as if it did not fit.
  rx_.block = std::exchange(staging_, std::move(fresh));
  rx_.block.RemovePrefix(staged_begin_);
  rx_.block.Truncate(frame_size);
  rx_.filled = staged;
  staged_begin_ = staged_end_ = 0;
  Bump(stats_.frames_received_in_place);
  return true;
}

void TcpConnection::OnBodyRead(const boost::system::error_code& error,
                               size_t bytes) {
  if (torn_down_) return;
  if (error) return OnReadError(error);
  Bump(stats_.bytes_received, bytes);
  FinishBody();
}

bool TcpConnection::ReadBody() {
  // Not asio::async_read: it reads a large frame in the socket's pieces
  // (about 64 KiB on loopback), each a posted handler and a poll of the
  // reactor, twice the system calls of a plain read loop.
  while (!torn_down_ && rx_.filled < rx_.block.size()) {
    std::byte* const into = rx_.block.data() + rx_.filled;
    const size_t space = rx_.block.size() - rx_.filled;
    const ssize_t n = tls_ != nullptr
                          ? ReadBodyTls(into, space)
                          : Recv(socket_.native_handle(), into, space);
    if (n > 0) {
      Bump(stats_.read_calls);
      Bump(stats_.bytes_received, static_cast<uint64_t>(n));
      rx_.filled += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      WaitReadable(&TcpConnection::OnBodyReadable);
      return false;
    }
    if (tls_ == nullptr) OnReadError(RecvFailure(n));  // TLS's has closed.
    return false;
  }
  return !torn_down_;
}

void TcpConnection::OnBodyReadable() {
  if (ReadBody()) FinishBody();
}

void TcpConnection::FinishBody() {
  rx_.filled = rx_.block.size();
  if (rx_.admission_pending && AdmitPending()) return ConsumeStaged();
  const bool discard = rx_.discard_left > 0;
  DeliverFrame();
  rx_.phase = discard ? RxState::Phase::kDiscard : RxState::Phase::kPrefix;
  ConsumeStaged();
}

void TcpConnection::DeliverFrame() {
  if (receive_stopped_) return;
  if (rx_.prefix.type == FrameType::kControl &&
      rx_.prefix.header_size == kTcpBulkHeaderSize) {
    const uint32_t header_size = rx_.prefix.header_size;
    const bool dropped = rx_.discard_left > 0;
    std::array<std::byte, kTcpBulkHeaderSize> header;
    std::memcpy(header.data(), rx_.block.data(), header_size);
    rx_.block.RemovePrefix(header_size);
    return OnBulkFrame(header, std::move(rx_.block), dropped);
  }
  if (rx_.prefix.type == FrameType::kControl) {  // Keepalive.
    const auto kind = static_cast<KeepaliveKind>(rx_.block.data()[0]);
    rx_.block.Reset();
    return OnKeepalive(kind);
  }
  Bump(stats_.frames_received);
  ReceivedFrame frame(rx_.prefix.type, std::move(rx_.block),
                      rx_.prefix.header_size, rx_.discard_left,
                      rx_.drop_reason);
  InsideOnFrame guard(in_observer_);
  observer_->OnFrame(std::move(frame));
}

void TcpConnection::ReadMore() {
  // Answers to the frames just delivered leave before the wait is set up:
  // that costs a system call, and the peer is waiting for them.
  if (delivering == this && std::exchange(flush_after_delivery_, false)) {
    Flush();
  }
  if (torn_down_) return;
  // Between frames, with frames queued for the peer (none, on a call's
  // path: its reply was written directly): flow control.
  if (writing_bytes_.load(std::memory_order_relaxed) != 0 &&
      role_ == Role::kServer && rx_.phase == RxState::Phase::kPrefix &&
      staged_begin_ == staged_end_ && PeerMemoryHigh()) [[unlikely]] {
    return PauseReading();
  }
  // Keep the unconsumed tail at the front so the rest of it can follow.
  if (staged_begin_ > 0) {
    const size_t tail = staged_end_ - staged_begin_;
    std::memmove(staging_.data(), staging_.data() + staged_begin_, tail);
    staged_begin_ = 0;
    staged_end_ = tail;
  }
  if (!direct_writes_) {  // A blocking socket: let Asio do the reading.
    socket_.async_read_some(
        asio::buffer(staging_.data() + staged_end_, StagingSpace()),
        Pooled([self = shared_from_this()](
                   const boost::system::error_code& error, size_t bytes) {
          if (self->torn_down_) return;
          if (error) return self->OnReadError(error);
          self->OnRead(bytes);
        }));
    return;
  }
  if (options_.poll_mode != PollMode::kEvent) {
    if (in_poll_turn_) {
      want_read_ = true;  // The turn in progress reads next.
      return;
    }
    return PollTurn();
  }
  // A frame larger than the staging space the last read had left (a 64 KiB
  // payload behind its header) leaves its tail in the socket: read it now
  // rather than wait for readiness the socket already has. Once per wake-up,
  // so a peer that keeps the socket full cannot hold the loop.
  if (std::exchange(read_filled_space_, false) && !read_again_) {
    read_again_ = true;
    if (ReadStaged() != ReadOutcome::kWouldBlock) return;
  }
  read_again_ = false;
  if (tls_ != nullptr && PostTlsReadable()) [[unlikely]]
    return;
  WaitReadable(&TcpConnection::OnStagingReadable);
}

void TcpConnection::WaitReadable(void (TcpConnection::*on_readable)()) {
  // Wait, then read. (async_read_some would first try a read that finds
  // nothing, right after the last one drained the socket: one wasted system
  // call per message.)
  Bump(stats_.read_waits);
  socket_.async_wait(asio::ip::tcp::socket::wait_read,
                     Pooled([self = shared_from_this(), on_readable](
                                const boost::system::error_code& error) {
                       if (self->torn_down_) return;
                       if (error) return self->OnReadError(error);
                       ((*self).*on_readable)();
                     }));
}

void TcpConnection::OnStagingReadable() {
  if (ReadStaged() == ReadOutcome::kWouldBlock) ReadMore();
}

void TcpConnection::PollTurn() {
  in_poll_turn_ = true;
  bool more = true;  // The receive path wants another read.
  for (uint32_t i = 0; i < tunables::kTcpBusyReadsPerTurn && more; ++i) {
    if (torn_down_) break;
    want_read_ = false;
    if (ReadStaged() == ReadOutcome::kWouldBlock) {
      Bump(stats_.empty_reads);
      // Another thread queued a frame: the Flush it posted runs after
      // this turn, so end the turn now rather than make it wait.
      if (queued_frames_.load(std::memory_order_relaxed) != 0) break;
      continue;
    }
    more = want_read_;
  }
  in_poll_turn_ = false;
  if (!more || torn_down_) return;
  if (options_.poll_mode == PollMode::kHybrid) {
    const auto now = std::chrono::steady_clock::now();
    if (std::exchange(received_, false)) {
      spin_until_ = now + options_.hybrid_spin;
    }
    if (now >= spin_until_) {
      return WaitReadable(&TcpConnection::OnStagingReadable);
    }
  }
  PostToLoop(Pooled([self = shared_from_this()] { self->PollTurn(); }));
}

size_t TcpConnection::StagingSpace() const {
  const size_t space = kTcpReceiveChunk - staged_end_;
  return after_large_frame_ ? std::min(space, tunables::kTcpLargeFrameHeadRead)
                            : space;
}

TcpConnection::ReadOutcome TcpConnection::ReadStaged() {
  // recv itself, not socket_.read_some: the socket is non-blocking, and
  // Asio's wrapper adds error-code plumbing to every message.
  const size_t space = StagingSpace();
  if (space == 0) {  // As read_some: reading nothing is not end-of-file.
    OnRead(0);
    return ReadOutcome::kHandled;
  }
  if (tls_ != nullptr) [[unlikely]]
    return ReadStagedTls(space);
  ssize_t n;
  do {
    n = Recv(socket_.native_handle(), staging_.data() + staged_end_, space);
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    const auto bytes = static_cast<size_t>(n);
    read_filled_space_ = bytes == space;
    OnRead(bytes);
    return ReadOutcome::kHandled;
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    return ReadOutcome::kWouldBlock;
  }
  OnReadError(RecvFailure(n));
  return ReadOutcome::kHandled;
}

void TcpConnection::OnRead(size_t bytes) {
  received_ = true;
  Bump(stats_.read_calls);
  Bump(stats_.bytes_received, bytes);
  staged_end_ += bytes;
  // Reset even if a handler throws (the event loop logs and goes on).
  struct Delivery {
    TcpConnection* self;
    explicit Delivery(TcpConnection* c) : self(c) { delivering = c; }
    ~Delivery() {
      delivering = nullptr;
      if (std::exchange(self->flush_after_delivery_, false)) self->Flush();
    }
  } delivery(this);
  const ReceiveClock::Batch batch;  // The read's frames share its time.
  ConsumeStaged();
}

void TcpConnection::OnReadError(const boost::system::error_code& error) {
  if (error == asio::error::eof) {
    Log().info("{}: peer closed the connection", peer_);
    return CloseNow(Status(StatusCode::kUnavailable,
                           "peer " + peer_ + " closed the connection"));
  }
  Log().info("{}: read failed: {}", peer_, error.message());
  CloseNow(Status(StatusCode::kUnavailable,
                  "connection to " + peer_ + " lost: " + error.message()));
}

namespace {
constexpr auto kReadPauseCheck = std::chrono::milliseconds(10);
}  // namespace

void TcpConnection::PauseReading() {
  reading_paused_ = true;
  sent_at_pause_check_ = WrittenSoFar();
  Bump(stats_.reads_paused);
  if (const auto held = ThrottleLog("reads paused", peer_)) {
    Log().warn(
        "{}: not reading: the process holds {} bytes for its peers, its "
        "limit {} (rdmarpc::SetPeerMemoryLimit), and {} bytes wait for this "
        "peer to read them{}",
        peer_, PeerMemoryUsed(), PeerMemoryLimit(),
        writing_bytes_.load(std::memory_order_relaxed), HeldBack(*held));
  }
  ArmPauseCheck();
}

void TcpConnection::ArmPauseCheck() {
  pause_timer_.expires_after(kReadPauseCheck);
  pause_timer_.async_wait(
      [self = shared_from_this()](const boost::system::error_code& error) {
        if (!error && !self->torn_down_) self->CheckPausedReading();
      });
}

bool TcpConnection::MayResumeReading() const {
  return writing_bytes_.load(std::memory_order_relaxed) == 0 || PeerMemoryLow();
}

void TcpConnection::CheckPausedReading() {
  if (!reading_paused_ || torn_down_) return;
  // The peer reads what was sent to it: alive, though we do not read.
  const uint64_t sent = WrittenSoFar();
  if (sent != sent_at_pause_check_) keepalive_.Touch();
  sent_at_pause_check_ = sent;
  if (!MayResumeReading()) return ArmPauseCheck();
  reading_paused_ = false;
  pause_timer_.cancel();
  ReadMore();
}

}  // namespace rdmarpc::transport::tcp
