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
// A call with an attachment (include/rdmarpc/payload.h) passes a Payload, and a
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

#include "rdmarpc/buffer.h"
#include "rdmarpc/call_options.h"
#include "rdmarpc/channel_options.h"
#include "rdmarpc/client_stream.h"
#include "rdmarpc/method_ref.h"
#include "rdmarpc/payload.h"
#include "rdmarpc/status.h"
#include "rdmarpc/stream.h"
#include "rdmarpc/tunables.h"

namespace rdmarpc::rpc {

class CallbackRunner;
class ClientLoops;
class Cluster;  // rpc/cluster/cluster.h
class EventLoop;
class Retrier;
class Subchannel;  // rpc/client/subchannel.h

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
  // (include/rdmarpc/method_ref.h): fewer bytes on the wire than the names.
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
  const std::shared_ptr<CallbackRunner>& runner() const;
  // A call of a cluster's, or with a retry policy (routed_). Takes the
  // request and callback by reference: no extra move on the way.
  CallId CallRouted(std::string_view service, std::string_view method,
                    uint64_t method_id, bool idempotent, Payload& request,
                    const CallOptions& options, ResponseCallback& done);
  // One attempt of a call: to the single server, or where the cluster
  // picks.
  static CallId Route(Subchannel* impl, Cluster* cluster,
                      std::string_view service, std::string_view method,
                      uint64_t method_id, Payload request,
                      const CallOptions& options, ResponseCallback done);
  // Declared first so they are destroyed last: the Subchannel's timers live on
  // the loop. The loop is the pool's, or own_loop_ for a polling channel.
  std::shared_ptr<ClientLoops> pool_;
  std::unique_ptr<EventLoop> own_loop_;
  EventLoop* loop_;
  // One of the two: a single server's, or a cluster's.
  std::shared_ptr<Subchannel> impl_;
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
