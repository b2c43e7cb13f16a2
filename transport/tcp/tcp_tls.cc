// TcpConnection's reads and writes through its TlsSession (the handshake
// before it exists: tcp_tls_handshake.cc).
#include "transport/tcp/tcp_tls.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "base/pooled_handler.h"
#include "transport/tcp/tcp_connection_internal.h"

namespace rdmarpc::transport::tcp {

namespace asio = boost::asio;

using tunables::kTlsCipherAhead;
using tunables::kTlsRecordPlaintext;

TcpConnection::ReadOutcome TcpConnection::ReadTls(std::byte* into, size_t space,
                                                  size_t* got) {
  *got = 0;
  for (;;) {
    // OpenSSL only when a whole record is in (an SSL_read that finds none
    // costs about 3,000 instructions).
    if (tls_->HasReadable()) {
      auto n = tls_->Read(std::span(into, space));
      if (!n.ok()) {
        Log().info("{}: {}", peer_, n.status().message());
        CloseNow(Status(n.status().code(), "connection to " + peer_ + ": " +
                                               n.status().message()));
        return ReadOutcome::kHandled;
      }
      if (*n > 0) {
        *got = *n;
        return ReadOutcome::kHandled;
      }
    }
    const ssize_t received = ReceiveCiphertext(socket_.native_handle(), *tls_);
    if (received > 0) continue;
    if (received < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return ReadOutcome::kWouldBlock;
    }
    OnReadError(received == 0 ? boost::system::error_code(asio::error::eof)
                              : boost::system::error_code(
                                    errno, boost::system::system_category()));
    return ReadOutcome::kHandled;
  }
}

TcpConnection::ReadOutcome TcpConnection::ReadStagedTls(size_t space) {
  size_t got = 0;
  const ReadOutcome outcome =
      ReadTls(staging_.data() + staged_end_, space, &got);
  if (outcome == ReadOutcome::kHandled && got > 0) {
    read_filled_space_ = got == space;
    OnRead(got);
  }
  return outcome;
}

bool TcpConnection::PostTlsReadable() {
  if (!tls_->HasReadable()) return false;
  PostToLoop(Pooled([self = shared_from_this()] {
    if (!self->torn_down_) self->OnStagingReadable();
  }));
  return true;
}

ssize_t TcpConnection::ReadBodyTls(std::byte* into, size_t space) {
  size_t got = 0;
  if (ReadTls(into, space, &got) == ReadOutcome::kWouldBlock) {
    errno = EAGAIN;
    return -1;
  }
  return static_cast<ssize_t>(got);
}

bool TcpConnection::EncryptGather(size_t ahead) {
  // Small pieces (prefixes, headers, small payloads) are copied into one
  // record; a piece of a record's size or more is encrypted where it is,
  // up to `ahead` bytes of it.
  std::array<std::byte, kTlsRecordPlaintext> record;
  size_t used = 0;
  while (gather_written_ < gather_total_ && used < record.size()) {
    const asio::const_buffer piece = gather_[gather_first_];
    if (used == 0 && piece.size() >= record.size()) {
      const size_t n = std::min(piece.size(), ahead);
      if (!tls_->Write(
                   std::span(static_cast<const std::byte*>(piece.data()), n))
               .ok()) {
        return false;
      }
      AdvanceGather(n);
      return true;
    }
    const size_t n = std::min(piece.size(), record.size() - used);
    std::memcpy(record.data() + used, piece.data(), n);
    used += n;
    AdvanceGather(n);
  }
  return used == 0 || tls_->Write(std::span(record).first(used)).ok();
}

bool TcpConnection::ContinueTlsBatch() {
  // The first record goes out alone, so that the peer decrypts it while
  // the next are encrypted; each send after it may carry twice as much, up
  // to kTlsCipherAhead. A 64 KiB call then costs 3 sends, not 1, and its
  // round trip about a fifth less; a long batch only a few sends more.
  size_t ahead = kTlsRecordPlaintext;
  for (;;) {
    while (tls_->Outgoing().size() < ahead && gather_written_ < gather_total_) {
      if (!EncryptGather(ahead)) {
        OnWritten(asio::error::fault, gather_written_);
        return false;
      }
    }
    const auto out = tls_->Outgoing();
    if (out.empty()) {
      FinishWrite(gather_written_);
      return true;
    }
    Bump(stats_.write_calls);
    const ssize_t n = ::send(socket_.native_handle(), out.data(), out.size(),
                             MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      tls_->Consume(static_cast<size_t>(n));
      ahead = std::min(2 * ahead, kTlsCipherAhead);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      OnWritten(
          boost::system::error_code(errno, boost::system::system_category()),
          gather_written_);
      return false;
    }
    WaitWritable();
    return false;
  }
}

void TcpConnection::SendNow(std::span<const std::byte> bytes) {
  if (tls_ != nullptr) {
    // Behind any ciphertext still queued; what does not go now leaves
    // with the next batch.
    if (!tls_->Write(bytes).ok()) return;
    const auto out = tls_->Outgoing();
    const ssize_t n = ::send(socket_.native_handle(), out.data(), out.size(),
                             MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) tls_->Consume(static_cast<size_t>(n));
    return;
  }
  ::send(socket_.native_handle(), bytes.data(), bytes.size(),
         MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace rdmarpc::transport::tcp
