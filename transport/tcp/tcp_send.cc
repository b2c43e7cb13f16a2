// TcpConnection: the send path (queue, gathered writes).
#include <limits.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>

#include "base/copy_bytes.h"
#include "base/log.h"
#include "base/pooled_handler.h"
#include "transport/peer_budget.h"
#include "transport/tcp/tcp_connection_internal.h"

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
  for (size_t i = 0; i < frame.payload_slices(); ++i) {
    add(frame.payload[i].data(), frame.payload[i].size());
  }
}

}  // namespace

namespace asio = boost::asio;
using tunables::kFramePrefixSize;

Status TcpConnection::Send(OutgoingFrame&& frame) {
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
  // closed loop. With more staged behind (or small frames of this read's
  // already coalesced), a small frame is copied to leave with the others.
  if (delivering == this && write_now_ && !torn_down_) {
    // Without mu_: a reply must not wait on another thread's Send.
    if (closing_) return ClosedError(peer_);
    if (more_staged_ || coalesced_.coalescing) {
      if (Coalesce(prefix, frame, payload)) return Status();
    } else if (!flush_pending_.exchange(true)) {  // No write in flight or
      WriteNow(prefix, std::move(frame));         // posted.
      return Status();
    }
  }
  bool post = false;
  {
    std::lock_guard lock(mu_);
    if (closing_) return ClosedError(peer_);
    // What the frame costs while it waits: its bytes and its queue entry.
    const uint64_t bytes = QueuedCost(frame.header.size(), payload);
    if (Status room = CheckQueueRoom(
            queued_bytes_ + writing_bytes_.load(std::memory_order_relaxed),
            bytes, options_.max_queued_bytes, peer_);
        !room.ok()) {
      if (!frame.may_wait) return room;
      Bump(stats_.frames_waited_for_room);
    } else if (PeerBytesFull(bytes) && !frame.may_wait) [[unlikely]] {
      return PeerMemoryFull(bytes);
    }
    ChargePeerBytes(bytes);
    queued_bytes_ += bytes;
    queue_.emplace_back(prefix, std::move(frame));
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
  const uint64_t cost = QueuedCost(frame.header.size(), frame.payload_size());
  ChargePeerBytes(cost);
  writing_bytes_.store(cost, std::memory_order_relaxed);
  writing_.push_back({prefix, std::move(frame)});
  if (error != 0 && error != EAGAIN && error != EWOULDBLOCK) {
    return OnWritten(
        boost::system::error_code(error, boost::system::system_category()), 0);
  }
  if (!WriteBatch(n > 0 ? static_cast<size_t>(n) : 0)) return;
  Flush();  // Frames queued meanwhile by other threads; then lets go.
}

bool TcpConnection::Coalesce(const EncodedPrefix& prefix,
                             const OutgoingFrame& frame, uint64_t payload) {
  const size_t size = prefix.size() + frame.header.size() + payload;
  if (size > tunables::kTcpCoalesceFrameMax) return false;
  Coalesced& c = coalesced_;
  if (!c.coalescing) {
    // The read's first: only with no write in flight or posted, whose
    // frames it would overtake. It takes the writer's token, as a direct
    // write does, and the flush after delivery writes the block.
    // The block is taken only with the token: a connection that is not
    // coalescing holds none (FinishWrite releases it).
    if (size > options_.max_queued_bytes) return false;
    if (flush_pending_.exchange(true)) return false;
    c.block = PooledBuffer(tunables::kTcpCoalesceCapacity);
    c.coalescing = true;
    flush_after_delivery_ = true;
  } else if (c.size + size > tunables::kTcpCoalesceCapacity ||
             c.size + size > options_.max_queued_bytes ||
             queued_frames_.load(std::memory_order_relaxed) != 0) {
    return false;  // Queued, behind the block; and so are the rest.
  }
  std::byte* out = c.block.data() + c.size;
  ForEachPiece(prefix, frame, [&out](const void* data, size_t n) {
    CopyBytes(out, data, n);
    out += n;
  });
  c.size += size;
  ++c.frames;
  Bump(stats_.frames_coalesced);
  return true;
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
      if (!queue_.empty()) {
        std::swap(queue_, writing_);
        writing_bytes_.store(queued_bytes_, std::memory_order_relaxed);
        queued_bytes_ = 0;
        queued_frames_ = 0;
      } else if (!coalesced_.coalescing) {
        flush_pending_ = false;
      }
    }
    if (coalesced_.coalescing) {
      // The block leaves first: the loop thread's frames queued after it.
      coalesced_.coalescing = false;
      coalesced_.in_batch = true;
      ChargePeerBytes(coalesced_.size);
      writing_bytes_.store(
          writing_bytes_.load(std::memory_order_relaxed) + coalesced_.size,
          std::memory_order_relaxed);
    }
    if (writing_.empty() && !coalesced_.in_batch) {
      if (close_after_flush_) CloseNow(*close_after_flush_);
      return;
    }
    if (!WriteBatch(0)) return;
  }
}

bool TcpConnection::WriteBatch(size_t already_written) {
  gather_.clear();
  gather_first_ = 0;
  gather_written_ = 0;
  gather_total_ = 0;
  auto add = [&](const void* data, size_t size) {
    gather_.emplace_back(data, size);
    gather_total_ += size;
  };
  if (coalesced_.in_batch) add(coalesced_.block.data(), coalesced_.size);
  for (const QueuedFrame& queued : writing_) {
    ForEachPiece(queued.prefix, queued.frame, add);
  }
  AdvanceGather(already_written);
  return ContinueBatch();
}

void TcpConnection::AdvanceGather(size_t n) {
  gather_written_ += n;
  while (n > 0) {
    if (n >= gather_[gather_first_].size()) {
      n -= gather_[gather_first_++].size();
    } else {
      gather_[gather_first_] += n;
      n = 0;
    }
  }
}

bool TcpConnection::ContinueBatch() {
  if (tls_ != nullptr) [[unlikely]] {
    return ContinueTlsBatch();
  }
  // Write now: on a socket with room (the usual case) the whole batch
  // leaves at once and no asynchronous operation is started. One sendmsg
  // takes up to IOV_MAX buffers and any number of bytes: write until
  // everything has left or the socket is full.
  boost::system::error_code error =
      direct_writes_ ? boost::system::error_code() : asio::error::would_block;
  while (!error && gather_written_ < gather_total_) {
    const size_t count =
        std::min<size_t>(gather_.size() - gather_first_, IOV_MAX);
    iov_.resize(count);
    for (size_t i = 0; i < count; ++i) {
      iov_[i].iov_base = const_cast<void*>(gather_[gather_first_ + i].data());
      iov_[i].iov_len = gather_[gather_first_ + i].size();
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
    AdvanceGather(static_cast<size_t>(n));
  }
  if (error && error != asio::error::would_block) {
    OnWritten(error, gather_written_);
    return false;
  }
  if (gather_written_ == gather_total_) {
    FinishWrite(gather_written_);
    return true;
  }
  if (!direct_writes_) {  // A blocking socket: let Asio do the writing.
    asio::async_write(
        socket_,
        GatherView{gather_.data() + gather_first_,
                   gather_.data() + gather_.size()},
        Pooled([self = shared_from_this(), done = gather_written_](
                   const boost::system::error_code& error, size_t bytes) {
          self->OnWritten(error, done + bytes);
        }));
    return false;
  }
  WaitWritable();
  return false;
}

void TcpConnection::WaitWritable() {
  // Wait for room, then write all it takes again. (Not asio::async_write:
  // it writes at most 64 KiB per system call, each a posted handler, and
  // waits in the reactor between them.)
  Bump(stats_.write_waits);
  socket_.async_wait(asio::ip::tcp::socket::wait_write,
                     Pooled([self = shared_from_this()](
                                const boost::system::error_code& error) {
                       if (self->torn_down_) return;
                       if (error)
                         return self->OnWritten(error, self->gather_written_);
                       if (self->ContinueBatch()) self->Flush();
                     }));
}

void TcpConnection::FinishWrite(size_t bytes) {
  Bump(stats_.frames_sent,
       writing_.size() + (coalesced_.in_batch ? coalesced_.frames : 0));
  Bump(stats_.bytes_sent, bytes);
  writing_.clear();  // Releases every sent buffer.
  if (coalesced_.in_batch) coalesced_ = Coalesced();
  ReleasePeerBytes(writing_bytes_.exchange(0, std::memory_order_relaxed));
}

Status TcpConnection::PeerMemoryFull(uint64_t bytes) const {
  return PeerMemoryFullError(bytes, peer_);
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
  if (reading_paused_) [[unlikely]] {
    CheckPausedReading();
  }
}

}  // namespace rdmarpc::transport::tcp
