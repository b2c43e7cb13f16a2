// The client side of rdmarpc.
//
//   rdmaChannel          a virtual connection to one server URI:
//                                  connects on the first call, multiplexes
//                                  calls, reconnects (with backoff) after a
//                                  lost connection. Generated stubs take a
//                                  std::shared_ptr<Channel>.
//   rdmaChannelOptions   transport options, request size limit,
//                                  where callbacks run (callback_threads).
//   rdmaCallOptions      a deadline (CallOptions::WithTimeout), a
//                                  CallCancellation to cancel the call, and
//                                  its metadata (request headers; where the
//                                  response's headers and trailers go).
//   rdmaMetadata         headers or trailers: (key, value) pairs.
//   rdmaClientInterceptor, TokenClientInterceptor
//                                  code that sees every call before it is
//                                  sent and at its end
//                                  (include/rdmarpc/interceptor.h).
//   rdmaMethodRef        names a method ("pkg.Service", "Method")
//                                  by a 64-bit id computed at compile time;
//                                  generated classes have one per method.
//   rdmaPayload          a message and its attachment: bulk bytes
//                                  sent beside it, never copied into it.
//
//   using namespace rdmarpc;
//   auto channel = std::make_shared<Channel>("rdma://10.0.0.2:7000");
//   Foo::Stub stub(channel);
//   stub.async_Bar(request, CallOptions::WithTimeout(100ms),
//                  [](Status status, BarReply reply) { ... });
//
// Every completion runs exactly once: on the channel's event-loop thread (or
// its callback pool or executor, ChannelOptions::callback_threads), or, for a
// call still outstanding when the channel is destroyed (CANCELLED), on the
// destroying thread. Channels own no thread: a process's channels share a few
// event loops (rpc/client/client_loops.h), so a callback that blocks on the
// loop holds up the other channels of that loop; give such callbacks a pool.
#ifndef RDMARPC_CHANNEL_H_
#define RDMARPC_CHANNEL_H_

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
#include "rdmarpc/connection_stats.h"
#include "rdmarpc/executor.h"
#include "rdmarpc/interceptor.h"
#include "rdmarpc/metadata.h"
#include "rdmarpc/method_ref.h"
#include "rdmarpc/payload.h"
#include "rdmarpc/status.h"
#include "rdmarpc/stream.h"
#include "rdmarpc/tunables.h"

namespace rdmarpc {

// The implementation's, which a Channel holds.
namespace rpc {
class CallbackRunner;
class ClientLoops;
class Cluster;  // rpc/cluster/cluster.h
class EventLoop;
class Retrier;
class Subchannel;  // rpc/client/subchannel.h
}  // namespace rpc

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
  // runs (include/rdmarpc/typed.h): the event loop, or, when the channel has a
  // callback executor, at once on the thread that runs the callback.
  boost::asio::any_io_executor completion_executor() const;

  // Starts connecting now, if the channel is idle, so that its first call
  // does not wait for the connection (a channel connects on its first call
  // otherwise; a cluster's endpoints connect as they are found). Over
  // rails= every rail is brought up first. state() says when it is kReady.
  void Connect();
  // For a cluster: kReady while any endpoint is connected. Stats add up
  // its endpoints'.
  ChannelState state() const;
  ChannelStats stats() const;
  const std::string& target() const;
  // A cluster's endpoints now (empty for a single-server channel).
  std::vector<EndpointStats> endpoints() const;
  // The rails of a single server's connection now (a target with rails=,
  // docs/protocol.md "Rails"); empty otherwise.
  std::vector<RailStats> rails() const;

 private:
  const std::shared_ptr<rpc::CallbackRunner>& runner() const;
  // A call of a cluster's, or with a retry policy (routed_). Takes the
  // request and callback by reference: no extra move on the way.
  CallId CallRouted(std::string_view service, std::string_view method,
                    uint64_t method_id, bool idempotent, Payload& request,
                    const CallOptions& options, ResponseCallback& done);
  // One attempt of a call: to the single server, or where the cluster
  // picks.
  static CallId Route(rpc::Subchannel* impl, rpc::Cluster* cluster,
                      std::string_view service, std::string_view method,
                      uint64_t method_id, Payload request,
                      const CallOptions& options, ResponseCallback done);
  // Declared first so they are destroyed last: the Subchannel's timers live on
  // the loop. The loop is the pool's, or own_loop_ for a polling channel.
  std::shared_ptr<rpc::ClientLoops> pool_;
  std::unique_ptr<rpc::EventLoop> own_loop_;
  rpc::EventLoop* loop_;
  // One of the two: a single server's, or a cluster's.
  std::shared_ptr<rpc::Subchannel> impl_;
  std::shared_ptr<rpc::Cluster> cluster_;
  // Only with a retry policy.
  std::shared_ptr<rpc::Retrier> retrier_;
  bool routed_ = false;  // A cluster, or retries: calls go by CallRouted.
};

// Calls `visit` with every Channel alive in this process (for metrics:
// rpc/builtin/prometheus.h), under a lock that Channels' constructors and
// destructors take too: each is alive while visited. `visit` must not make
// or destroy a Channel.
void ForEachChannel(const std::function<void(const Channel&)>& visit);

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace rpc {
using rdmarpc::Channel;
using rdmarpc::ForEachChannel;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_CHANNEL_H_
