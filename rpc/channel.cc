// Channel (include/rdmarpc/channel.h): the public facade over Subchannel
// (rpc/client/subchannel.h, rpc/client/subchannel.cc): its event loop, its
// life, and interceptors run before a call reaches the Subchannel.
#include "rdmarpc/channel.h"

#include <boost/asio/post.hpp>
#include <boost/asio/system_executor.hpp>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "naming/resolver.h"
#include "rpc/client/client_loops.h"
#include "rpc/client/subchannel.h"
#include "rpc/cluster/cluster.h"
#include "rpc/cluster/retry.h"
#include "rpc/common/event_loop.h"

namespace rdmarpc {

namespace asio = boost::asio;

namespace {
// Polling connections spin their loop's thread: they get one of their own.
bool NeedsOwnLoop(const ChannelOptions& options) {
  return options.transport.poll_mode != transport::PollMode::kEvent;
}

// For a channel destroyed where it cannot wait (on a loop thread, or inside
// one of its own callbacks): the callbacks still handed over run, and the
// pool stops, on a thread of their own.
void CloseRunnerLater(std::shared_ptr<rpc::CallbackRunner> runner) {
  if (!runner->enabled()) return;
  std::thread([runner = std::move(runner)] { runner->Close(); }).detach();
}

// Every Channel alive (ForEachChannel): one lock per channel made or
// destroyed, none per call.
std::mutex& ChannelsMutex() {
  static std::mutex mu;
  return mu;
}
std::set<const Channel*>& LiveChannels() {
  static auto* channels = new std::set<const Channel*>();  // Never destroyed.
  return *channels;
}
}  // namespace

void ForEachChannel(const std::function<void(const Channel&)>& visit) {
  std::lock_guard lock(ChannelsMutex());
  for (const Channel* channel : LiveChannels()) visit(*channel);
}

Channel::Channel(std::string target, ChannelOptions options)
    : pool_(NeedsOwnLoop(options) ? nullptr : rpc::ClientLoops::Shared()),
      own_loop_(NeedsOwnLoop(options) ? std::make_unique<rpc::EventLoop>()
                                      : nullptr),
      loop_(own_loop_ ? own_loop_.get() : &pool_->Next()) {
  const bool retries =
      options.retry.max_attempts > 1 || !options.method_retry.empty();
  RetryPolicy retry = options.retry;
  auto method_retry = options.method_retry;
  const RetryBudget budget = options.retry_budget;
  if (naming::IsClusterTarget(target)) {
    cluster_ = std::make_shared<rpc::Cluster>(
        std::move(target), std::move(options), loop_->context());
    cluster_->Begin();
  } else {
    impl_ = std::make_shared<rpc::Subchannel>(
        std::move(target), std::move(options), loop_->context());
  }
  routed_ = retries || cluster_ != nullptr;
  if (retries) {
    retrier_ = std::make_shared<rpc::Retrier>(
        std::move(retry), method_retry, budget, loop_->context(),
        // Weak: a retry's call may outlive the channel, and must not keep
        // its connections.
        [weak_impl = std::weak_ptr<rpc::Subchannel>(impl_),
         weak_cluster = std::weak_ptr<rpc::Cluster>(cluster_)](
            std::string_view service, std::string_view method,
            uint64_t method_id, Payload request, const CallOptions& options,
            ResponseCallback done) -> CallId {
          const auto impl = weak_impl.lock();
          const auto cluster = weak_cluster.lock();
          if (!impl && !cluster) {
            rpc::InvokeCallback(
                done, Status(StatusCode::kCancelled, "channel destroyed"),
                Buffer());
            return 0;
          }
          return Route(impl.get(), cluster.get(), service, method, method_id,
                       std::move(request), options, std::move(done));
        });
  }
  std::lock_guard lock(ChannelsMutex());
  LiveChannels().insert(this);
}

const std::shared_ptr<rpc::CallbackRunner>& Channel::runner() const {
  return cluster_ ? cluster_->runner() : impl_->runner();
}

Channel::~Channel() {
  {
    // First: no visitor sees the channel from here on.
    std::lock_guard lock(ChannelsMutex());
    LiveChannels().erase(this);
  }
  std::vector<rpc::CallTable::Entry> orphans;
  if (retrier_) retrier_->Shutdown(&orphans);
  if (cluster_) {
    cluster_->Shutdown(&orphans);
  } else {
    impl_->Shutdown(&orphans);
  }
  const std::shared_ptr<rpc::CallbackRunner> runner = this->runner();
  const Status destroyed(StatusCode::kCancelled, "channel destroyed");
  const bool on_a_loop =
      loop_->InLoopThread() || (pool_ && pool_->InLoopThread());
  if (on_a_loop) {
    // Destroyed from a callback (e.g. the last Stub dropped there): this
    // thread runs a loop, so it can neither wait for one nor join itself.
    // Complete the calls here; callbacks already posted run on the loop.
    for (auto& [id, done] : orphans)
      rpc::InvokeCallback(done, destroyed, Buffer());
    CloseRunnerLater(runner);
    if (own_loop_) {
      std::thread([loop = std::move(own_loop_), impl = std::move(impl_),
                   cluster = std::move(cluster_),
                   retrier = std::move(retrier_)]() mutable {
        loop->Stop();
        loop->RunPending();
        retrier.reset();
        impl.reset();
        cluster.reset();
        loop.reset();
      }).detach();
    } else {
      impl_.reset();
      cluster_.reset();
      retrier_.reset();
      rpc::ClientLoops::Release(std::move(pool_));
    }
    return;
  }
  if (own_loop_) {
    own_loop_->Stop();
    // Completions already posted (cancels, early failures, typed callbacks
    // dispatched to the loop) run now, on this thread: none is lost.
    own_loop_->RunPending();
  } else {
    // The loop is shared and keeps running: wait until everything this
    // channel posted before now has run there. A loop runs its handlers in
    // the order they were posted, and Shutdown took every call, so nothing
    // of this channel's is posted after this marker.
    std::promise<void> drained;
    asio::post(loop_->context(), [&drained] { drained.set_value(); });
    drained.get_future().wait();
  }
  for (auto& [id, done] : orphans)
    rpc::InvokeCallback(done, destroyed, Buffer());
  if (runner->InCallback()) {
    CloseRunnerLater(runner);  // Cannot wait for itself.
  } else {
    runner->Close();
  }
  impl_.reset();
  cluster_.reset();
  retrier_.reset();  // Holds the Subchannel or Cluster too.
  rpc::ClientLoops::Release(std::move(pool_));
}

// The one place a cluster picks for a call. Inlined into both Calls: a hop
// of its own would move the request and the callback once more.
[[gnu::always_inline]] inline Channel::CallId Channel::Route(
    rpc::Subchannel* impl, rpc::Cluster* cluster, std::string_view service,
    std::string_view method, uint64_t method_id, Payload request,
    const CallOptions& options, ResponseCallback done) {
  // A cluster's pick, held for the call.
  std::shared_ptr<rpc::Subchannel> picked;
  if (cluster != nullptr) [[unlikely]] {
    picked = cluster->Pick(options);
    if (!picked) {
      return cluster->StartLater(service, method, method_id, std::move(request),
                                 options, std::move(done));
    }
    impl = picked.get();
  }
  return impl->Start(service, method, method_id, std::move(request), options,
                     std::move(done));
}

Channel::CallId Channel::CallRouted(std::string_view service,
                                    std::string_view method, uint64_t method_id,
                                    bool idempotent, Payload& request,
                                    const CallOptions& options,
                                    ResponseCallback& done) {
  if (retrier_) {
    if (const RetryPolicy* policy = retrier_->PolicyFor(
            method_id != 0 ? method_id : MethodId(service, method))) {
      return retrier_->Start(*policy, service, method, method_id, idempotent,
                             std::move(request), options, std::move(done));
    }
  }
  return Route(impl_.get(), cluster_.get(), service, method, method_id,
               std::move(request), options, std::move(done));
}

// A single server's call goes straight to its Subchannel: one branch on
// routed_ (a cluster or retries) and no hop.
Channel::CallId Channel::Call(std::string_view service, std::string_view method,
                              Payload request, const CallOptions& options,
                              ResponseCallback done) {
  if (routed_) [[unlikely]] {
    if (retrier_) {
      return CallRouted(service, method, 0, false, request, options, done);
    }
    return Route(nullptr, cluster_.get(), service, method, 0,
                 std::move(request), options, std::move(done));
  }
  return impl_->Start(service, method, 0, std::move(request), options,
                      std::move(done));
}

Channel::CallId Channel::Call(const MethodRef& method, Payload request,
                              const CallOptions& options,
                              ResponseCallback done) {
  if (routed_) [[unlikely]] {
    if (retrier_) {
      return CallRouted(method.service(), method.method(), method.id(),
                        method.idempotent(), request, options, done);
    }
    return Route(nullptr, cluster_.get(), method.service(), method.method(),
                 method.id(), std::move(request), options, std::move(done));
  }
  return impl_->Start(method.service(), method.method(), method.id(),
                      std::move(request), options, std::move(done));
}

void Channel::Cancel(CallId id) {
  if (cluster_) return cluster_->Cancel(id);
  impl_->Cancel(id);
}

std::unique_ptr<ClientStream> Channel::OpenStream(const MethodRef& method,
                                                  StreamKind kind,
                                                  const CallOptions& options,
                                                  Payload request) {
  // A cluster's stream stays on the endpoint it starts on.
  std::shared_ptr<rpc::Subchannel> impl =
      cluster_ ? cluster_->PickForStream(options) : impl_;
  auto state = std::make_shared<rpc::ClientStreamState>(impl, kind);
  // A stream always keeps its response metadata (ClientStream reads it).
  CallOptions stream_options = options;
  if (!stream_options.response_metadata) {
    stream_options.response_metadata = std::make_shared<ResponseMetadata>();
  }
  state->response_metadata = stream_options.response_metadata;
  ResponseCallback done = [state](const Status& status, Payload response) {
    state->OnEnd(status, std::move(response));
  };
  // A stream refused before it started (by an interceptor, or a passed
  // deadline) has ended: its reads and Finish report why.
  impl->Start(method.service(), method.method(), method.id(),
              std::move(request), stream_options, std::move(done), kind, state);
  return std::make_unique<ClientStream>(std::move(state));
}

boost::asio::any_io_executor Channel::executor() const {
  return loop_->context().get_executor();
}
boost::asio::any_io_executor Channel::completion_executor() const {
  if (runner()->enabled()) return asio::system_executor();
  return loop_->context().get_executor();
}
void Channel::Connect() {
  if (impl_) impl_->ConnectNow();
}
ChannelState Channel::state() const {
  return cluster_ ? cluster_->state() : impl_->state();
}
ChannelStats Channel::stats() const {
  ChannelStats stats = cluster_ ? cluster_->stats() : impl_->stats();
  if (retrier_) {
    const rpc::Retrier::Stats retries = retrier_->stats();
    stats.retries = retries.retries;
    stats.hedges = retries.hedges;
    stats.retries_throttled = retries.throttled;
  }
  return stats;
}
const std::string& Channel::target() const {
  return cluster_ ? cluster_->target() : impl_->target();
}
std::vector<EndpointStats> Channel::endpoints() const {
  return cluster_ ? cluster_->endpoints() : std::vector<EndpointStats>();
}
std::vector<RailStats> Channel::rails() const {
  return impl_ ? impl_->rails() : std::vector<RailStats>();
}

}  // namespace rdmarpc
