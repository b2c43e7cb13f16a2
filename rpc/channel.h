// Channel: the client side of rdmarpc, a virtual connection to one server.
//
// A Channel connects lazily on its first call, multiplexes any number of
// outstanding calls over one connection, and after losing it reconnects on
// the next call. A failed connect puts it into backoff: calls fail fast with
// UNAVAILABLE until the backoff (growing on repeated failures) has passed.
//
//   rpc::Channel channel("tcp://127.0.0.1:5000");
//   constexpr rpc::MethodRef kSay("pkg.Echo", "Say");
//   channel.Call(kSay, Buffer::CopyOf("hi"),
//                rpc::CallOptions::WithTimeout(100ms),
//                [](const Status& status, Buffer response) { ... });
//
// A call with an attachment (rpc/common/payload.h) passes a Payload, and a
// callback that takes a Payload gets the response's attachment too:
//   channel.Call(kPut, rpc::Payload(std::move(message), std::move(bulk)),
//                options, [](const Status& status, rpc::Payload response) {
//                  ... response.message, response.attachment ...
//                });
//
// Every callback runs exactly once, on the channel's event loop thread, or
// on its callback executor when it has one (ChannelOptions); calls still
// outstanding when the Channel is destroyed complete CANCELLED on the
// destroying thread instead (from inside one of the channel's own callbacks
// too), and callbacks already due run before the destructor returns (unless
// it runs on a loop thread or inside one of the channel's callbacks).
//
// Threads: a Channel owns none. The channels of a process share a few
// event-loop threads (rpc/client/client_loops.h); a channel whose transport
// busy- or hybrid-polls gets a loop of its own.
#ifndef RDMARPC_RPC_CHANNEL_H_
#define RDMARPC_RPC_CHANNEL_H_

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/buffer.h"
#include "base/status.h"
#include "base/tunables.h"
#include "rpc/client/call_table.h"
#include "rpc/common/call_options.h"
#include "rpc/common/cluster_options.h"
#include "rpc/common/executor.h"
#include "rpc/common/interceptor.h"
#include "rpc/common/method_ref.h"
#include "rpc/common/retry_options.h"
#include "rpc/common/stream.h"
#include "transport/connection.h"

namespace rdmarpc::rpc {

class CallbackRunner;
class Retrier;
class ClientLoops;
class EventLoop;

// A streaming call, from Channel::OpenStream (docs/protocol.md, "Streams").
// Write and Read allow one outstanding operation each, from any thread;
// their callbacks run where the channel's callbacks run, never inside Write
// or Read. Flow control is per call and direction: a Write completes once
// the server's window lets the message go, so a writer that outruns its
// reader waits; messages read are given back to the server's window.
// Deadline and cancellation (CallOptions) cover the whole call.
class ClientStream {
 public:
  struct State;
  explicit ClientStream(std::shared_ptr<State> state);
  ~ClientStream();  // Cancels the call if it has not ended.
  ClientStream(const ClientStream&) = delete;
  ClientStream& operator=(const ClientStream&) = delete;

  // Client- and bidi-streaming: sends `message` to the server.
  void Write(Payload message, StreamWriteCallback done);
  // Client- and bidi-streaming: no more messages (a half-close).
  void WritesDone();
  // Server- and bidi-streaming: the server's next message, or none at the
  // end with the call's status.
  void Read(StreamReadCallback done);
  // Once: the call's status when it ends, with the response of a
  // client-streaming call (a second Finish gets FAILED_PRECONDITION). It may
  // run before the callbacks of Reads already completed: read to the end
  // first when the order matters.
  void Finish(ResponseCallback done);
  // Ends the call CANCELLED and tells the server.
  void Cancel();
  // The server's response headers, once a Read delivered its first message
  // or the call ended; its trailers once it ended. (They are also in
  // CallOptions::response_metadata, if the call set it.)
  const Metadata& response_headers() const;
  const Metadata& response_trailers() const;

 private:
  std::shared_ptr<State> state_;
};

struct ChannelOptions {
  // max_payload_size bounds responses; larger ones fail RESOURCE_EXHAUSTED.
  transport::TransportOptions transport;
  // Requests larger than this fail locally with RESOURCE_EXHAUSTED.
  uint64_t max_request_size = tunables::kDefaultMaxPayloadSize;
  // A request (or a client stream's message, or a cancellation) that finds
  // the connection's send queue past transport.max_queued_bytes waits in it,
  // in order, until the server reads (the call's deadline still applies),
  // as gRPC's calls wait on flow control: its bytes are the caller's own
  // outstanding calls. false: it fails at once with RESOURCE_EXHAUSTED, as
  // brpc's EOVERCROWDED, and the queue bounds this side's memory.
  bool wait_for_room = true;
  // The request window: a unary call's request goes out while fewer than
  // this many request bytes are in flight (sent and not yet answered) or
  // fewer than 2 calls; later calls wait in the channel, in order, and go as
  // earlier ones end. Calls past what the link can carry then queue here
  // rather than in socket buffers, where they only cost throughput (see
  // base/tunables.h). Their deadlines and cancellation still apply. With
  // wait_for_room false, a call that finds transport.max_queued_bytes of
  // requests waiting fails at once with RESOURCE_EXHAUSTED. Streams are not
  // counted: they have their own flow control. 0: no window.
  uint64_t max_request_bytes_in_flight =
      tunables::kDefaultMaxRequestBytesInFlight;
  // A response whose metadata (headers and trailers each, as
  // rpc/common/metadata.h counts them) is larger fails RESOURCE_EXHAUSTED.
  size_t max_metadata_size = tunables::kDefaultMaxMetadataSize;
  std::chrono::milliseconds initial_backoff =
      tunables::kInitialReconnectBackoff;
  std::chrono::milliseconds max_backoff = tunables::kMaxReconnectBackoff;
  double backoff_multiplier = tunables::kReconnectBackoffMultiplier;
  // Where completion callbacks run (rpc/common/executor.h). By default (0, no
  // executor) on the channel's event-loop thread: the fastest, but a
  // callback that blocks holds up every connection on that loop. With
  // callback_threads > 0, on a pool of that many threads the channel owns;
  // with callback_executor set, there instead (it must outlive the channel).
  // Either way the loop threads then never run user code.
  int callback_threads = 0;
  Executor callback_executor;
  // Run, in order, on each call before it is sent and at its end
  // (rpc/common/interceptor.h): a token, logging, metrics.
  std::vector<std::shared_ptr<ClientInterceptor>> interceptors;
  // For a target that names a cluster (list://, dns://, etcd://): how the
  // channel finds its servers and spreads calls over them
  // (rpc/common/cluster_options.h). Each server's connection has the options
  // above.
  ClusterOptions cluster;
  // Retries and hedging (rpc/common/retry_options.h): `retry` for every method,
  // unless method_retry has a policy for it ("pkg.Service/Method"). By
  // default none: max_attempts 1.
  RetryPolicy retry;
  std::map<std::string, RetryPolicy, std::less<>> method_retry;
  RetryBudget retry_budget;
};

enum class ChannelState { kIdle, kConnecting, kReady, kTransientFailure };

struct ChannelStats {
  uint64_t outstanding_calls = 0;
  uint64_t connects = 0;
  uint64_t connect_failures = 0;
  // Responses that arrived after their call had completed (deadline, cancel).
  uint64_t late_responses_dropped = 0;
  // MESSAGE and WINDOW frames for a call that is not an open stream.
  uint64_t stream_frames_dropped = 0;
  // Retry policies (rpc/common/retry_options.h): attempts sent again, hedges,
  // and retries or hedges the budget refused.
  uint64_t retries = 0;
  uint64_t hedges = 0;
  uint64_t retries_throttled = 0;
  // Calls that waited for the request window
  // (ChannelOptions::max_request_bytes_in_flight) before being sent.
  uint64_t calls_held = 0;
  // Connections lost (each may be followed by a reconnect), and of those,
  // closed because the server sent nothing, not even a keepalive PONG.
  uint64_t disconnects = 0;
  uint64_t keepalive_timeouts = 0;

  // Adds every field of `other` to this one (a cluster's subchannels, the
  // channels of one target).
  void Add(const ChannelStats& other);
};

inline void ChannelStats::Add(const ChannelStats& other) {
  static constexpr uint64_t ChannelStats::*kFields[] = {
      &ChannelStats::outstanding_calls,
      &ChannelStats::connects,
      &ChannelStats::connect_failures,
      &ChannelStats::late_responses_dropped,
      &ChannelStats::stream_frames_dropped,
      &ChannelStats::retries,
      &ChannelStats::hedges,
      &ChannelStats::retries_throttled,
      &ChannelStats::calls_held,
      &ChannelStats::disconnects,
      &ChannelStats::keepalive_timeouts};
  // A field added above and not here would be left out of every sum.
  static_assert(sizeof(kFields) / sizeof(kFields[0]) * sizeof(uint64_t) ==
                sizeof(ChannelStats));
  for (auto field : kFields) this->*field += other.*field;
}

class Channel {
 public:
  using CallId = uint64_t;

  // `target` is one server's URI (transport/uri.h), or names a cluster of
  // them (naming/resolver.h: list://, dns://, etcd://): each call then goes
  // to one of them as options.cluster says.
  explicit Channel(std::string target, ChannelOptions options = {});
  ~Channel();  // Completes every outstanding call with CANCELLED.
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Starts a call; callable from any thread. `done` gets the status and, when
  // it is OK, the response payload. The request names the method by its id
  // (rpc/common/method_ref.h): fewer bytes on the wire than the names.
  CallId Call(const MethodRef& method, Payload request,
              const CallOptions& options, ResponseCallback done);
  // The same, naming the method by service and method names: for callers
  // that learn them at run time, and for a server's errors to name them.
  CallId Call(std::string_view service, std::string_view method,
              Payload request, const CallOptions& options,
              ResponseCallback done);

  // Completes the call with CANCELLED (if it has not completed yet) and tells
  // the server to stop working on it.
  void Cancel(CallId id);

  // Opens a streaming call of `kind` to `method`, which the server must
  // have registered as that kind (else the call ends INVALID_ARGUMENT).
  // `request` is a server-streaming call's request; the others send theirs
  // by ClientStream::Write.
  std::unique_ptr<ClientStream> OpenStream(const MethodRef& method,
                                           StreamKind kind,
                                           const CallOptions& options,
                                           Payload request = Payload());

  // The channel's event loop.
  boost::asio::any_io_executor executor() const;
  // Where a typed call's completion handler without an executor of its own
  // runs (rpc/typed/typed.h): the event loop, or, when the channel has a
  // callback executor, at once on the thread that runs the callback.
  boost::asio::any_io_executor completion_executor() const;

  // For a cluster: kReady while any endpoint is connected. Stats add up
  // its endpoints'.
  ChannelState state() const;
  ChannelStats stats() const;
  const std::string& target() const;
  // A cluster's endpoints now (empty for a single-server channel).
  std::vector<EndpointStats> endpoints() const;

 private:
  class Impl;
  class Cluster;
  const std::shared_ptr<CallbackRunner>& runner() const;
  // A call of a cluster's, or with a retry policy (routed_). Takes the
  // request and callback by reference: no extra move on the way.
  CallId CallRouted(std::string_view service, std::string_view method,
                    uint64_t method_id, bool idempotent, Payload& request,
                    const CallOptions& options, ResponseCallback& done);
  // One attempt of a call: to the single server, or where the cluster
  // picks.
  static CallId Route(Impl* impl, Cluster* cluster, std::string_view service,
                      std::string_view method, uint64_t method_id,
                      Payload request, const CallOptions& options,
                      ResponseCallback done);
  // Declared first so they are destroyed last: the Impl's timers live on
  // the loop. The loop is the pool's, or own_loop_ for a polling channel.
  std::shared_ptr<ClientLoops> pool_;
  std::unique_ptr<EventLoop> own_loop_;
  EventLoop* loop_;
  // One of the two: a single server's, or a cluster's.
  std::shared_ptr<Impl> impl_;
  std::shared_ptr<Cluster> cluster_;
  // Only with a retry policy.
  std::shared_ptr<Retrier> retrier_;
  bool routed_ = false;  // A cluster, or retries: calls go by CallRouted.
};

// Calls `visit` with every Channel alive in this process (for metrics:
// rpc/builtin/prometheus.h), under a lock that Channels' constructors and
// destructors take too: each is alive while visited. `visit` must not make
// or destroy a Channel.
void ForEachChannel(const std::function<void(const Channel&)>& visit);

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_CHANNEL_H_
