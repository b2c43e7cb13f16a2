// TcpConnection: setup, keepalive and close.
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cstring>

#include "base/buffer_pool.h"
#include "base/large_block.h"
#include "base/log.h"
#include "base/log_throttle.h"
#include "transport/peer_budget.h"
#include "transport/tcp/tcp_connection_internal.h"

namespace rdmarpc::transport::tcp {

namespace asio = boost::asio;
using tunables::kTcpReceiveChunk;

// Staging blocks handed to frames come back through the large-block cache.
static_assert(kTcpReceiveChunk >= kLargeBlockMin);

TcpConnection::TcpConnection(asio::ip::tcp::socket socket,
                             const TransportOptions& options, Role role,
                             std::unique_ptr<tls::TlsSession> tls)
    : socket_(std::move(socket)),
      options_(options),
      max_payload_now_(options.max_payload_size),
      peer_(PeerUri(socket_, tls != nullptr ? "tls" : "tcp")),
      close_timer_(socket_.get_executor()),
      keepalive_timer_(socket_.get_executor()),
      keepalive_(options.keepalive_interval, options.keepalive_timeout,
                 options.min_ping_interval, options.frame_timeout),
      pause_timer_(socket_.get_executor()),
      staging_(PooledBuffer(kTcpReceiveChunk)),
      tls_(std::move(tls)) {
  boost::system::error_code ec;
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
  if (ec) Log().warn("{}: cannot set TCP_NODELAY: {}", peer_, ec.message());
  // Flush writes directly and must never block the event loop.
  socket_.non_blocking(true, ec);
  direct_writes_ = !ec;
  write_now_ = direct_writes_ && tls_ == nullptr;
  // (The executor is a copy: target() points into it, so keep it alive.)
  const auto executor = socket_.get_executor();
  if (const auto* loop = executor.target<asio::io_context::executor_type>()) {
    loop_ = *loop;
  }
  if (ec) Log().warn("{}: cannot set O_NONBLOCK: {}", peer_, ec.message());
  role_ = role;
  if (role == Role::kServer) {
    // At once, not at Start: the client's Connect waits for it. The socket
    // is fresh: its buffer takes these bytes whole.
    const auto hello = TcpControlFrame(KeepaliveKind::kHello);
    SendNow(hello);
    rx_.phase = RxState::Phase::kHello;
  }
}

void TcpConnection::RequireAdmission(uint64_t max_payload) {
  max_payload_now_ = std::min(max_payload, options_.max_payload_size);
  unadmitted_ = true;
}

void TcpConnection::AwaitHello() {
  // The client's HELLO is due within connect_timeout; close_timer_ is free
  // until the connection closes.
  close_timer_.expires_after(options_.connect_timeout);
  close_timer_.async_wait([self = shared_from_this()](
                              const boost::system::error_code& e) {
    if (e || self->torn_down_ || self->rx_.phase != RxState::Phase::kHello) {
      return;
    }
    Bump(self->stats_.hello_timeouts);
    const Status late(
        StatusCode::kDeadlineExceeded,
        "no HELLO from " + self->peer_ + " within " +
            std::to_string(self->options_.connect_timeout.count()) +
            " ms of connecting (connect_timeout)");
    if (const auto held = ThrottleLog("no hello", self->peer_)) {
      Log().info("{}: closing: {}{}", self->peer_, late.message(),
                 HeldBack(*held));
    }
    self->CloseNow(late);
  });
}

TcpConnection::~TcpConnection() {
  // Never closed (its loop ended first, or while a close waited for a
  // flush): what it still counts in the peer memory budget is given back.
  // CloseNow leaves both at 0.
  ReleasePeerBytes(queued_bytes_ +
                   writing_bytes_.load(std::memory_order_relaxed));
}

asio::any_io_executor TcpConnection::executor() const {
  return const_cast<asio::ip::tcp::socket&>(socket_).get_executor();
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
               if (self->rx_.phase == RxState::Phase::kHello)
                 self->AwaitHello();
               self->ReadMore();
               self->ArmKeepalive();
             });
}

void TcpConnection::ArmKeepalive() {
  transport::ArmKeepalive(
      keepalive_timer_, keepalive_, stats_, peer_, shared_from_this(),
      [this] { return torn_down_; },
      [this]() -> std::optional<uint64_t> {
        // Part of a frame (or of its prefix) has arrived: the frames
        // received before it name it.
        if (rx_.phase == RxState::Phase::kPrefix &&
            staged_end_ == staged_begin_) {
          return std::nullopt;
        }
        return stats_.frames_received.load(std::memory_order_relaxed);
      },
      [this] { SendKeepalive(KeepaliveKind::kPing); },
      [this](const Status& dead) { CloseNow(dead); });
}

void TcpConnection::SendKeepalive(KeepaliveKind kind) {
  OutgoingFrame frame;
  frame.type = FrameType::kControl;
  *frame.header.Prepare(1) = std::byte{static_cast<uint8_t>(kind)};
  frame.header.Commit(1);
  // A full queue or a closing connection: nothing to add.
  (void)Send(std::move(frame));
}

// A keepalive frame received (DeliverFrame).
void TcpConnection::OnKeepalive(KeepaliveKind kind) {
  switch (kind) {
    case KeepaliveKind::kPing: {
      if (!keepalive_.PingReceived(tunables::kFramePrefixSize + 1,
                                   std::chrono::steady_clock::now())) {
        return TooManyPings();
      }
      // Owed unless the last PONG has not left yet (nor has what followed
      // it): a peer that pings and never reads gets one PONG queued.
      const bool sending =
          queued_frames_.load(std::memory_order_relaxed) != 0 ||
          flush_pending_.load(std::memory_order_relaxed);
      if (pong_sent_ && sending) return;
      pong_sent_ = true;
      return SendKeepalive(KeepaliveKind::kPong);
    }
    case KeepaliveKind::kPong:
      return;
    case KeepaliveKind::kHello:
      return ProtocolError(
          Status(StatusCode::kInternal, "malformed frame: a second HELLO"));
    case KeepaliveKind::kTooManyPings: {
      const Status told = KeepaliveClock::ToldTooManyPings(peer_);
      Log().warn("{}: {}", peer_, told.message());
      return CloseNow(told);
    }
  }
  ProtocolError(Status(StatusCode::kInternal,
                       "malformed frame: unknown TCP control kind " +
                           std::to_string(static_cast<int>(kind))));
}

void TcpConnection::TooManyPings() {
  const Status status = keepalive_.TooManyPings(peer_);
  Bump(stats_.pings_refused);
  if (const auto held = ThrottleLog("too many pings", peer_)) {
    Log().warn("{}: closing: {}{}", peer_, status.message(), HeldBack(*held));
  }
  receive_stopped_ = true;  // Nothing more is read or delivered.
  // The peer learns why, unless it does not read: then the close waits at
  // most kCloseFlushTimeout for it.
  SendKeepalive(KeepaliveKind::kTooManyPings);
  BeginClose(status);
}

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
  keepalive_timer_.cancel();
  pause_timer_.cancel();
  std::vector<QueuedFrame> unsent;
  {
    std::lock_guard lock(mu_);
    closing_ = true;
    unsent.swap(queue_);
    ReleasePeerBytes(queued_bytes_ +
                     writing_bytes_.exchange(0, std::memory_order_relaxed));
    queued_bytes_ = 0;
    queued_frames_ = 0;
  }
  boost::system::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  rx_.block.Reset();
  EndBulk(reason);
  NotifyClosed(std::move(observer_), reason, in_observer_,
               socket_.get_executor());
}

}  // namespace rdmarpc::transport::tcp
