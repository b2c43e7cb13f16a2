// Subchannel (rpc/client/subchannel.h): the connection's life. Connecting,
// backing off and reconnecting, a subchannel kept connected, the server's
// GOAWAY and the connection's close. rpc/client/subchannel.cc has the call
// path.
#include <boost/asio/post.hpp>
#include <mutex>
#include <vector>

#include "base/log.h"
#include "rpc/client/subchannel.h"
#include "rpc/wire/wire_codec.h"
#include "transport/factory/factory.h"

namespace rdmarpc::rpc {

namespace asio = boost::asio;
using transport::Connection;

void Subchannel::KeepConnected(std::function<void(ChannelState)> on_state,
                               Repick repick) {
  {
    std::lock_guard lock(mu_);
    keep_connected_ = true;
    on_state_ = std::move(on_state);
    repick_ = std::move(repick);
    if (shut_down_ || state_ != ChannelState::kIdle) return;
    state_ = ChannelState::kConnecting;
  }
  asio::post(context_, [self = shared_from_this()] { self->StartConnect(); });
}

void Subchannel::ConnectNow() {
  {
    std::lock_guard lock(mu_);
    if (shut_down_ || goaway_ || state_ != ChannelState::kIdle) return;
    state_ = ChannelState::kConnecting;
  }
  asio::post(context_, [self = shared_from_this()] { self->StartConnect(); });
}

void Subchannel::StartConnect() {
  Log().debug("{}: connecting", target_);
  transport::Connect(context_, target_, options_.transport,
                     [self = shared_from_this()](
                         StatusOr<std::shared_ptr<Connection>> result) {
                       self->OnConnected(std::move(result));
                     });
}

void Subchannel::OnConnected(StatusOr<std::shared_ptr<Connection>> result) {
  std::vector<CallTable::Entry> failed;
  Status failure;
  std::optional<ChannelState> notify;
  {
    std::lock_guard lock(mu_);
    if (shut_down_) {
      if (result.ok()) {
        (*result)->Close(Status(StatusCode::kCancelled, "channel shut down"));
      }
      return;
    }
    if (result.ok()) {
      ++stats_.connects;
      connection_ = std::move(*result);
      state_ = ChannelState::kReady;
      backoff_ = options_.initial_backoff;
      Log().info("{}: connected ({})", target_, connection_->peer());
      connection_->Start(shared_from_this());
      notify = ChannelState::kReady;
      for (auto& [id, frame, wait_for_ready, window_bytes, bulk] : waiting_) {
        // Calls that timed out or were cancelled while waiting stay unsent.
        if (!calls_.Contains(id)) continue;
        if (window_bytes != 0 && (!held_.empty() || !WindowAdmits())) {
          Hold({id, std::move(frame), wait_for_ready, window_bytes,
                std::move(bulk)});
          continue;
        }
        calls_.Charge(id, window_bytes);
        const Status sent =
            SendRequest(connection_, std::move(frame), bulk.get());
        // (UNAVAILABLE: the connection is closing; OnClose fails the call.)
        if (!sent.ok() && sent.code() != StatusCode::kUnavailable) {
          if (auto done = calls_.Take(id)) {
            failed.emplace_back(id, std::move(*done));
            failure = sent;  // RESOURCE_EXHAUSTED: the send queue is full.
          }
        }
      }
      waiting_.clear();
    } else {
      ++stats_.connect_failures;
      connect_error_ = result.status();
      state_ = ChannelState::kTransientFailure;
      backoff_until_ = Clock::now() + backoff_;
      Log().info("{}: {}; backing off {} ms", target_, connect_error_.message(),
                 backoff_.count());
      backoff_ = std::min(options_.max_backoff,
                          std::chrono::duration_cast<std::chrono::milliseconds>(
                              backoff_ * options_.backoff_multiplier));
      // Wait-for-ready calls still open stay for the next attempt; the
      // others fail now.
      std::erase_if(waiting_, [&](Waiting& waiting) {
        if (waiting.wait_for_ready && calls_.Contains(waiting.id)) {
          return false;
        }
        ResponseCallback done;
        std::shared_ptr<ResponseMetadata> sink;
        if (calls_.Take(waiting.id, &done, &sink)) {
          MarkNotRun(sink);  // It never left.
          failed.emplace_back(waiting.id, std::move(done));
        }
        return true;
      });
      if (!waiting_.empty() || keep_connected_) {
        asio::post(context_, [self = shared_from_this()] {
          self->ReconnectAfterBackoff();
        });
      }
      failure = Status(StatusCode::kUnavailable, connect_error_.message());
      notify = ChannelState::kTransientFailure;
    }
  }
  if (notify) NotifyState(*notify);
  FailAll(failed, failure);  // Outside the lock: a callback may call again.
}

void Subchannel::ReconnectAfterBackoff() {
  Clock::time_point when;
  {
    std::lock_guard lock(mu_);
    if (shut_down_ || state_ != ChannelState::kTransientFailure ||
        (waiting_.empty() && !keep_connected_)) {
      return;
    }
    when = backoff_until_;
  }
  reconnect_timer_.expires_at(when);
  reconnect_timer_.async_wait([self = shared_from_this()](
                                  const boost::system::error_code& error) {
    if (error) return;
    {
      std::lock_guard lock(self->mu_);
      if (self->shut_down_ || self->state_ != ChannelState::kTransientFailure) {
        return;
      }
      // Only calls still waiting are worth a connect.
      std::erase_if(self->waiting_, [&](const Waiting& waiting) {
        return !self->calls_.Contains(waiting.id);
      });
      if (self->waiting_.empty() && !self->keep_connected_) return;
      self->state_ = ChannelState::kConnecting;
    }
    self->StartConnect();
  });
}

void Subchannel::OnGoAway() {
  {
    std::lock_guard lock(mu_);
    if (goaway_ || !connection_) return;
  }
  Log().info("{}: the server is going away; new calls {}", target_,
             repick_ ? "go to other endpoints" : "wait for it to close");
  // A cluster stops picking it first. A call that picked it before then
  // and comes to mu_ before goaway_ is set is sent here (the answer waits
  // for it: sending_); one that comes after is picked again (Enqueue), and
  // the cluster no longer picks this one.
  NotifyState(ChannelState::kIdle);
  std::shared_ptr<Connection> connection;
  {
    std::lock_guard lock(mu_);
    if (goaway_ || !connection_) return;  // Closed meanwhile.
    goaway_ = true;
    connection = connection_;
  }
  AnswerGoAway(std::move(connection));
}

void Subchannel::AnswerGoAway(std::shared_ptr<Connection> connection) {
  if (sending_.load(std::memory_order_acquire) != 0) {
    // A Start took the connection before GOAWAY and sends any moment.
    asio::post(context_, [self = shared_from_this(),
                          connection = std::move(connection)]() mutable {
      self->AnswerGoAway(std::move(connection));
    });
    return;
  }
  connection->Send(MakeGoAwayFrame()).IgnoreError();
}

void Subchannel::OnClose(const Status& reason) {
  std::vector<CallTable::Entry> failed;
  std::vector<std::shared_ptr<BulkLoans>> released;  // The QP is gone.
  bool reconnect = false;
  bool backing_off = false;
  bool dead = false;  // Keepalive gave up on the peer.
  {
    std::lock_guard lock(mu_);
    if (connection_) {
      ++stats_.disconnects;
      const uint64_t timeouts = connection_->stats().keepalive_timeouts;
      stats_.keepalive_timeouts += timeouts;
      dead = timeouts > 0;
    }
    connection_.reset();
    if (!awaiting_release_.empty()) released = TakeAllAwaitingLocked();
    if (state_ == ChannelState::kReady) state_ = ChannelState::kIdle;
    // Calls made after a GOAWAY, and requests the window held back, never
    // left: they go on the next connection, as a call made while connecting
    // does. The rest fail.
    goaway_ = false;
    RequeueHeld();
    std::vector<uint64_t> unsent;
    for (const Waiting& waiting : waiting_) unsent.push_back(waiting.id);
    calls_.TakeAllExcept(unsent, &failed);
    std::erase_if(waiting_, [this](const Waiting& waiting) {
      return !calls_.Contains(waiting.id);
    });
    if (dead && !shut_down_) {
      // Skipped for as long as the peer was given to answer: the kernel
      // still accepts for a hung process, so calls (and retries) connecting
      // again would each wait out connect_timeout for its HELLO.
      state_ = ChannelState::kTransientFailure;
      connect_error_ = reason;
      backoff_until_ = Clock::now() +
                       std::max(backoff_, options_.transport.keepalive_timeout);
      backing_off = keep_connected_ || !waiting_.empty();
    } else if (!shut_down_ && state_ == ChannelState::kIdle &&
               (keep_connected_ || !waiting_.empty())) {
      state_ = ChannelState::kConnecting;
      reconnect = true;
    }
  }
  NotifyState(dead ? ChannelState::kTransientFailure : ChannelState::kIdle);
  if (reconnect) {
    asio::post(context_, [self = shared_from_this()] { self->StartConnect(); });
  }
  if (backing_off) {
    asio::post(context_,
               [self = shared_from_this()] { self->ReconnectAfterBackoff(); });
  }
  if (!failed.empty() || reason.code() != StatusCode::kCancelled) {
    Log().info("{}: connection closed: {}; failing {} calls", target_,
               reason.message(), failed.size());
  }
  for (const auto& loans : released) loans->Released();
  FailAll(failed, Status(StatusCode::kUnavailable,
                         "connection lost: " + reason.message()));
}

}  // namespace rdmarpc::rpc
