#include "transport/tcp/tcp_connection.h"

#include <limits.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>

#include "base/buffer_pool.h"
#include "base/large_block.h"
#include "base/log.h"
#include "base/pooled_handler.h"

namespace rdmarpc::transport::tcp {
namespace {

// A ConstBufferSequence over a gather list, cheap to copy.
struct GatherView {
  using value_type = boost::asio::const_buffer;
  using const_iterator = const boost::asio::const_buffer*;
  const_iterator first;
  const_iterator last;
  const_iterator begin() const { return first; }
  const_iterator end() const { return last; }
};

// Calls add(data, size) for each piece of a frame in wire order: its
// prefix, its header (if any), its payload slices.
template <typename Add>
void ForEachPiece(const EncodedPrefix& prefix, const OutgoingFrame& frame,
                  Add&& add) {
  add(prefix.data(), prefix.size());
  if (!frame.header.empty()) add(frame.header.data(), frame.header.size());
  for (size_t i = 0; i < frame.payload_slices; ++i) {
    add(frame.payload[i].data(), frame.payload[i].size());
  }
}

// recv and sendmsg without glibc's cancellation bracketing. Both are
// cancellation points, so glibc enables and disables asynchronous
// cancellation around each call: about 60 instructions per message and side.
// These run only on rdmarpc's event-loop threads, which are never cancelled.
// Same results and errno as the libc calls. Sanitizer builds keep the libc
// calls, which the sanitizers intercept: TSan orders memory through the
// socket (a thread that writes and then sends happens before the one that
// receives), ASan checks the buffers.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
ssize_t Recv(int fd, void* data, size_t size) {
  return ::recv(fd, data, size, 0);
}
ssize_t SendMsg(int fd, const msghdr* message) {
  return ::sendmsg(fd, message, MSG_NOSIGNAL);
}
#else
ssize_t Recv(int fd, void* data, size_t size) {
  return syscall(SYS_recvfrom, fd, data, size, 0, nullptr, nullptr);
}
ssize_t SendMsg(int fd, const msghdr* message) {
  return syscall(SYS_sendmsg, fd, message, MSG_NOSIGNAL);
}
#endif

}  // namespace

namespace asio = boost::asio;
using tunables::kFramePrefixSize;
using tunables::kTcpCopyOutLimit;
using tunables::kTcpReceiveChunk;

// Staging blocks handed to frames come back through the large-block cache.
static_assert(kTcpReceiveChunk >= kLargeBlockMin);

namespace {

std::string PeerUri(const asio::ip::tcp::socket& socket) {
  boost::system::error_code ec;
  const auto endpoint = socket.remote_endpoint(ec);
  if (ec) return "tcp://?";
  const auto address = endpoint.address();
  const std::string host =
      address.is_v6() ? "[" + address.to_string() + "]" : address.to_string();
  return "tcp://" + host + ":" + std::to_string(endpoint.port());
}

}  // namespace

TcpConnection::TcpConnection(asio::ip::tcp::socket socket,
                             const TransportOptions& options)
    : socket_(std::move(socket)),
      options_(options),
      peer_(PeerUri(socket_)),
      close_timer_(socket_.get_executor()),
      staging_(PooledBuffer(kTcpReceiveChunk)) {
  boost::system::error_code ec;
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
  if (ec) Log().warn("{}: cannot set TCP_NODELAY: {}", peer_, ec.message());
  // Flush writes directly and must never block the event loop.
  socket_.non_blocking(true, ec);
  direct_writes_ = !ec;
  // (The executor is a copy: target() points into it, so keep it alive.)
  const auto executor = socket_.get_executor();
  if (const auto* loop = executor.target<asio::io_context::executor_type>()) {
    loop_ = *loop;
  }
  if (ec) Log().warn("{}: cannot set O_NONBLOCK: {}", peer_, ec.message());
}

TcpConnection::~TcpConnection() = default;

asio::any_io_executor TcpConnection::executor() const {
  return const_cast<asio::ip::tcp::socket&>(socket_).get_executor();
}

template <typename Handler>
void TcpConnection::PostToLoop(Handler handler) {
  // The io_context executor, unlike the type-erased one, allocates the
  // handler with its own (pooled) allocator.
  if (loop_) {
    asio::post(*loop_, std::move(handler));
  } else {
    asio::post(socket_.get_executor(), std::move(handler));
  }
}

void TcpConnection::Start(std::shared_ptr<ConnectionObserver> observer) {
  asio::post(socket_.get_executor(),
             [self = shared_from_this(), observer = std::move(observer)] {
               if (self->torn_down_) {
                 // Closed before it started: the observer still hears why.
                 observer->OnClose(self->close_reason_);
                 return;
               }
               self->observer_ = observer;
               self->ReadMore();
             });
}

// ---------------------------------------------------------------- receive --

// The connection whose received frames this thread is delivering. Frames
// sent meanwhile are written without a trip through the event loop: at once
// when the frame being delivered is the last one staged (a reply leaves
// before the handler's bookkeeping), otherwise together after the last one.
thread_local TcpConnection* delivering = nullptr;

void TcpConnection::ConsumeStaged() {
  using Phase = RxState::Phase;
  while (!torn_down_ && !receive_stopped_) {
    const size_t staged = staged_end_ - staged_begin_;
    std::byte* in = staging_.data() + staged_begin_;
    switch (rx_.phase) {
      case Phase::kPrefix: {
        if (staged < kFramePrefixSize) return ReadMore();
        const DecodedPrefix decoded = DecodeFramePrefix(
            std::span(in, kFramePrefixSize), options_.max_payload_size);
        if (decoded.verdict == PrefixVerdict::kMalformed) {
          return ProtocolError(decoded.error);
        }
        if (decoded.prefix.type != FrameType::kRpc ||
            decoded.prefix.credits != 0) {
          return ProtocolError(Status(
              StatusCode::kInternal,
              "malformed frame: RDMA control field on a TCP connection"));
        }
        staged_begin_ += kFramePrefixSize;
        rx_.prefix = decoded.prefix;
        rx_.filled = 0;
        rx_.discard_left = 0;
        uint64_t keep = decoded.prefix.header_size;
        if (decoded.verdict == PrefixVerdict::kPayloadTooLarge) {
          Log().warn("{}: {}; discarding it", peer_, decoded.error.message());
          rx_.discard_left = decoded.prefix.payload_size;
          Bump(stats_.oversized_frames_dropped);
        } else {
          keep += decoded.prefix.payload_size;
        }
        if (keep < tunables::kTcpReceiveInPlaceMin || !ReceiveInPlace(keep)) {
          rx_.block = PooledBuffer(keep);
        }
        rx_.phase = Phase::kBody;
        break;
      }
      case Phase::kBody: {
        const size_t need = rx_.block.size() - rx_.filled;
        const size_t take = std::min(need, staged);
        if (take > 0) std::memcpy(rx_.block.data() + rx_.filled, in, take);
        rx_.filled += take;
        staged_begin_ += take;
        if (rx_.filled < rx_.block.size()) {
          // Everything staged is consumed. A large remainder goes straight
          // into the block; a small one through the staging area.
          if (need - take >= kTcpCopyOutLimit) {
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
          }
          return ReadMore();
        }
        const bool discard = rx_.discard_left > 0;
        more_staged_ = staged_end_ > staged_begin_;
        DeliverFrame();
        more_staged_ = false;
        rx_.phase = discard ? Phase::kDiscard : Phase::kPrefix;
        break;
      }
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

void TcpConnection::ProtocolError(const Status& error) {
  Bump(stats_.protocol_errors);
  Log().warn("{}: closing: {}", peer_, error.message());
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
  rx_.filled = rx_.block.size();
  Bump(stats_.bytes_received, bytes);
  const bool discard = rx_.discard_left > 0;
  DeliverFrame();
  rx_.phase = discard ? RxState::Phase::kDiscard : RxState::Phase::kPrefix;
  ConsumeStaged();
}

void TcpConnection::DeliverFrame() {
  if (receive_stopped_) return;
  Bump(stats_.frames_received);
  ReceivedFrame frame(rx_.prefix.type, std::move(rx_.block),
                      rx_.prefix.header_size, rx_.discard_left);
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
  // Keep the unconsumed tail at the front so the rest of it can follow.
  if (staged_begin_ > 0) {
    const size_t tail = staged_end_ - staged_begin_;
    std::memmove(staging_.data(), staging_.data() + staged_begin_, tail);
    staged_begin_ = 0;
    staged_end_ = tail;
  }
  if (!direct_writes_) {  // A blocking socket: let Asio do the reading.
    socket_.async_read_some(
        asio::buffer(staging_.data() + staged_end_,
                     kTcpReceiveChunk - staged_end_),
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
  WaitReadable();
}

void TcpConnection::WaitReadable() {
  // Wait, then read once. (async_read_some would first try a read that
  // finds nothing, right after the last one drained the socket: one wasted
  // system call per message.)
  Bump(stats_.read_waits);
  socket_.async_wait(asio::ip::tcp::socket::wait_read,
                     Pooled([self = shared_from_this()](
                                const boost::system::error_code& error) {
                       if (self->torn_down_) return;
                       if (error) return self->OnReadError(error);
                       if (self->ReadStaged() == ReadOutcome::kWouldBlock) {
                         self->ReadMore();
                       }
                     }));
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
    if (now >= spin_until_) return WaitReadable();
  }
  PostToLoop(Pooled([self = shared_from_this()] { self->PollTurn(); }));
}

TcpConnection::ReadOutcome TcpConnection::ReadStaged() {
  // recv itself, not socket_.read_some: the socket is non-blocking, and
  // Asio's wrapper adds about 60 instructions of error-code plumbing to
  // every message.
  const size_t space = kTcpReceiveChunk - staged_end_;
  if (space == 0) {  // As read_some: reading nothing is not end-of-file.
    OnRead(0);
    return ReadOutcome::kHandled;
  }
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
  OnReadError(n == 0 ? boost::system::error_code(asio::error::eof)
                     : boost::system::error_code(
                           errno, boost::system::system_category()));
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

// ------------------------------------------------------------------- send --

Status TcpConnection::Send(OutgoingFrame frame) {
  if (frame.header.size() > tunables::kMaxCallHeaderSize) {
    return Status(StatusCode::kInternal, "frame header too large");
  }
  const uint64_t payload = frame.payload_size();
  if (payload > tunables::kMaxPayloadSizeLimit) {
    return Status(StatusCode::kResourceExhausted,
                  "payload of " + std::to_string(payload) +
                      " bytes exceeds the frame format's limit");
  }
  const EncodedPrefix prefix = EncodeFramePrefix(
      {frame.type, 0, static_cast<uint32_t>(frame.header.size()),
       static_cast<uint32_t>(payload)});
  // On our own loop thread, answering the last frame staged, with nothing
  // queued and no write in flight, the frame is written from here without
  // passing through the queue: every reply, and every next request of a
  // closed loop.
  if (delivering == this && !more_staged_ && direct_writes_ && !torn_down_) {
    // Without mu_: a reply must not wait on another thread's Send.
    if (closing_) return ClosedError(peer_);
    if (!flush_pending_.exchange(true)) {  // No write in flight or posted.
      WriteNow(prefix, std::move(frame));
      return Status();
    }
  }
  bool post = false;
  {
    std::lock_guard lock(mu_);
    if (closing_) return ClosedError(peer_);
    const uint64_t bytes = kFramePrefixSize + frame.header.size() + payload;
    if (Status room = CheckQueueRoom(queued_bytes_, bytes,
                                     options_.max_queued_bytes, peer_);
        !room.ok()) {
      return room;
    }
    queued_bytes_ += bytes;
    queue_.push_back({prefix, std::move(frame)});
    // Counted before the token is read: see LetGo.
    queued_frames_ = queue_.size();
    post = !flush_pending_.exchange(true);
  }
  if (post && delivering == this) {  // On our own thread, mid-delivery.
    if (more_staged_) {
      flush_after_delivery_ = true;
    } else {
      Flush();
    }
    return Status();
  }
  if (post) {
    PostFlush();
  }
  return Status();
}

void TcpConnection::WriteNow(const EncodedPrefix& prefix,
                             OutgoingFrame&& frame) {
  std::array<iovec, 2 + tunables::kMaxPayloadSlices> iov;
  size_t count = 0;
  size_t total = 0;
  const auto add = [&](const void* data, size_t size) {
    iov[count++] = {const_cast<void*>(data), size};
    total += size;
  };
  ForEachPiece(prefix, frame, add);
  msghdr message{};
  message.msg_iov = iov.data();
  message.msg_iovlen = count;
  Bump(stats_.write_calls);
  ssize_t n;
  do {
    n = SendMsg(socket_.native_handle(), &message);
  } while (n < 0 && errno == EINTR);
  if (static_cast<size_t>(n) == total) {
    Bump(stats_.frames_sent);
    Bump(stats_.bytes_sent, total);
    Bump(stats_.frames_written_directly);
    return LetGo();
  }
  // The socket took part of it, or none, or failed: the batch path takes
  // over, with this frame as its batch (no write is in flight).
  const int error = n < 0 ? errno : 0;
  writing_.push_back({prefix, std::move(frame)});
  if (error != 0 && error != EAGAIN && error != EWOULDBLOCK) {
    return OnWritten(
        boost::system::error_code(error, boost::system::system_category()), 0);
  }
  if (!WriteBatch(n > 0 ? static_cast<size_t>(n) : 0)) return;
  Flush();  // Frames queued meanwhile by other threads; then lets go.
}

void TcpConnection::LetGo() {
  // Send counts a queued frame before it reads the token; this clears the
  // token before it reads the count (all sequentially consistent). So
  // either that Send takes the token and posts a flush, or this sees the
  // frame and flushes it, if no one else took the token first.
  flush_pending_ = false;
  if (queued_frames_ == 0 && !close_after_flush_) return;
  if (!flush_pending_.exchange(true)) Flush();
}

void TcpConnection::PostFlush() {
  PostToLoop(Pooled([self = shared_from_this()] { self->Flush(); }));
}

void TcpConnection::Flush() {
  // A loop, not recursion: each pass writes what was queued meanwhile. After
  // a few passes it yields to the event loop, so a stream of Sends from
  // other threads cannot starve reads and timers.
  for (int pass = 0; !torn_down_; ++pass) {
    if (pass == 16) {
      return PostFlush();
    }
    {
      std::lock_guard lock(mu_);
      if (queue_.empty()) {
        flush_pending_ = false;
      } else {
        std::swap(queue_, writing_);
        queued_bytes_ = 0;
        queued_frames_ = 0;
      }
    }
    if (writing_.empty()) {
      if (close_after_flush_) CloseNow(*close_after_flush_);
      return;
    }
    if (!WriteBatch(0)) return;
  }
}

bool TcpConnection::WriteBatch(size_t already_written) {
  gather_.clear();
  size_t total = 0;
  auto add = [&](const void* data, size_t size) {
    gather_.emplace_back(data, size);
    total += size;
  };
  for (const QueuedFrame& queued : writing_) {
    ForEachPiece(queued.prefix, queued.frame, add);
  }
  size_t written = 0, first = 0;
  // Steps the gather list past `n` bytes that have left.
  const auto advance = [&](size_t n) {
    written += n;
    while (n > 0) {
      if (n >= gather_[first].size()) {
        n -= gather_[first++].size();
      } else {
        gather_[first] += n;
        n = 0;
      }
    }
  };
  advance(already_written);
  // Write now: on a socket with room (the usual case) the whole batch
  // leaves at once and no asynchronous operation is started.
  // One sendmsg takes up to IOV_MAX buffers (Asio's write_some only 64):
  // write until everything has left or the socket is full.
  boost::system::error_code error =
      direct_writes_ ? boost::system::error_code() : asio::error::would_block;
  while (!error && written < total) {
    const size_t count = std::min<size_t>(gather_.size() - first, IOV_MAX);
    iov_.resize(count);
    for (size_t i = 0; i < count; ++i) {
      iov_[i].iov_base = const_cast<void*>(gather_[first + i].data());
      iov_[i].iov_len = gather_[first + i].size();
    }
    msghdr message{};
    message.msg_iov = iov_.data();
    message.msg_iovlen = count;
    Bump(stats_.write_calls);
    const ssize_t n = SendMsg(socket_.native_handle(), &message);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = (errno == EAGAIN || errno == EWOULDBLOCK)
                  ? asio::error::would_block
                  : boost::system::error_code(errno,
                                              boost::system::system_category());
      break;
    }
    advance(static_cast<size_t>(n));
  }
  if (error && error != asio::error::would_block) {
    OnWritten(error, written);
    return false;
  }
  if (written == total) {
    FinishWrite(written);
    return true;
  }
  // The socket is full: the rest goes asynchronously.
  asio::async_write(
      socket_,
      GatherView{gather_.data() + first, gather_.data() + gather_.size()},
      Pooled([self = shared_from_this(), done = written](
                 const boost::system::error_code& error, size_t bytes) {
        self->OnWritten(error, done + bytes);
      }));
  return false;
}

void TcpConnection::FinishWrite(size_t bytes) {
  Bump(stats_.frames_sent, writing_.size());
  Bump(stats_.bytes_sent, bytes);
  writing_.clear();  // Releases every sent buffer.
}

void TcpConnection::OnWritten(const boost::system::error_code& error,
                              size_t bytes) {
  FinishWrite(bytes);
  if (torn_down_) return;
  if (error) {
    Log().info("{}: write failed: {}", peer_, error.message());
    return CloseNow(
        Status(StatusCode::kUnavailable,
               "connection to " + peer_ + " lost: " + error.message()));
  }
  Flush();
}

// ------------------------------------------------------------------ close --

void TcpConnection::Close(const Status& reason) {
  receive_stopped_ = true;  // Nothing more reaches the observer.
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  asio::post(socket_.get_executor(),
             [self = shared_from_this(), reason] { self->BeginClose(reason); });
}

void TcpConnection::BeginClose(const Status& reason) {
  if (torn_down_ || close_after_flush_) return;
  bool idle;
  {
    std::lock_guard lock(mu_);
    idle = !flush_pending_;
  }
  if (idle) return CloseNow(reason);
  // A write is in flight or posted: Flush closes when the queue runs dry.
  close_after_flush_ = reason;
  close_timer_.expires_after(tunables::kCloseFlushTimeout);
  close_timer_.async_wait(
      [self = shared_from_this(), reason](const boost::system::error_code& e) {
        if (!e) self->CloseNow(reason);
      });
}

void TcpConnection::CloseNow(const Status& reason) {
  if (torn_down_) return;
  torn_down_ = true;
  close_reason_ = reason;
  close_timer_.cancel();
  std::vector<QueuedFrame> unsent;
  {
    std::lock_guard lock(mu_);
    closing_ = true;
    unsent.swap(queue_);
    queued_bytes_ = 0;
    queued_frames_ = 0;
  }
  boost::system::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  rx_.block.Reset();
  NotifyClosed(std::move(observer_), reason, in_observer_,
               socket_.get_executor());
}

}  // namespace rdmarpc::transport::tcp
