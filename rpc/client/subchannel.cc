// Subchannel (rpc/client/subchannel.h): the call path, the request window
// and the deadline timer, on the channel's event loop.
// rpc/client/subchannel_receive.cc has the frames that come back,
// rpc/client/subchannel_connection.cc the connection's life; rpc/channel.cc
// is the public Channel over it.
#include "rpc/client/subchannel.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "base/latency_trace.h"
#include "base/log.h"
#include "rdmarpc/retry_options.h"
#include "rdmarpc/tunables.h"
#include "rpc/client/bulk_loans.h"
#include "rpc/wire/wire_codec.h"

namespace rdmarpc::rpc {

namespace asio = boost::asio;
using transport::Connection;
using transport::OutgoingFrame;

// ----------------------------------------------------------- Subchannel --

void MarkNotRun(const std::shared_ptr<ResponseMetadata>& sink) {
  if (sink) sink->trailers.Add(kNotRunTrailer, "1");
}

// The timeout a REQUEST carries for `deadline`; 0: none for the server.
uint64_t TimeoutMicros(const std::optional<Clock::time_point>& deadline,
                       Clock::time_point now) {
  if (!deadline || *deadline - now > tunables::kMaxTimeout) return 0;
  return std::max<int64_t>(
      1, std::chrono::duration_cast<std::chrono::microseconds>(*deadline - now)
             .count());
}

Subchannel::CallId Subchannel::Start(
    std::string_view service, std::string_view method, uint64_t method_id,
    Payload&& request, const CallOptions& options, ResponseCallback&& done,
    StreamKind kind, std::shared_ptr<ClientStreamState> stream) {
  // The request and `done` move only into the frame and the call table:
  // the helpers below take them by reference.
  if (interceptors_) [[unlikely]] {
    return StartIntercepted(service, method, method_id, request, options, done,
                            kind, stream);
  }
  return Admit(service, method, method_id, request, options, done, kind,
               stream);
}

// Out of Start's way: a call without interceptors constructs no copy of its
// options (an empty std::optional<CallOptions> there cost 23 instructions).
[[gnu::noinline]] Subchannel::CallId Subchannel::StartIntercepted(
    std::string_view service, std::string_view method, uint64_t method_id,
    Payload& request, const CallOptions& options, ResponseCallback& done,
    StreamKind kind, std::shared_ptr<ClientStreamState>& stream) {
  CallOptions intercepted(options);
  if (!Intercept(service, method, kind, intercepted, done)) return 0;
  return Admit(service, method, method_id, request, intercepted, done, kind,
               stream);
}

// Inlined into Start and StartIntercepted.
[[gnu::always_inline]] inline Subchannel::CallId Subchannel::Admit(
    std::string_view service, std::string_view method, uint64_t method_id,
    Payload& request, const CallOptions& call_options, ResponseCallback& done,
    StreamKind kind, std::shared_ptr<ClientStreamState>& stream) {
  if (method_id != 0) service = method = {};
  RDMARPC_TRACE(0, "call");
  // Read the clock only for a deadline: on some machines (a VM on an HPET
  // clock source) a read costs microseconds.
  const auto now = call_options.deadline ? Clock::now() : Clock::time_point();
  std::string metadata;              // Encoded; none on most calls.
  std::shared_ptr<BulkLoans> loans;  // None on most calls.
  if (!Validate(request.size(), service.size() + method.size(), call_options,
                now, done, metadata, loans)) {
    return 0;
  }
  const uint64_t timeout_us = TimeoutMicros(call_options.deadline, now);
  return Enqueue(service, method, method_id, request, call_options, done, kind,
                 stream, metadata, loans, timeout_us, /*may_repick=*/true);
}

// Inlined into Admit (the call path) and into RepickAfterGoAway.
[[gnu::always_inline]] inline Subchannel::CallId Subchannel::Enqueue(
    std::string_view service, std::string_view method, uint64_t method_id,
    Payload& request, const CallOptions& call_options, ResponseCallback& done,
    StreamKind kind, std::shared_ptr<ClientStreamState>& stream,
    const std::string& metadata, std::shared_ptr<BulkLoans>& loans,
    uint64_t timeout_us, bool may_repick) {
  std::unique_lock lock(mu_);
  if ((shut_down_ || state_ == ChannelState::kTransientFailure) &&
      !AdmitLocked(lock, call_options, done)) [[unlikely]] {
    return 0;
  }
  if (goaway_ && may_repick && !stream && repick_) [[unlikely]] {
    lock.unlock();  // The cluster's lock comes before this one.
    return RepickAfterGoAway(service, method, method_id, request, call_options,
                             done, metadata, loans, timeout_us);
  }
  const CallId id = calls_.Add(std::move(done), call_options.deadline,
                               call_options.response_metadata);
  if (loans) [[unlikely]] {
    calls_.SetLoans(id, loans.get());
  }
  if (stream) {
    stream->id = id;
    streams_.emplace(id, std::move(stream));
  }
  // Forced inline: gcc would call it out of line here, 30 instructions a
  // call more (tools/bench-cpu).
  const auto request_frame = [&]() __attribute__((always_inline)) {
    return RequestFrame(id, kind, service, method, method_id, timeout_us,
                        std::move(request), metadata);
  };
  // Encoded and sent outside the lock: a Send on the connection's thread may
  // write at once, and other callers need not wait out that system call.
  // Only a unary request counts in the request window (a stream's messages
  // follow its REQUEST at once, and have their own flow control).
  const uint64_t window_bytes =
      kind == StreamKind::kUnary && options_.max_request_bytes_in_flight != 0
          ? request.size()
          : 0;
  std::shared_ptr<Connection> ready;
  if (state_ == ChannelState::kReady && !goaway_ &&
      (window_bytes == 0 || (held_.empty() && WindowAdmits()))) [[likely]] {
    calls_.Charge(id, window_bytes);
    ready = connection_;
    sending_.fetch_add(1, std::memory_order_relaxed);
  } else if (state_ == ChannelState::kReady && !goaway_) {
    // Past the request window: the call waits its turn here.
    if (RefusedQueueFull(lock, id, window_bytes)) return 0;
    Hold({id, request_frame(), call_options.wait_for_ready, window_bytes,
          loans});
  } else {
    AwaitConnectionLocked({id, request_frame(), call_options.wait_for_ready,
                           window_bytes, loans});
  }
  if (call_options.deadline) ArmLocked(*call_options.deadline);
  lock.unlock();
  if (ready) {
    RDMARPC_TRACE(0, "encode");
    const Status sent = loans ? SendRequest(ready, request_frame(), loans.get())
                              : ready->Send(request_frame());
    sending_.fetch_sub(1, std::memory_order_release);
    // UNAVAILABLE: the connection is closing and OnClose fails the call.
    if (!sent.ok() && sent.code() != StatusCode::kUnavailable) {
      FailUnsent(id, sent);
      return id;
    }
  }
  // Outside the lock: an already cancelled token cancels at once.
  if (call_options.cancellation)
    AttachCancellation(*call_options.cancellation, id);
  return id;
}

// The cluster stopped picking this subchannel (OnGoAway notified it before
// setting goaway_), so repick_ names another, if one is ready.
[[gnu::noinline]] Subchannel::CallId Subchannel::RepickAfterGoAway(
    std::string_view service, std::string_view method, uint64_t method_id,
    Payload& request, const CallOptions& options, ResponseCallback& done,
    const std::string& metadata, std::shared_ptr<BulkLoans>& loans,
    uint64_t timeout_us) {
  std::shared_ptr<Subchannel> other = repick_(options);
  Subchannel& to = other ? *other : *this;
  if (other) {
    std::lock_guard lock(mu_);
    ++stats_.calls_repicked;
  }
  std::shared_ptr<ClientStreamState> no_stream;
  return to.Enqueue(service, method, method_id, request, options, done,
                    StreamKind::kUnary, no_stream, metadata, loans, timeout_us,
                    /*may_repick=*/false);
}

bool Subchannel::LendsBulk(const CallOptions& options, ResponseCallback& done,
                           std::shared_ptr<BulkLoans>& loans) {
  loans = std::make_shared<BulkLoans>(options.bulk);
  if (Status valid = loans->Validate(); !valid.ok()) {
    Complete(std::move(done), valid, Buffer());
    return false;
  }
  // Revoked as the call ends, whichever way, before the caller hears of it;
  // then the response's attachment is in the destination, if it has one.
  done = [loans, done = std::move(done)](const Status& status,
                                         Payload response) mutable {
    loans->Revoke([loans, done = std::move(done), status,
                   response = std::move(response)]() mutable {
      Status landed = status;
      if (landed.ok()) landed = loans->Land(response);
      done(landed, landed.ok() ? std::move(response) : Payload());
    });
  };
  return true;
}

bool Subchannel::EncodeMetadata(const Metadata& metadata, std::string* out,
                                ResponseCallback& done) {
  StatusOr<std::string> encoded =
      EncodeOutgoingMetadata(metadata, "request metadata");
  if (!encoded.ok()) {
    Complete(std::move(done), encoded.status(), Buffer());
    return false;
  }
  *out = std::move(*encoded);
  return true;
}

OutgoingFrame Subchannel::RequestFrame(CallId id, StreamKind kind,
                                       std::string_view service,
                                       std::string_view method,
                                       uint64_t method_id, uint64_t timeout_us,
                                       Payload&& request,
                                       const std::string& metadata) const {
  OutgoingFrame frame =
      kind != StreamKind::kUnary
          ? MakeStreamRequestFrame(
                id, method_id, timeout_us,
                static_cast<CallHeader::StreamKind>(static_cast<int>(kind)), 0,
                0, std::move(request), metadata)
          : MakeRequestFrame(id, service, method, method_id, timeout_us,
                             std::move(request), metadata);
  frame.may_wait = options_.wait_for_room;
  return frame;
}

void Subchannel::AttachCancellation(CallCancellation& token, CallId id) {
  token.Attach([weak = weak_from_this(), id] {
    if (auto self = weak.lock()) self->Cancel(id);
  });
}

// Inlined into its one caller, on the call path: split out for reading only.
[[gnu::always_inline]] inline bool Subchannel::Validate(
    size_t request_size, size_t names_size, const CallOptions& options,
    Clock::time_point now, ResponseCallback& done, std::string& metadata,
    std::shared_ptr<BulkLoans>& loans) {
  if (request_size > options_.max_request_size) [[unlikely]] {
    Complete(std::move(done),
             Status(StatusCode::kResourceExhausted,
                    "request of " + std::to_string(request_size) +
                        " bytes exceeds the channel's maximum of " +
                        std::to_string(options_.max_request_size)),
             Buffer());
    return false;
  }
  if (names_size > tunables::kMaxMethodNameSize) [[unlikely]] {
    Complete(
        std::move(done),
        Status(StatusCode::kInvalidArgument,
               "service and method names exceed " +
                   std::to_string(tunables::kMaxMethodNameSize) + " bytes"),
        Buffer());
    return false;
  }
  if (options.deadline && *options.deadline <= now) [[unlikely]] {
    Complete(std::move(done),
             Status(StatusCode::kDeadlineExceeded,
                    "deadline passed before the call started"),
             Buffer());
    return false;
  }
  if (!options.metadata.empty() &&
      !EncodeMetadata(options.metadata, &metadata, done)) [[unlikely]] {
    return false;
  }
  if (!options.bulk.empty()) [[unlikely]] {
    return LendsBulk(options, done, loans);
  }
  return true;
}

bool Subchannel::AdmitLocked(std::unique_lock<FutexMutex>& lock,
                             const CallOptions& options,
                             ResponseCallback& done) {
  if (shut_down_) {
    const Status refused = shutdown_status_;
    lock.unlock();
    Complete(std::move(done), refused, Buffer());
    return false;
  }
  if (state_ != ChannelState::kTransientFailure || options.wait_for_ready) {
    return true;
  }
  if (const auto when = Clock::now(); when < backoff_until_) {
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
        backoff_until_ - when);
    Status error(StatusCode::kUnavailable,
                 connect_error_.message() + " (next attempt in " +
                     std::to_string(wait.count()) + " ms)");
    lock.unlock();
    MarkNotRun(options.response_metadata);
    Complete(std::move(done), error, Buffer());
    return false;
  }
  state_ = ChannelState::kIdle;
  return true;
}

bool Subchannel::RefusedQueueFull(std::unique_lock<FutexMutex>& lock, CallId id,
                                  uint64_t window_bytes) {
  if (options_.wait_for_room || held_.empty() ||
      held_bytes_ + window_bytes <= options_.transport.max_queued_bytes) {
    return false;
  }
  std::optional<ResponseCallback> refused = calls_.Take(id);
  Status full(StatusCode::kResourceExhausted,
              "send queue to " + target_ + " is full (" +
                  std::to_string(held_bytes_) +
                  " bytes of requests wait for the request window, "
                  "limit transport.max_queued_bytes " +
                  std::to_string(options_.transport.max_queued_bytes) +
                  "): the server is not keeping up");
  lock.unlock();
  Complete(std::move(*refused), full, Buffer());
  return true;
}

void Subchannel::AwaitConnectionLocked(Waiting waiting) {
  waiting_.push_back(std::move(waiting));
  // Backing off, a wait-for-ready call waits for the next attempt.
  if (state_ == ChannelState::kTransientFailure) {
    asio::post(context_,
               [self = shared_from_this()] { self->ReconnectAfterBackoff(); });
  }
  if (state_ == ChannelState::kIdle && !goaway_) {
    state_ = ChannelState::kConnecting;
    asio::post(context_, [self = shared_from_this()] { self->StartConnect(); });
  }
}

void Subchannel::ArmLocked(Clock::time_point deadline) {
  if (armed_ && *armed_ <= deadline) return;
  armed_ = deadline;
  asio::post(context_, [self = shared_from_this()] { self->ArmTimer(); });
}

void Subchannel::FailUnsent(CallId id, const Status& refused) {
  std::optional<ResponseCallback> failed;
  {
    std::lock_guard lock(mu_);
    failed = calls_.Take(id);
  }
  if (failed) Complete(std::move(*failed), refused, Buffer());
}

bool Subchannel::Intercept(std::string_view service, std::string_view method,
                           StreamKind kind, CallOptions& options,
                           ResponseCallback& done) {
  const ClientCallInfo call{target_, service, method, kind};
  Status verdict;
  size_t passed = 0;
  for (const auto& interceptor : *interceptors_) {
    try {
      verdict = interceptor->OnCall(call, options);
    } catch (const std::exception& e) {
      verdict = Status(StatusCode::kInternal,
                       std::string("an interceptor threw: ") + e.what());
    }
    if (!verdict.ok()) break;
    ++passed;
  }
  // The call's names may not outlive it: its OnEnd gets copies.
  ResponseCallback wrapped =
      [chain = interceptors_, passed, start = Clock::now(), target = target_,
       service = std::string(service), method = std::string(method), kind,
       done = std::move(done)](const Status& status, Payload response) mutable {
        const ClientCallInfo ended{target, service, method, kind};
        const auto elapsed = Clock::now() - start;
        for (size_t i = 0; i < passed; ++i) {
          try {
            (*chain)[i]->OnEnd(ended, status, elapsed);
          } catch (const std::exception& e) {
            Log().error("an interceptor's OnEnd threw: {}", e.what());
          }
        }
        done(status, std::move(response));
      };
  if (!verdict.ok()) {
    Complete(std::move(wrapped), verdict, Buffer());
    return false;
  }
  done = std::move(wrapped);
  return true;
}

OutgoingFrame Subchannel::CancelFrame(uint64_t id) const {
  OutgoingFrame frame = MakeCancelFrame(id);
  frame.may_wait = options_.wait_for_room;  // Not lost to a full queue.
  return frame;
}

void Subchannel::Cancel(CallId id) {
  EndCall(id, Status(StatusCode::kCancelled, "call cancelled by the client"));
}

void Subchannel::EndCall(uint64_t id, const Status& why) {
  std::unique_lock lock(mu_);
  BulkLoans* const loans = calls_.LoansOf(id);
  auto done = calls_.Take(id);
  if (!done) return;  // Already complete.
  std::shared_ptr<Connection> ready;
  if (state_ == ChannelState::kReady) ready = connection_;
  if (loans != nullptr && ready) [[unlikely]] {
    AwaitReleaseLocked(id, *loans, ready);
  }
  std::vector<Waiting> released;
  if (!held_.empty()) ReleaseHeld(&released);
  lock.unlock();
  if (ready) ready->Send(CancelFrame(id)).IgnoreError();
  if (!released.empty()) SendReleased(ready, released);
  Log().debug("{}: call {} ended by the client: {}", target_, id,
              why.ToString());
  Complete(std::move(*done), why, Buffer());
}

bool Subchannel::SendStreamFrame(uint64_t id, OutgoingFrame frame) {
  frame.may_wait = options_.wait_for_room;
  std::unique_lock lock(mu_);
  if (!calls_.Contains(id)) return false;
  if (state_ != ChannelState::kReady) {
    // Still connecting: queued behind the call's REQUEST, sent with it.
    const auto request =
        std::find_if(waiting_.begin(), waiting_.end(),
                     [id](const Waiting& waiting) { return waiting.id == id; });
    if (request == waiting_.end()) return false;  // Lost with a connection.
    const bool wait_for_ready = request->wait_for_ready;
    waiting_.push_back({id, std::move(frame), wait_for_ready, 0, nullptr});
    return true;
  }
  std::shared_ptr<Connection> ready = connection_;
  lock.unlock();
  const Status sent = ready->Send(std::move(frame));
  // UNAVAILABLE: the connection is closing, and OnClose ends the call.
  if (!sent.ok() && sent.code() != StatusCode::kUnavailable) {
    // Ended from the loop, not here: the caller holds its stream's lock,
    // which ending the call may take on this thread.
    asio::post(context_, [self = shared_from_this(), id, sent] {
      self->EndCall(id, sent);
    });
    return false;
  }
  return true;
}

void Subchannel::Shutdown(std::vector<CallTable::Entry>* orphans) {
  std::shared_ptr<Connection> connection;
  std::vector<std::shared_ptr<BulkLoans>> released;
  {
    std::lock_guard lock(mu_);
    shut_down_ = true;
    released = TakeAllAwaitingLocked();
    calls_.TakeAll(orphans);
    waiting_.clear();
    held_.clear();
    held_bytes_ = 0;
    connection = std::move(connection_);
    state_ = ChannelState::kIdle;
  }
  // On the loop, which may be shared and stay up: the timers' waits hold
  // this Subchannel, and must not keep it until a far deadline.
  asio::post(context_, [self = shared_from_this()] {
    self->reconnect_timer_.cancel();
    self->timer_.cancel();
  });
  // Breaks the connection <-> observer cycle even if the loop never runs again.
  if (connection) {
    connection->Close(Status(StatusCode::kCancelled, "channel shut down"));
  }
  // After the close: the server can reach none of the memory now.
  for (const auto& loans : released) loans->Released();
}

void Subchannel::ArmTimer() {
  std::optional<Clock::time_point> next;
  {
    std::lock_guard lock(mu_);
    next = calls_.NextDeadline();
    armed_ = next;
  }
  if (!next) return;
  timer_.expires_at(*next);
  timer_.async_wait(
      [self = shared_from_this()](const boost::system::error_code& error) {
        self->OnTimer(error);
      });
}

void Subchannel::OnTimer(const boost::system::error_code& error) {
  if (error == asio::error::operation_aborted) return;  // Re-armed.
  std::vector<CallTable::Entry> expired;
  std::vector<std::pair<uint64_t, BulkLoans*>> lending;
  std::vector<Waiting> released;
  std::shared_ptr<Connection> connection;
  {
    std::lock_guard lock(mu_);
    calls_.TakeExpired(Clock::now(), &expired, &lending);
    if (state_ == ChannelState::kReady) {
      for (const auto& [id, loans] : lending) {
        AwaitReleaseLocked(id, *loans, connection_);
      }
      for (const auto& entry : expired) {
        connection_->Send(CancelFrame(entry.first)).IgnoreError();
      }
    }
    if (!held_.empty()) connection = ReleaseHeld(&released);
  }
  if (!released.empty()) SendReleased(connection, released);
  ArmTimer();
  FailAll(expired, Status(StatusCode::kDeadlineExceeded, "deadline exceeded"));
}

std::shared_ptr<Connection> Subchannel::ReleaseHeld(std::vector<Waiting>* out) {
  if (state_ != ChannelState::kReady || goaway_ || !connection_) {
    return nullptr;
  }
  while (!held_.empty()) {
    Waiting& next = held_.front();
    if (calls_.Contains(next.id)) {  // Else cancelled or timed out: skipped.
      if (!WindowAdmits()) break;
      calls_.Charge(next.id, next.window_bytes);
      held_bytes_ -= next.window_bytes;
      out->push_back(std::move(next));
    } else {
      held_bytes_ -= next.window_bytes;
    }
    held_.pop_front();
  }
  // Counted under mu_, as Start counts: no REQUEST follows the answer to a
  // GOAWAY (AnswerGoAway).
  if (!out->empty()) sending_.fetch_add(1, std::memory_order_relaxed);
  return connection_;
}

void Subchannel::Hold(Waiting waiting) {
  held_bytes_ += waiting.window_bytes;
  ++stats_.calls_held;
  held_.push_back(std::move(waiting));
}

void Subchannel::SendReleased(const std::shared_ptr<Connection>& connection,
                              std::vector<Waiting>& released) {
  Status failure;
  std::vector<CallTable::Entry> failed;
  for (Waiting& waiting : released) {
    const Status sent =
        SendRequest(connection, std::move(waiting.frame), waiting.bulk.get());
    // (UNAVAILABLE: the connection is closing; OnClose fails the call.)
    if (!sent.ok() && sent.code() != StatusCode::kUnavailable) {
      std::lock_guard lock(mu_);
      if (auto done = calls_.Take(waiting.id)) {
        failed.emplace_back(waiting.id, std::move(*done));
        failure = sent;
      }
    }
  }
  sending_.fetch_sub(1, std::memory_order_release);
  for (auto& [id, done] : failed) Complete(std::move(done), failure, Buffer());
}

void Subchannel::RequeueHeld() {
  waiting_.insert(waiting_.begin(), std::make_move_iterator(held_.begin()),
                  std::make_move_iterator(held_.end()));
  held_.clear();
  held_bytes_ = 0;
}

}  // namespace rdmarpc::rpc
