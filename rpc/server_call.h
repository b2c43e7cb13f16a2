// ServerCall: one incoming call as its handler sees it.
//
// The handler reads the request, deadline and cancellation, and finishes the
// call exactly once with Finish(), from any thread, now or later. A call
// dropped without Finish() is answered INTERNAL, so a client never waits on a
// handler that forgot it.
#ifndef RDMARPC_RPC_SERVER_CALL_H_
#define RDMARPC_RPC_SERVER_CALL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/buffer.h"
#include "base/status.h"
#include "rpc/call_options.h"
#include "rpc/payload.h"

namespace rdmarpc::rpc {

class ServerSession;
struct MethodMetrics;

class ServerCall {
 public:
  // `service` and `method` live as long as the session (the server's
  // registry of services).
  ServerCall(std::shared_ptr<ServerSession> session, uint64_t id,
             const std::string& service, const std::string& method,
             Payload request, std::optional<Clock::time_point> deadline,
             MethodMetrics* metrics = nullptr);
  ~ServerCall();
  ServerCall(const ServerCall&) = delete;
  ServerCall& operator=(const ServerCall&) = delete;

  const std::string& service() const { return *service_; }
  const std::string& method() const { return *method_; }
  // The request's message. With an attachment, a window on the same block
  // as it (rpc/payload.h).
  const Buffer& request() const { return request_; }
  // The request's attachment; empty if it has none. The handler may take it
  // to keep its bytes beyond the call (into a store, say) without a copy.
  const Buffer& request_attachment() const { return request_attachment_; }
  Buffer TakeRequestAttachment() { return std::move(request_attachment_); }
  // When the client stops waiting, if it set a deadline.
  std::optional<Clock::time_point> deadline() const { return deadline_; }

  // True once the client cancelled, the connection was lost, or the deadline
  // passed. Work on a cancelled call is wasted: its response is dropped.
  bool IsCancelled() const;

  // Runs `on_cancel` once when the client cancels or the connection is lost
  // (at once if that already happened). Any thread; replaces a previous one.
  void OnCancel(std::function<void()> on_cancel);

  // Sends the response (only when `status` is OK) or the error status. The
  // first call counts; later ones are logged and ignored. A Buffer is a
  // response without an attachment.
  void Finish(const Status& status, Payload response = Payload());

 private:
  friend class ServerSession;
  void MarkCancelled();  // Called by the session.

  const std::shared_ptr<ServerSession> session_;
  const uint64_t id_;
  const std::string* const service_;
  const std::string* const method_;
  const uint64_t request_size_;  // Message and attachment.
  const Buffer request_;
  Buffer request_attachment_;
  const std::optional<Clock::time_point> deadline_;
  MethodMetrics* const metrics_;  // Lives in the server's core.
  // For the metrics' latency only: a clock read is not free everywhere
  // (3.3 us in the emulated test VM).
  const Clock::time_point started_ =
      metrics_ != nullptr ? Clock::now() : Clock::time_point();
  std::atomic<bool> finished_{false};
  std::atomic<bool> cancelled_{false};
  // Whether the session's table of live calls holds this call. Most calls
  // finish inside their handler and are never entered: the table is for
  // calls that outlive it (see ServerSession::OnFrame).
  enum Tracking : uint8_t { kNotYet, kTracked, kNever };
  std::atomic<uint8_t> tracking_{kNotYet};
  std::mutex mu_;
  std::function<void()> on_cancel_;  // Guarded by mu_.
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_SERVER_CALL_H_
