// ServerSession: one accepted connection on the server side. Decodes requests,
// dispatches them to services, tracks live calls for cancellation, and sends
// responses. Internal to the rpc layer.
#ifndef RDMARPC_RPC_SERVER_SERVER_SESSION_H_
#define RDMARPC_RPC_SERVER_SERVER_SESSION_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "rdmarpc/executor.h"
#include "rdmarpc/interceptor.h"
#include "rdmarpc/server_call.h"
#include "rdmarpc/service.h"
#include "rpc/server/metrics.h"
#include "rpc/wire/call_header.h"
#include "rpc/wire/method_index.h"
#include "transport/connection.h"

namespace rdmarpc::rpc {

// A registered method: its names, its id, its handler and what the server
// counts for it.
struct MethodEntry {
  const std::string* service = nullptr;    // Keys in ServerCore::services.
  const std::string* method = nullptr;     // Keys in ServiceEntry::methods.
  uint64_t id = 0;                         // MethodId(*service, *method).
  const MethodHandler* handler = nullptr;  // Owned by the Service.
  StreamKind kind = StreamKind::kUnary;
  MethodMetrics metrics;
  // ServerOptions::method_max_concurrency: calls of this method running at
  // once (0: no limit), and how many run now (kept only with a limit).
  uint32_t max_concurrency = 0;
  std::atomic<int64_t> running{0};
};
struct ServiceEntry {
  Service* service = nullptr;
  std::map<std::string, std::unique_ptr<MethodEntry>, std::less<>> methods;
};

// State every session of a server shares.
struct ServerCore {
  // Fixed once serving.
  std::map<std::string, ServiceEntry, std::less<>> services;
  MethodIndex<MethodEntry> methods_by_id;  // The same methods, by id.
  uint64_t max_response_size = 0;
  size_t max_metadata_size = 0;
  bool metrics = true;
  // ServerOptions::interceptors, in order, and those of them that admit
  // (ServerInterceptor::admission()).
  std::vector<std::shared_ptr<ServerInterceptor>> interceptors;
  std::vector<ServerInterceptor*> admitters;
  uint64_t max_unadmitted_frame_bytes = 0;
  // Calls refused admission, and the log that says so (base/log_throttle.h:
  // once per peer host and interval).
  std::atomic<uint64_t> calls_unadmitted{0};
  void NoteRefusal(const std::string& peer, const Status& why);
  // Where handlers run; empty: inline, on the connection's thread.
  Executor handler_executor;
  // Set as the server stops its workers (and then its handler pool): a
  // stream callback posted later runs at once, on the posting thread. A
  // Post counts itself in `posting` before it reads `stopped`, and the
  // server sets `stopped` before it waits for `posting` to be 0 (all
  // sequentially consistent), so no Post reaches a stopped executor.
  std::atomic<bool> stopped{false};
  std::atomic<int> posting{0};
  std::atomic<bool> draining{false};

  // Calls started and not finished. A call counts itself before it reads
  // `draining`, and Shutdown sets `draining` before it reads the count (all
  // sequentially consistent), so either the call sees the server draining
  // or Shutdown waits for it: no lock on the call path.
  std::atomic<int64_t> live_calls{0};
  // Calls admitted under max_concurrency (only counted when it is set):
  // given back when the handler has answered, before the response is sent,
  // so a client that answers a response with a new call finds its room.
  std::atomic<int64_t> admitted{0};
  std::mutex mu;                 // Only for waiting on `idle`.
  std::condition_variable idle;  // Notified when draining and live_calls is 0.
  void EndCall() {
    if (live_calls.fetch_sub(1) == 1 && draining) {
      std::lock_guard lock(mu);  // Shutdown is checking or waiting: wake it.
      idle.notify_all();
    }
  }

  // Going away (Server::Shutdown): sessions told GOAWAY, and those whose
  // client has answered that it sent its last request. Notified on `idle`.
  std::atomic<int> goaways_sent{0};
  std::atomic<int> goaways_answered{0};
  void OnGoAwayAnswered() {
    goaways_answered.fetch_add(1);
    std::lock_guard lock(mu);
    idle.notify_all();
  }

  std::atomic<uint64_t> calls_started{0};
  std::atomic<uint64_t> responses_dropped{0};  // Cancelled or late.
  std::atomic<uint64_t> responses_refused{0};  // The send queue was full.
  std::atomic<uint64_t> protocol_errors{0};
  std::atomic<uint64_t> unknown_method_calls{0};
  std::atomic<uint64_t> stream_frames_dropped{0};
  uint32_t max_calls_per_connection = 0;  // Fixed once serving; 0: none.
  uint32_t max_concurrency = 0;           // Fixed once serving; 0: none.
  std::atomic<uint64_t> calls_shed{0};
  std::atomic<uint64_t> calls_over_limit{0};
  std::atomic<uint64_t> connections_refused{0};
  std::atomic<uint64_t> peers_timed_out{0};
  // ServerOptions::max_connection_idle, _age, _age_grace (zero: none).
  std::chrono::milliseconds max_connection_idle{0};
  std::chrono::milliseconds max_connection_age{0};
  std::chrono::milliseconds max_connection_age_grace{0};
  std::chrono::milliseconds goaway_answer_timeout{0};
  std::atomic<uint64_t> connections_recycled{0};
};

class ServerSession final : public transport::ConnectionObserver,
                            public std::enable_shared_from_this<ServerSession> {
 public:
  // `loops` keeps the connection's event loop alive as long as the session:
  // a handler may hold its call (and so this session) past the server.
  ServerSession(std::shared_ptr<ServerCore> core,
                std::shared_ptr<transport::Connection> connection,
                std::shared_ptr<const void> loops);

  void Start() {
    // Before the connection starts: its loop reads lifetime_ from then on.
    if (core_->max_connection_idle.count() > 0 ||
        core_->max_connection_age.count() > 0) [[unlikely]] {
      StartLifetime();
    }
    connection_->Start(shared_from_this());
  }
  // Before Start: the server is at a limit. Each request is answered with
  // `why` and the connection closes after the first answer.
  void Refuse(Status why) {
    refusal_ = std::move(why);
    gated_ = true;
  }
  // Before Start: the server has admission interceptors. Until a call
  // passes them, calls are admitted on their headers before their
  // payloads are read (include/rdmarpc/interceptor.h).
  void RequireAdmission() {
    admitted_ = false;
    gated_ = true;
    connection_->RequireAdmission(core_->max_unadmitted_frame_bytes);
  }
  // Runs once, after the connection has closed. Set before Start().
  void SetOnClosed(std::function<void()> on_closed) {
    on_closed_ = std::move(on_closed);
  }
  void Close(const Status& reason) { connection_->Close(reason); }
  // Tells the client this server is going away (GOAWAY): it sends no new
  // request on this connection and answers with a GOAWAY of its own once it
  // has sent its last. The session goes on serving until then. Once.
  void GoAway();
  transport::Connection& connection() { return *connection_; }

  void OnFrame(transport::ReceivedFrame&& frame) override;
  void OnClose(const Status& reason) override;
  bool AdmitHeader(std::span<const std::byte> header) override;

  // Called by ServerCall::Finish.
  void Complete(ServerCall& call, const Status& status, Payload&& response);
  // Called by a streaming ServerCall: sends a frame of the call; runs a
  // callback of the handler's, on the handler executor or the loop.
  Status SendStreamFrame(transport::OutgoingFrame&& frame);
  // Answers call `id` with `status` (a stream the session ended).
  void Reply(uint64_t id, const Status& status);
  // The same for a call refused before its handler ran, with the trailer
  // that says so (kNotRunTrailer): a client may send it again elsewhere.
  void ReplyNotRun(uint64_t id, const Status& status);
  // Queues call `id`'s response `frame` and returns `code`; if the send
  // queue refuses it, answers the call with that error (Reply) and returns
  // its code.
  StatusCode Queue(uint64_t id, transport::OutgoingFrame&& frame,
                   StatusCode code);
  void Post(UniqueFunction<void()> task);
  uint64_t max_response_size() const { return core_->max_response_size; }

 private:
  // Runs `handler` on `call`; an exception it throws is logged.
  static void RunHandler(const MethodHandler& handler,
                         std::shared_ptr<ServerCall> call,
                         const MethodEntry& entry);
  // Returns the status the client gets (CANCELLED when it stopped waiting).
  StatusCode Send(ServerCall& call, const Status& status, Payload&& response);
  // Send's path for a call with response headers or trailers.
  StatusCode SendWithMetadata(ServerCall& call, const Status& status,
                              Payload&& response);
  void ProtocolError(const Status& error);
  // RESOURCE_EXHAUSTED when the server or the call's method is at its
  // max_concurrency; else OK, the call counted in both (ServerCore::admitted,
  // MethodEntry::running) until GiveBackAdmission.
  Status Admit(MethodEntry& entry, ServerCall& call);
  // Gives back what Admit counted: once the handler has answered, before
  // the response is sent.
  static void GiveBackAdmission(ServerCall& call);
  // RESOURCE_EXHAUSTED (logged once) when max_calls_per_connection calls
  // are live on this connection. Called with mu_ held.
  Status CallLimitLocked();

  const std::shared_ptr<ServerCore> core_;
  const std::shared_ptr<const void> loops_;  // Destroyed after connection_.
  const std::shared_ptr<transport::Connection> connection_;
  std::mutex mu_;
  // Calls that outlived their handler, entered by Begin only. Guarded by
  // mu_. Nodes of finished calls are kept for the next ones, so tracking a
  // call allocates nothing in steady state.
  using LiveCalls = std::unordered_map<uint64_t, std::weak_ptr<ServerCall>>;
  LiveCalls live_;
  std::vector<LiveCalls::node_type> spare_nodes_;
  // Calls entered in live_ whose response is not queued yet, readable
  // without mu_: Begin takes mu_ only when it is not 0, and the lifetime
  // closes a recycled connection only at 0. Complete counts a call out
  // after queueing its response, not when it leaves live_: a close in
  // between would drop the response (the connection refuses frames once
  // closing), and the client would see its call's connection lost.
  std::atomic<size_t> tracked_calls_{0};
  void TrackLocked(uint64_t id, const std::shared_ptr<ServerCall>& call);
  // The calls in live_ still alive, taken under mu_.
  std::vector<std::shared_ptr<ServerCall>> CallsInFlight();
  // Removes `id` from live_; true if it was there (tracked_calls_ is then
  // the caller's to decrement).
  bool UntrackLocked(uint64_t id);
  // The method of the previous request, looked up again only when a request
  // names another: a connection tends to call the same few methods, and
  // comparing an id (or two names) costs less than a lookup. Used only on
  // the connection's thread (in OnFrame).
  MethodEntry* last_method_ = nullptr;
  // The method `header` names; nullptr after answering the call with why
  // there is none.
  MethodEntry* ResolveMethod(const CallHeader& header);
  // OnFrame by the frame's kind: CANCEL; REQUEST, up to the call's
  // creation; then its admission and handler.
  void OnCancel(uint64_t id);
  void OnRequest(const CallHeader& header, transport::ReceivedFrame& frame);
  void Begin(MethodEntry& entry, const std::shared_ptr<ServerCall>& call);
  // Answers call `id` at once, without running the handler, and counts it in
  // `metrics` (if any). `not_run`: refused for the server's state, not the
  // request's, so it may be sent again elsewhere.
  void Reject(uint64_t id, MethodMetrics* metrics, const Status& status,
              uint64_t request_bytes, bool not_run);
  // MESSAGE, HALF_CLOSE, WINDOW.
  void OnStreamFrame(const CallHeader& header,
                     transport::ReceivedFrame&& frame);
  // OnRequest's path while gated_: refused (Refuse), or not yet admitted.
  // False once the call has been answered.
  bool OnGatedRequest(const CallHeader& header);
  // The admission interceptors' verdict on a call (loop thread).
  Status RunAdmission(const CallHeader& header) const;
  // A call refused admission: answered, counted, logged (throttled); the
  // connection closed after kMaxAdmissionFailures.
  void RefuseUnadmitted(uint64_t id, const Status& why);
  // Connection lifetime (ServerOptions::max_connection_age and _idle,
  // rpc/server/lifetime.cc): a timer on the connection's loop, only where
  // one is set.
  struct Lifetime;
  struct LifetimeDeleter {
    void operator()(Lifetime* lifetime) const;  // Where Lifetime is whole.
  };
  std::unique_ptr<Lifetime, LifetimeDeleter> lifetime_;
  void StartLifetime();
  void StopLifetime();  // The connection closed.
  void ScheduleLifetimeTick();
  void OnLifetimeTick();
  // Tells the client GOAWAY for `why` (max_connection_age or _idle).
  void Recycle(const char* why);
  // After Recycle: closes once the client has answered and no call is in
  // flight, or once the grace period is over.
  void CloseIfRecycled();
  std::function<void()> on_closed_;
  Status refusal_;  // Set by Refuse before Start.
  // Loop thread: requests take OnGatedRequest (refusal_ set, or not
  // admitted_); AdmitHeader's refusal of the frame it let through without
  // its payload; refusals so far while not admitted.
  bool gated_ = false;
  bool admitted_ = true;
  // Set once a recycled connection's client has answered its GOAWAY (or
  // was taken to): later requests are answered with it, not run.
  Status recycled_;
  Status header_refusal_;
  uint32_t admission_failures_ = 0;
  // GoAway (the shutting-down thread) and the client's answer or the
  // connection's end (its thread) meet here: whichever comes second counts
  // the answer, once (all sequentially consistent).
  std::atomic<bool> goaway_sent_{false};
  std::atomic<bool> closed_{false};
  std::atomic<bool> goaway_counted_{false};
  void CountGoAwayAnswer() {
    if (!goaway_counted_.exchange(true)) core_->OnGoAwayAnswered();
  }
  bool limit_logged_ = false;  // Guarded by mu_.
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_SERVER_SERVER_SESSION_H_
