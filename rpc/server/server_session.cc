#include "rpc/server/server_session.h"

#include <boost/asio/post.hpp>
#include <exception>
#include <vector>

#include "base/buffer_pool.h"
#include "base/latency_trace.h"
#include "base/log.h"
#include "base/log_throttle.h"
#include "base/receive_clock.h"
#include "rdmarpc/retry_options.h"
#include "rdmarpc/tunables.h"
#include "rpc/wire/wire_codec.h"

namespace rdmarpc::rpc {

// ---------------------------------------------------------- ServerSession --

ServerSession::ServerSession(std::shared_ptr<ServerCore> core,
                             std::shared_ptr<transport::Connection> connection,
                             std::shared_ptr<const void> loops)
    : core_(std::move(core)),
      loops_(std::move(loops)),
      connection_(std::move(connection)) {}

void ServerSession::ProtocolError(const Status& error) {
  core_->protocol_errors++;
  Log().warn("{}: closing connection: {}", connection_->peer(),
             error.message());
  connection_->Close(error);
}

void ServerSession::Reply(uint64_t id, const Status& status) {
  // An answer with no payload may wait past a full send queue: refused, the
  // call would be lost, its client waiting for it until its deadline.
  transport::OutgoingFrame frame = MakeResponseFrame(id, status, Buffer());
  frame.may_wait = true;
  connection_->Send(std::move(frame)).IgnoreError();
}

StatusCode ServerSession::Queue(uint64_t id, transport::OutgoingFrame&& frame,
                                StatusCode code) {
  const Status queued = connection_->Send(std::move(frame));
  if (queued.ok() || queued.code() == StatusCode::kUnavailable) return code;
  // The send queue to this client is full (it is not reading): the call
  // fails with that, in a small answer that waits for room.
  core_->responses_refused++;
  // A peer that never reads makes this happen at will: throttled.
  if (const auto held = ThrottleLog("response not sent", connection_->peer())) {
    Log().warn("{}: call {}: response not sent: {}{}", connection_->peer(), id,
               queued.message(), HeldBack(*held));
  }
  Reply(id, queued);
  return queued.code();
}

void ServerSession::ReplyNotRun(uint64_t id, const Status& status) {
  // The trailer block, encoded once (include/rdmarpc/retry_options.h).
  static const std::string* const kTrailers = [] {
    Metadata trailers;
    trailers.Add(kNotRunTrailer, "1");
    return new std::string(*EncodeOutgoingMetadata(trailers, "trailers"));
  }();
  transport::OutgoingFrame frame =
      MakeResponseFrame(id, status, Buffer(), {}, *kTrailers);
  frame.may_wait = true;
  connection_->Send(std::move(frame)).IgnoreError();
}

void ServerSession::OnFrame(transport::ReceivedFrame&& frame) {
  RDMARPC_TRACE(1, "session_on_frame");
  CallHeader header;
  if (Status decoded = DecodeCallHeader(frame, header); !decoded.ok()) {
    return ProtocolError(decoded);
  }
  const uint64_t id = header.call_id();

  if (header.kind() == CallHeader::kGoAway) [[unlikely]] {
    // The client has sent its last request here (or, unasked, is leaving).
    if (goaway_sent_.load()) CountGoAwayAnswer();
    if (lifetime_) CloseIfRecycled();
    return;
  }
  if (header.kind() == CallHeader::kCancel) return OnCancel(id);
  if (header.kind() == CallHeader::kMessage ||
      header.kind() == CallHeader::kHalfClose ||
      header.kind() == CallHeader::kWindow) {
    return OnStreamFrame(header, std::move(frame));
  }
  if (header.kind() != CallHeader::kRequest) {
    return ProtocolError(Status(StatusCode::kInternal,
                                "protocol error: client sent a response"));
  }
  OnRequest(header, frame);
}

void ServerSession::Reject(uint64_t id, MethodMetrics* metrics,
                           const Status& status, uint64_t request_bytes,
                           bool not_run) {
  if (metrics != nullptr) {
    metrics->started.fetch_add(1, std::memory_order_relaxed);
    metrics->RecordRejected(status.code(), request_bytes);
  }
  if (not_run) return ReplyNotRun(id, status);
  Reply(id, status);
}

void ServerSession::OnCancel(uint64_t id) {
  std::shared_ptr<ServerCall> call;
  {
    std::lock_guard lock(mu_);
    const auto it = live_.find(id);
    if (it != live_.end()) call = it->second.lock();
  }
  if (call) {
    Log().debug("{}: call {} cancelled by the client", connection_->peer(), id);
    if (call->MarkCancelled()) call->ReleaseLoans();
  }
}

// Inlined into its one caller, on the call path: split out for reading only.
[[gnu::always_inline]] inline void ServerSession::OnRequest(
    const CallHeader& header, transport::ReceivedFrame& frame) {
  const uint64_t id = header.call_id();
  if (gated_ && !OnGatedRequest(header)) [[unlikely]] {
    return;
  }
  if (core_->draining) {  // Checked again under core_->mu below.
    return ReplyNotRun(
        id, Status(StatusCode::kUnavailable, "server shutting down"));
  }
  MethodEntry* const resolved = ResolveMethod(header);
  if (resolved == nullptr) return;  // Answered.
  MethodEntry& entry = *resolved;
  if (static_cast<int>(header.stream()) != static_cast<int>(entry.kind))
      [[unlikely]] {
    return Reply(id,
                 Status(StatusCode::kInvalidArgument,
                        fmt::format("{}/{} is a {} method; the call is {}",
                                    *entry.service, *entry.method,
                                    StreamKindName(entry.kind),
                                    StreamKindName(static_cast<StreamKind>(
                                        static_cast<int>(header.stream()))))));
  }
  MethodMetrics* const metrics = core_->metrics ? &entry.metrics : nullptr;
  const auto reject = [&](const Status& status, uint64_t request_bytes) {
    Reject(id, metrics, status, request_bytes, /*not_run=*/false);
  };
  if (frame.dropped_payload_size() > 0) {
    return reject(DroppedPayloadStatus(frame, "request", "server"),
                  frame.dropped_payload_size());
  }

  std::optional<Clock::time_point> deadline;
  // A timeout beyond kMaxTimeout (or one that would overflow the clock, as
  // time_point::max() sent by a client does) means no deadline.
  if (header.timeout_us() > 0 &&
      header.timeout_us() <=
          static_cast<uint64_t>(
              std::chrono::duration_cast<std::chrono::microseconds>(
                  tunables::kMaxTimeout)
                  .count())) {
    deadline =
        ReceiveClock::Now() + std::chrono::microseconds(header.timeout_us());
  }
  // Pooled: no heap allocation per call in steady state.
  auto call = std::allocate_shared<ServerCall>(
      PoolAllocator<ServerCall>(), shared_from_this(), id, *entry.service,
      *entry.method,
      SplitPayload(std::move(frame).TakePayload(), header.attachment_size()),
      deadline, metrics);
  if (!header.metadata().empty()) [[unlikely]] {
    const Status read = ReadMetadata(
        header.metadata(), core_->max_metadata_size, "request metadata",
        "server", StatusCode::kInvalidArgument, &call->Meta().request);
    if (!read.ok()) {
      call->finished_ = true;
      return reject(read, call->request_size_);
    }
  }
  if (!header.bulk().empty()) [[unlikely]] {
    ServerCall::CallMetadata& meta = call->Meta();
    const Status read = ReadBulk(header.bulk(), meta.bulk, meta.destination);
    if (!read.ok()) {
      call->finished_ = true;
      return reject(read, call->request_size_);
    }
    meta.self = call;  // For its Pulls and Pushes (BulkDone).
  }
  if (entry.kind != StreamKind::kUnary) {
    call->StartStream(entry.kind, header.window_messages(),
                      header.window_bytes());
  }
  Begin(entry, call);
}

// Inlined into its one caller, on the call path: split out for reading only.
[[gnu::always_inline]] inline void ServerSession::Begin(
    MethodEntry& entry, const std::shared_ptr<ServerCall>& call) {
  const uint64_t id = call->id_;
  MethodMetrics* const metrics = call->metrics_;
  const MethodHandler* handler = entry.handler;
  // Only this thread enters calls in live_, and a call not entered has
  // finished or is this one. So with live_ empty no other call is in flight:
  // none can hold this id, and the limit is not reached. No lock.
  if (tracked_calls_.load(std::memory_order_acquire) > 0) {
    std::lock_guard lock(mu_);
    if (Status over = CallLimitLocked(); !over.ok()) {
      call->finished_ = true;
      return Reject(id, metrics, over, 0, /*not_run=*/true);
    }
    if (live_.contains(id)) {
      // Finish the orphan quietly: the connection is going away anyway.
      call->finished_ = true;
      return ProtocolError(
          Status(StatusCode::kInternal, "protocol error: call id " +
                                            std::to_string(id) +
                                            " is already in use"));
    }
  }
  // Counted, then draining checked: see ServerCore::live_calls.
  core_->live_calls.fetch_add(1);
  if (core_->draining) {
    call->finished_ = true;
    core_->EndCall();
    return ReplyNotRun(
        id, Status(StatusCode::kUnavailable, "server shutting down"));
  }
  if (core_->max_concurrency != 0 || entry.max_concurrency != 0) [[unlikely]] {
    Status shed = Admit(entry, *call);
    if (!shed.ok()) {
      call->finished_ = true;
      core_->EndCall();
      core_->calls_shed++;
      if (metrics != nullptr) {
        metrics->RecordRejected(StatusCode::kResourceExhausted,
                                call->request().size());
      }
      return ReplyNotRun(id, shed);
    }
  }
  core_->calls_started++;
  if (metrics != nullptr) {
    metrics->started.fetch_add(1, std::memory_order_relaxed);
    // Balanced in Complete, which every call from here on reaches once.
    if (entry.kind != StreamKind::kUnary) {
      metrics->streams_open.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (Log().should_log(spdlog::level::debug)) {
    Log().debug("{}: call {} {}/{} started ({} bytes)", connection_->peer(), id,
                *entry.service, *entry.method, call->request().size());
  }
  if (core_->handler_executor) {
    // Off this thread: the call is in live_ (below) until it finishes.
    core_->handler_executor([handler, call = call, &entry]() mutable {
      RunHandler(*handler, std::move(call), entry);
    });
  } else {
    RDMARPC_TRACE(1, "handler");
    RunHandler(*handler, call, entry);
  }
  // A call that outlives its handler (or has not met it yet) is entered in
  // live_, for a Cancel frame or the connection's loss to reach it.
  // Complete, on any thread, claims the call first (kNotYet -> kNever) or
  // finds it kTracked and waits on mu_ to take it out, so a call is never
  // left in live_ once finished.
  if (call->tracking_.load(std::memory_order_acquire) == ServerCall::kNotYet) {
    std::lock_guard lock(mu_);
    uint8_t state = ServerCall::kNotYet;
    if (call->tracking_.compare_exchange_strong(state, ServerCall::kTracked)) {
      TrackLocked(id, call);
    }
  }
}

void ServerSession::OnStreamFrame(const CallHeader& header,
                                  transport::ReceivedFrame&& frame) {
  const uint64_t id = header.call_id();
  std::shared_ptr<ServerCall> call;
  if (tracked_calls_.load(std::memory_order_acquire) > 0) {
    std::lock_guard lock(mu_);
    const auto it = live_.find(id);
    if (it != live_.end()) call = it->second.lock();
  }
  if (!call || !call->stream_) {
    // The call finished (its frames may cross the RESPONSE) or never
    // streamed. Dropped; the connection and its other calls go on.
    core_->stream_frames_dropped++;
    Log().debug(
        "{}: dropped a stream frame (kind {}) for call {}: no open "
        "stream",
        connection_->peer(), static_cast<int>(header.kind()), id);
    return;
  }
  switch (header.kind()) {
    case CallHeader::kMessage: {
      Status broken;
      if (frame.dropped_payload_size() > 0) {
        broken = DroppedPayloadStatus(frame, "stream message", "server");
      } else if (!call->OnStreamMessage(
                     SplitPayload(std::move(frame).TakePayload(),
                                  header.attachment_size()))) {
        broken = Status(StatusCode::kResourceExhausted,
                        "stream window exceeded: the client sent a message "
                        "the server had not made room for");
      }
      if (!broken.ok()) {
        // That call ends; the connection and its other calls go on.
        Log().warn("{}: call {} {}/{}: {}", connection_->peer(), id,
                   call->service(), call->method(), broken.message());
        call->EndWith(broken);
      }
      return;
    }
    case CallHeader::kHalfClose:
      return call->OnHalfClose();
    default:
      return call->OnWindow(header.window_messages(), header.window_bytes());
  }
}

void ServerSession::GoAway() {
  if (goaway_sent_.exchange(true)) return;
  core_->goaways_sent.fetch_add(1);
  connection_->Send(MakeGoAwayFrame()).IgnoreError();
  // A closed connection sends nothing more: as good as an answer.
  if (closed_.load()) CountGoAwayAnswer();
}

Status ServerSession::SendStreamFrame(transport::OutgoingFrame&& frame) {
  return connection_->Send(std::move(frame));
}

void ServerSession::Post(UniqueFunction<void()> task) {
  // Runs the user's callback; what it throws is logged, not propagated
  // into a loop or a pool thread.
  auto guarded = [task = std::move(task)]() mutable {
    try {
      task();
    } catch (const std::exception& e) {
      Log().error("a stream callback threw: {}", e.what());
    }
  };
  core_->posting++;
  if (core_->stopped) {
    core_->posting--;
    return guarded();  // Nothing runs posted tasks any more.
  }
  if (core_->handler_executor) {
    core_->handler_executor(std::move(guarded));
  } else {
    boost::asio::post(connection_->executor(), std::move(guarded));
  }
  core_->posting--;
}

void ServerSession::RunHandler(const MethodHandler& handler,
                               std::shared_ptr<ServerCall> call,
                               const MethodEntry& entry) {
  const uint64_t id = call->id_;
  const auto& interceptors = call->session_->core_->interceptors;
  if (!interceptors.empty()) [[unlikely]] {
    call->intercepted_at_ = Clock::now();
    for (const auto& interceptor : interceptors) {
      Status verdict;
      try {
        verdict = interceptor->OnCall(*call);
      } catch (const std::exception& e) {
        verdict = Status(StatusCode::kInternal,
                         std::string("an interceptor threw: ") + e.what());
      }
      if (!verdict.ok()) return call->Finish(verdict);
      ++call->intercepted_;
    }
  }
  try {
    handler(std::move(call));
  } catch (const std::exception& e) {
    // The call may already be finished; Finish ignores a second attempt.
    Log().error("{}/{}: handler of call {} threw: {}", *entry.service,
                *entry.method, id, e.what());
  }
}

MethodEntry* ServerSession::ResolveMethod(const CallHeader& header) {
  const uint64_t method_id = header.method_id();
  if (last_method_ != nullptr &&
      (method_id != 0 ? method_id == last_method_->id
                      : header.method() == *last_method_->method &&
                            header.service() == *last_method_->service)) {
    return last_method_;
  }
  MethodEntry* entry = nullptr;
  std::string unknown;
  if (method_id != 0) {
    MethodIndex<MethodEntry>::Found found;
    entry = core_->methods_by_id.Find(method_id, &found);
    if (found != MethodIndex<MethodEntry>::Found::kOne) {
      unknown = found == MethodIndex<MethodEntry>::Found::kNone
                    ? fmt::format(
                          "unknown method id {:#018x}: no method of this "
                          "server has it",
                          method_id)
                    : fmt::format(
                          "method id {:#018x} names two methods of this "
                          "server: call them by name",
                          method_id);
    }
  } else if (const auto service = core_->services.find(header.service());
             service == core_->services.end()) {
    unknown = "unknown service '" + std::string(header.service()) + "'";
  } else if (const auto method = service->second.methods.find(header.method());
             method == service->second.methods.end()) {
    unknown = "unknown method '" + std::string(header.method()) +
              "' of service '" + std::string(header.service()) + "'";
  } else {
    entry = method->second.get();
  }
  if (entry == nullptr) {
    // Whoever is not admitted learns nothing of the server's methods.
    if (Status refused = RunAdmission(header); !refused.ok()) {
      RefuseUnadmitted(header.call_id(), refused);
      return nullptr;
    }
    core_->unknown_method_calls++;
    Reply(header.call_id(), Status(StatusCode::kUnimplemented, unknown));
    return nullptr;
  }
  last_method_ = entry;
  return entry;
}

void ServerSession::TrackLocked(uint64_t id,
                                const std::shared_ptr<ServerCall>& call) {
  // OnFrame checked that the id is free before it ran the handler.
  tracked_calls_.fetch_add(1, std::memory_order_release);
  if (spare_nodes_.empty()) {
    live_.emplace(id, call);
    return;
  }
  LiveCalls::node_type node = std::move(spare_nodes_.back());
  spare_nodes_.pop_back();
  node.key() = id;
  node.mapped() = call;
  live_.insert(std::move(node));
}

bool ServerSession::UntrackLocked(uint64_t id) {
  LiveCalls::node_type node = live_.extract(id);
  if (node.empty()) return false;
  node.mapped().reset();
  constexpr size_t kMaxSpareNodes = 1024;
  if (spare_nodes_.size() < kMaxSpareNodes) {
    spare_nodes_.push_back(std::move(node));
  }
  return true;
}

Status ServerSession::CallLimitLocked() {
  const uint32_t limit = core_->max_calls_per_connection;
  if (limit == 0 || live_.size() < limit) return Status();
  core_->calls_over_limit++;
  if (!std::exchange(limit_logged_, true)) {
    Log().warn(
        "{}: {} calls in flight, the limit per connection "
        "(max_calls_per_connection); answering RESOURCE_EXHAUSTED",
        connection_->peer(), limit);
  }
  return Status(StatusCode::kResourceExhausted,
                "too many calls in flight on this connection (limit " +
                    std::to_string(limit) + ")");
}

std::vector<std::shared_ptr<ServerCall>> ServerSession::CallsInFlight() {
  std::vector<std::shared_ptr<ServerCall>> calls;
  std::lock_guard lock(mu_);
  for (auto& [id, weak] : live_) {
    if (auto call = weak.lock()) calls.push_back(std::move(call));
  }
  return calls;
}

void ServerSession::OnClose(const Status& reason) {
  closed_.store(true);
  if (goaway_sent_.load()) CountGoAwayAnswer();
  if (lifetime_) StopLifetime();
  // The transport closed it for malformed input (the session's own
  // ProtocolError counts the RPC layer's).
  if (connection_->stats().protocol_errors > 0) core_->protocol_errors++;
  // Keepalive took the client for dead (a crash, a hung host, a lost link).
  if (connection_->stats().keepalive_timeouts > 0) core_->peers_timed_out++;
  const std::vector<std::shared_ptr<ServerCall>> orphans = CallsInFlight();
  // Closed for what a peer can repeat at will (and the transport logged,
  // throttled): this line is throttled too.
  const ConnectionStats& stats = connection_->stats();
  const bool peer_misbehaved =
      stats.protocol_errors > 0 || stats.pings_refused > 0 ||
      stats.slow_frames > 0 || stats.hello_timeouts > 0 ||
      stats.keepalive_timeouts > 0 || admission_failures_ > 0;
  if (const auto held = peer_misbehaved
                            ? ThrottleLog("closed", connection_->peer())
                            : std::optional<uint64_t>(0)) {
    Log().info("{}: connection closed: {} ({} calls in flight){}",
               connection_->peer(), reason.message(), orphans.size(),
               HeldBack(*held));
  }
  for (auto& call : orphans) call->MarkCancelled();
  if (auto on_closed = std::move(on_closed_)) on_closed();
}

}  // namespace rdmarpc::rpc
