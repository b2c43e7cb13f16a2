// Subchannel: one connection of a Channel (a single server's Channel has
// one, a cluster one per endpoint): its calls and streams behind one lock,
// and what runs on its event loop. Internal to the rpc layer:
// rpc/client/subchannel.cc implements the call path,
// rpc/client/subchannel_connection.cc the connection's life,
// rpc/client/client_stream.cc the streams it routes frames to, and
// rpc/channel.cc the public Channel over it.
#ifndef RDMARPC_RPC_CLIENT_SUBCHANNEL_H_
#define RDMARPC_RPC_CLIENT_SUBCHANNEL_H_

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/futex_mutex.h"
#include "rdmarpc/channel_options.h"
#include "rdmarpc/status.h"
#include "rdmarpc/tunables.h"
#include "rpc/client/bulk_loans.h"
#include "rpc/client/call_table.h"
#include "rpc/client/callback_runner.h"
#include "rpc/client/client_stream_state.h"
#include "transport/connection.h"

namespace rdmarpc::rpc {

class CallHeader;  // rpc/wire/call_header.h

// Marks a call that failed before it was sent
// (include/rdmarpc/retry_options.h): a retry policy may send it again, whatever
// its method.
void MarkNotRun(const std::shared_ptr<ResponseMetadata>& sink);

class Subchannel final : public transport::ConnectionObserver,
                         public StreamHost,
                         public std::enable_shared_from_this<Subchannel> {
 public:
  using CallId = uint64_t;  // Channel::CallId

  // A cluster's subchannels share the cluster's `runner`; a Channel's
  // Subchannel makes its own.
  Subchannel(std::string target, ChannelOptions options,
             boost::asio::io_context& context,
             std::shared_ptr<CallbackRunner> runner = nullptr)
      : target_(std::move(target)),
        options_(std::move(options)),
        context_(context),
        timer_(context),
        reconnect_timer_(context),
        runner_(runner ? std::move(runner)
                       : std::make_shared<CallbackRunner>(options_)),
        interceptors_(
            options_.interceptors.empty()
                ? nullptr
                : std::make_shared<const Interceptors>(options_.interceptors)),
        backoff_(options_.initial_backoff) {}

  // Starts a call of `service`.`method`, sent by `method_id` when that is
  // not 0 (a MethodRef: the names then only tell the interceptors), else by
  // the names. The channel's interceptors (ChannelOptions::interceptors), if
  // any, run first on a copy of `options`; one that refuses the call
  // completes `done` with its error, and 0 is returned. A streaming call
  // passes its kind and state; `done` ends it.
  CallId Start(std::string_view service, std::string_view method,
               uint64_t method_id, Payload&& request,
               const CallOptions& options, ResponseCallback&& done,
               StreamKind kind = StreamKind::kUnary,
               std::shared_ptr<ClientStreamState> stream = nullptr);
  void Cancel(CallId id);
  // A CANCEL frame, waiting for room as requests do.
  transport::OutgoingFrame CancelFrame(uint64_t id) const;
  // Fails every call with `why` and drops the connection.
  void Shutdown(std::vector<CallTable::Entry>* orphans);

  // Picks another of a cluster's subchannels for a call's options, or
  // returns null (none other is ready).
  using Repick =
      std::function<std::shared_ptr<Subchannel>(const CallOptions& options)>;
  // For a cluster's subchannel: from now on stays connected (connects now,
  // again at once after losing its connection, and after its backoff when
  // a connect failed, with or without calls waiting), and runs `on_state`
  // on the loop thread, outside the lock, after each change between
  // kReady and the other states. A unary call that reaches this subchannel
  // after the server's GOAWAY (picked just before the cluster heard of it)
  // goes where `repick` says, if anywhere, instead of waiting for a server
  // that is going away. Called once, before any call.
  // Starts connecting now if idle (Channel::Connect).
  void ConnectNow();
  void KeepConnected(std::function<void(ChannelState)> on_state,
                     Repick repick = nullptr);
  // Refuses every call from now on with `why` (a cluster's stand-in for an
  // endpoint it does not have).
  void Refuse(Status why) {
    std::lock_guard lock(mu_);
    shut_down_ = true;
    shutdown_status_ = std::move(why);
  }
  // For a subchannel (KeepConnected): the calls completed from the
  // transport's side (responses, lost connections, deadlines) since it
  // began, and how many in a row
  // ended in a failure as outlier detection counts them
  // (include/rdmarpc/cluster_options.h). Readable from any thread.
  struct Outcomes {
    uint64_t completed;
    uint64_t failed;
    uint32_t consecutive_failures;
  };
  Outcomes outcomes() const {
    return {completed_.load(std::memory_order_relaxed),
            failed_.load(std::memory_order_relaxed),
            consecutive_failures_.load(std::memory_order_relaxed)};
  }
  size_t outstanding() const { return calls_.size(); }
  void set_id_tag(uint16_t tag) {
    std::lock_guard lock(mu_);
    calls_.set_id_tag(tag);
  }

  void OnFrame(transport::ReceivedFrame&& frame) override;
  void OnClose(const Status& reason) override;

  // StreamHost.
  bool SendStreamFrame(uint64_t id, transport::OutgoingFrame frame) override;
  void EndCall(uint64_t id, const Status& why) override;
  void PostCallback(UniqueFunction<void()> task) override {
    if (runner_->enabled()) return runner_->Post(std::move(task));
    boost::asio::post(context_, std::move(task));
  }
  void ForgetStream(uint64_t id) override {
    std::lock_guard lock(mu_);
    streams_.erase(id);
  }

  ChannelState state() const {
    std::lock_guard lock(mu_);
    return state_;
  }
  ChannelStats stats() const {
    std::lock_guard lock(mu_);
    ChannelStats out = stats_;
    out.outstanding_calls = calls_.size();
    return out;
  }
  const std::string& target() const { return target_; }
  const std::shared_ptr<CallbackRunner>& runner() const { return runner_; }
  // The rails of the connection up now (transport/rails), if it has any.
  std::vector<RailStats> rails() const {
    std::shared_ptr<transport::Connection> connection;
    {
      std::lock_guard lock(mu_);
      connection = connection_;
    }
    return connection ? connection->rail_stats() : std::vector<RailStats>();
  }

 private:
  // Completes a call from the transport's side (the loop thread): the
  // callback runs here, or on the callback executor.
  void Deliver(ResponseCallback& done, const Status& status,
               Payload&& response) {
    if (keep_connected_) CountOutcome(status);  // A cluster's subchannel.
    RunOrInvoke(*runner_, done, status, std::move(response));
  }
  // Completes a call from the caller's side (any thread, inside Call or
  // Cancel): the callback runs later, on the loop or the callback executor.
  void Complete(ResponseCallback done, const Status& status, Payload response) {
    PostCallback([done = std::move(done), status,
                  response = std::move(response)]() mutable {
      InvokeCallback(done, status, std::move(response));
    });
  }
  // Start's checks and refusals. Each returns false (or, for the void ones,
  // is called only) when the call cannot go: `done` has been completed with
  // why, outside mu_. They take `done` by reference, never moving it on the
  // way that succeeds.
  // The request's size, its names' size, its deadline; its metadata,
  // encoded into `metadata`; its loans, into `loans` (LendsBulk).
  bool Validate(size_t request_size, size_t names_size,
                const CallOptions& options, Clock::time_point now,
                ResponseCallback& done, std::string& metadata,
                std::shared_ptr<BulkLoans>& loans);
  // Under `lock` on mu_, with the channel shut down or backing off.
  bool AdmitLocked(std::unique_lock<FutexMutex>& lock,
                   const CallOptions& options, ResponseCallback& done);
  // Under `lock`: whether call `id` (already in calls_), held for the
  // request window, overflows the send queue; if so it is failed.
  bool RefusedQueueFull(std::unique_lock<FutexMutex>& lock, CallId id,
                        uint64_t window_bytes);
  // A call that lends memory (CallOptions::bulk): its loans, and `done`
  // wrapped to revoke them as the call ends. False when the regions are
  // refused: `done` has been completed with why.
  bool LendsBulk(const CallOptions& options, ResponseCallback& done,
                 std::shared_ptr<BulkLoans>& loans);
  // Sends a REQUEST on `connection`, lending its loans (if any) there
  // first. The frame moves once, into Send, as without loans.
  static Status SendRequest(
      const std::shared_ptr<transport::Connection>& connection,
      transport::OutgoingFrame&& frame, BulkLoans* loans) {
    if (loans != nullptr) [[unlikely]] {
      if (Status lent = loans->LendOn(connection, frame); !lent.ok()) {
        return lent;
      }
    }
    return connection->Send(std::move(frame));
  }
  // Encodes the call's request metadata into `*out`.
  bool EncodeMetadata(const Metadata& metadata, std::string* out,
                      ResponseCallback& done);
  // The REQUEST frame of call `id`. Takes `request` by reference: built
  // straight into Send's parameter, the payload moves once.
  transport::OutgoingFrame RequestFrame(CallId id, StreamKind kind,
                                        std::string_view service,
                                        std::string_view method,
                                        uint64_t method_id, uint64_t timeout_us,
                                        Payload&& request,
                                        const std::string& metadata) const;
  void AttachCancellation(CallCancellation& token, CallId id);
  // Under mu_: the timer fires by `deadline` (a call's).
  void ArmLocked(Clock::time_point deadline);
  // The connection refused the request of call `id`.
  void FailUnsent(CallId id, const Status& refused);
  struct Waiting;  // A request not yet sent, below.
  // Under mu_, not connected: `waiting` waits for a connection, which this
  // starts if none is being made.
  void AwaitConnectionLocked(Waiting waiting);
  // Start with interceptors: they see (and may change) a copy of `options`,
  // then the call goes on as Admit.
  CallId StartIntercepted(std::string_view service, std::string_view method,
                          uint64_t method_id, Payload& request,
                          const CallOptions& options, ResponseCallback& done,
                          StreamKind kind,
                          std::shared_ptr<ClientStreamState>& stream);
  // Start after interceptors: the call's checks (Validate), then Enqueue.
  CallId Admit(std::string_view service, std::string_view method,
               uint64_t method_id, Payload& request,
               const CallOptions& call_options, ResponseCallback& done,
               StreamKind kind, std::shared_ptr<ClientStreamState>& stream);
  // Start's second half, from the lock on: the call, intercepted and
  // validated, into the call table and sent, held or made to wait.
  // Inlined into Admit; `may_repick` is false in the copy that Repick runs.
  CallId Enqueue(std::string_view service, std::string_view method,
                 uint64_t method_id, Payload& request,
                 const CallOptions& options, ResponseCallback& done,
                 StreamKind kind, std::shared_ptr<ClientStreamState>& stream,
                 const std::string& metadata, std::shared_ptr<BulkLoans>& loans,
                 uint64_t timeout_us, bool may_repick);
  // A unary call that found goaway_ set: Enqueue on the subchannel repick_
  // names, or here (to wait for the next connection) if none.
  CallId RepickAfterGoAway(std::string_view service, std::string_view method,
                           uint64_t method_id, Payload& request,
                           const CallOptions& options, ResponseCallback& done,
                           const std::string& metadata,
                           std::shared_ptr<BulkLoans>& loans,
                           uint64_t timeout_us);
  // Runs the interceptors' OnCall on `options` (the call's copy) and wraps
  // `done` so that their OnEnd runs before it. False when one refused the
  // call: `done` has been completed with its error.
  bool Intercept(std::string_view service, std::string_view method,
                 StreamKind kind, CallOptions& options, ResponseCallback& done);
  // On the loop thread only, so plain loads and stores suffice.
  void CountOutcome(const Status& status) {
    constexpr auto relaxed = std::memory_order_relaxed;
    completed_.store(completed_.load(relaxed) + 1, relaxed);
    if (IsEndpointFailure(status.code())) [[unlikely]] {
      failed_.store(failed_.load(relaxed) + 1, relaxed);
      consecutive_failures_.store(consecutive_failures_.load(relaxed) + 1,
                                  relaxed);
    } else if (consecutive_failures_.load(relaxed) != 0) {
      consecutive_failures_.store(0, relaxed);
    }
  }
  static bool IsEndpointFailure(StatusCode code) {
    return code == StatusCode::kUnavailable || code == StatusCode::kInternal ||
           code == StatusCode::kUnknown || code == StatusCode::kDataLoss ||
           code == StatusCode::kDeadlineExceeded;
  }
  void NotifyState(ChannelState state) {
    if (on_state_) on_state_(state);
  }
  // OnFrame's halves: a stream's MESSAGE or WINDOW, and a RESPONSE.
  void OnStreamFrame(const CallHeader& header, transport::ReceivedFrame& frame);
  void OnResponse(const CallHeader& header, transport::ReceivedFrame& frame);
  // A response's headers and trailers, into `sink` (if any).
  Status ReadResponseMetadata(const CallHeader& header,
                              ResponseMetadata* sink) const;
  // A GOAWAY from the server (the loop thread).
  void OnGoAway();
  // Answers GOAWAY once no Start is about to send a REQUEST.
  void AnswerGoAway(std::shared_ptr<transport::Connection> connection);
  void StartConnect();
  void OnConnected(StatusOr<std::shared_ptr<transport::Connection>> result);
  void ArmTimer();
  void OnTimer(const boost::system::error_code& error);
  // With wait-for-ready calls waiting, connects again once the backoff is
  // over.
  void ReconnectAfterBackoff();
  // The request window has room for one more call (under mu_).
  bool WindowAdmits() const {
    return calls_.charged_calls() < tunables::kMinCallsInFlight ||
           calls_.charged_bytes() < options_.max_request_bytes_in_flight;
  }
  // Under mu_: moves the held requests the window now admits into `*out`,
  // charging each, and counts one in sending_ if any (see SendReleased);
  // returns the connection to send them on (null when not ready).
  std::shared_ptr<transport::Connection> ReleaseHeld(std::vector<Waiting>* out);
  // Under mu_: `waiting` waits for the request window.
  void Hold(Waiting waiting);
  // Outside mu_: sends what ReleaseHeld gave; a call whose request the
  // connection refuses fails with the refusal.
  void SendReleased(const std::shared_ptr<transport::Connection>& connection,
                    std::vector<Waiting>& released);
  // Under mu_ (a connection ended): the held requests, never sent, go to
  // waiting_ ahead of what waits there, for the next connection.
  void RequeueHeld();
  // Under mu_: call `id`, ended by the client, has `loans`, and its CANCEL
  // goes out on `connection`: they wait for the server's answer
  // (BulkLoans::AwaitRelease), at most tunables::kBulkReleaseGrace.
  void AwaitReleaseLocked(
      uint64_t id, BulkLoans& loans,
      const std::shared_ptr<transport::Connection>& connection);
  // Under mu_: takes call `id`'s loans out of awaiting_release_ (null if
  // not there); `timed_out` counts it as such.
  std::shared_ptr<BulkLoans> TakeAwaitingLocked(uint64_t id, bool timed_out);
  // Under mu_: takes every call's loans out of awaiting_release_ (their
  // connection is gone).
  std::vector<std::shared_ptr<BulkLoans>> TakeAllAwaitingLocked();
  void FailAll(std::vector<CallTable::Entry>& calls, const Status& status) {
    for (auto& [id, done] : calls) Deliver(done, status, Buffer());
  }

  const std::string target_;
  const ChannelOptions options_;
  boost::asio::io_context& context_;
  boost::asio::steady_timer timer_;            // Loop thread only.
  boost::asio::steady_timer reconnect_timer_;  // Loop thread only.
  const std::shared_ptr<CallbackRunner> runner_;
  using Interceptors = std::vector<std::shared_ptr<ClientInterceptor>>;
  // Shared with the calls' wrapped callbacks; null without interceptors.
  const std::shared_ptr<const Interceptors> interceptors_;

  // Taken twice per call (Start, OnResponse), briefly: a FutexMutex costs
  // less than std::mutex (base/futex_mutex.h).
  mutable FutexMutex mu_;
  ChannelState state_ = ChannelState::kIdle;
  std::shared_ptr<transport::Connection> connection_;
  CallTable calls_;
  // The calls of calls_ that stream, for their MESSAGE and WINDOW frames.
  std::unordered_map<uint64_t, std::shared_ptr<ClientStreamState>> streams_;
  // Requests of calls made while connecting, sent once connected.
  struct Waiting {
    CallId id;
    transport::OutgoingFrame frame;
    bool wait_for_ready;  // Kept through a failed connect.
    // A unary REQUEST's bytes, counted in the request window once sent; 0
    // for the rest (stream requests and messages, cancellations).
    uint64_t window_bytes = 0;
    // A REQUEST's loans (CallOptions::bulk), lent as it is sent; null for
    // most.
    std::shared_ptr<BulkLoans> bulk;
  };
  std::vector<Waiting> waiting_;
  // Calls ended by the client whose lent windows wait for the server's
  // answer (AwaitReleaseLocked), each with its grace timer.
  struct AwaitingRelease {
    std::shared_ptr<BulkLoans> loans;
    std::unique_ptr<boost::asio::steady_timer> grace;
  };
  std::unordered_map<uint64_t, AwaitingRelease> awaiting_release_;
  // Requests held back by the request window
  // (ChannelOptions::max_request_bytes_in_flight), in call order, and their
  // bytes. A call cancelled or timed out here is skipped when its turn comes.
  std::deque<Waiting> held_;
  uint64_t held_bytes_ = 0;
  // What the timer is armed for; a call with an earlier deadline re-arms it.
  std::optional<Clock::time_point> armed_;
  Status connect_error_;
  Clock::time_point backoff_until_;
  std::chrono::milliseconds backoff_;
  bool shut_down_ = false;
  Status shutdown_status_{StatusCode::kCancelled, "channel is shut down"};
  // The server said GOAWAY on connection_: new calls go where repick_
  // says, or wait in waiting_ for the next connection. sending_ counts the
  // Starts that took connection_ for a REQUEST and have not sent it yet: the
  // answering GOAWAY goes once it is 0, so no REQUEST follows it.
  bool goaway_ = false;
  std::atomic<int> sending_{0};
  ChannelStats stats_;
  // KeepConnected: set once before any call, then only read.
  bool keep_connected_ = false;
  std::function<void(ChannelState)> on_state_;
  Repick repick_;
  std::atomic<uint64_t> completed_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint32_t> consecutive_failures_{0};
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_CLIENT_SUBCHANNEL_H_
