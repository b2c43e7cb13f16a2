// ServerSession (rpc/server/server_session.h): a call's admission under the
// server's and its method's max_concurrency, and its end: the room given
// back, the response (with its metadata) queued, metrics and interceptors
// told, the call counted out.
#include <exception>

#include "base/latency_trace.h"
#include "base/log.h"
#include "rpc/server/server_session.h"
#include "rpc/wire/wire_codec.h"

namespace rdmarpc::rpc {

Status ServerSession::Admit(MethodEntry& entry, ServerCall& call) {
  if (core_->max_concurrency != 0) {
    const int64_t running =
        core_->admitted.fetch_add(1, std::memory_order_relaxed) + 1;
    if (running > core_->max_concurrency) {
      core_->admitted.fetch_sub(1, std::memory_order_relaxed);
      return Status(StatusCode::kResourceExhausted,
                    fmt::format("server overloaded: {} calls running, "
                                "max_concurrency {}",
                                running - 1, core_->max_concurrency));
    }
    call.server_running_ = &core_->admitted;
  }
  if (entry.max_concurrency != 0) {
    const int64_t mine =
        entry.running.fetch_add(1, std::memory_order_relaxed) + 1;
    if (mine > entry.max_concurrency) {
      entry.running.fetch_sub(1, std::memory_order_relaxed);
      GiveBackAdmission(call);
      return Status(StatusCode::kResourceExhausted,
                    fmt::format("{}/{} overloaded: {} calls running, its "
                                "max_concurrency {}",
                                *entry.service, *entry.method, mine - 1,
                                entry.max_concurrency));
    }
    call.method_running_ = &entry.running;
  }
  return Status();
}

void ServerSession::GiveBackAdmission(ServerCall& call) {
  if (call.server_running_ != nullptr) {
    call.server_running_->fetch_sub(1, std::memory_order_relaxed);
    call.server_running_ = nullptr;
  }
  if (call.method_running_ != nullptr) {
    call.method_running_->fetch_sub(1, std::memory_order_relaxed);
    call.method_running_ = nullptr;
  }
}

void ServerSession::Complete(ServerCall& call, const Status& status,
                             Payload&& response) {
  RDMARPC_TRACE(1, "complete");
  uint8_t state = ServerCall::kNotYet;
  bool counted_in = false;  // In tracked_calls_ until its response is queued.
  if (!call.tracking_.compare_exchange_strong(state, ServerCall::kNever)) {
    std::lock_guard lock(mu_);  // kTracked: OnFrame has entered it.
    counted_in = UntrackLocked(call.id_);
  }
  const uint64_t response_size = response.size();
  // The handler has answered: its room under the limits is free before the
  // response reaches the client, who may answer it with a new call.
  if (call.server_running_ != nullptr || call.method_running_ != nullptr)
      [[unlikely]] {
    GiveBackAdmission(call);
  }
  const StatusCode sent = Send(call, status, std::move(response));
  if (counted_in) tracked_calls_.fetch_sub(1, std::memory_order_release);
  if (call.metrics_ != nullptr) {
    if (call.stream_) {
      call.metrics_->streams_open.fetch_sub(1, std::memory_order_relaxed);
    }
    const auto elapsed = Clock::now() - call.started_;
    call.metrics_->Record(sent, elapsed, call.request_size_,
                          sent == StatusCode::kOk ? response_size : 0);
    if (Log().should_log(spdlog::level::debug)) {
      Log().debug("{}: call {} {}/{} finished {} in {} us", connection_->peer(),
                  call.id_, *call.service_, *call.method_, StatusCodeName(sent),
                  std::chrono::duration_cast<std::chrono::microseconds>(elapsed)
                      .count());
    }
  }
  if (call.intercepted_ > 0) [[unlikely]] {
    const Status ended = sent == status.code()
                             ? status
                             : Status(sent, "the response was not sent");
    const auto elapsed = Clock::now() - call.intercepted_at_;
    for (uint32_t i = 0; i < call.intercepted_; ++i) {
      try {
        core_->interceptors[i]->OnEnd(call, ended, elapsed);
      } catch (const std::exception& e) {
        Log().error("an interceptor's OnEnd threw: {}", e.what());
      }
    }
  }
  // Only now is the call over: a graceful shutdown waiting for it may close
  // the connection, and the response is already queued ahead of the close.
  core_->EndCall();
}

StatusCode ServerSession::Send(ServerCall& call, const Status& status,
                               Payload&& response) {
  if (call.IsCancelled()) {
    core_->responses_dropped++;
    Log().debug("{}: dropping response to cancelled call {}",
                connection_->peer(), call.id_);
    return call.cancelled_ ? StatusCode::kCancelled
                           : StatusCode::kDeadlineExceeded;
  }
  if (status.ok() && response.size() > core_->max_response_size) {
    Log().warn("{}/{}: response of {} bytes exceeds the maximum of {}",
               *call.service_, *call.method_, response.size(),
               core_->max_response_size);
    Reply(call.id_, Status(StatusCode::kResourceExhausted,
                           "response of " + std::to_string(response.size()) +
                               " bytes exceeds the server's maximum of " +
                               std::to_string(core_->max_response_size)));
    return StatusCode::kResourceExhausted;
  }
  if (call.metadata_ &&
      (!call.metadata_->headers.empty() || !call.metadata_->trailers.empty() ||
       call.metadata_->placed != 0)) [[unlikely]] {
    return SendWithMetadata(call, status, std::move(response));
  }
  RDMARPC_TRACE(1, "encode");
  return Queue(call.id_,
               MakeResponseFrame(call.id_, status, std::move(response)),
               status.code());
}

StatusCode ServerSession::SendWithMetadata(ServerCall& call,
                                           const Status& status,
                                           Payload&& response) {
  bool headers_sent;
  {
    std::lock_guard lock(call.mu_);
    headers_sent = call.headers_sent_;
  }
  std::string headers;
  StatusOr<std::string> encoded =
      headers_sent
          ? std::string()
          : EncodeOutgoingMetadata(call.metadata_->headers, "response headers");
  if (encoded.ok()) {
    headers = std::move(*encoded);
    encoded =
        EncodeOutgoingMetadata(call.metadata_->trailers, "response trailers");
  }
  if (!encoded.ok()) {
    Log().error("{}/{}: call {}: {}", *call.service_, *call.method_, call.id_,
                encoded.status().message());
    Reply(call.id_, Status(StatusCode::kInternal,
                           "the server's " + encoded.status().message()));
    return StatusCode::kInternal;
  }
  transport::OutgoingFrame frame = MakeResponseFrame(
      call.id_, status, std::move(response), headers, *encoded);
  if (call.metadata_->placed != 0 && status.ok()) {
    AppendToHeader(frame, EncodePlacedSizeField(call.metadata_->placed));
  }
  return Queue(call.id_, std::move(frame), status.code());
}

}  // namespace rdmarpc::rpc
