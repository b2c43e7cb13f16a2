#include "rdmarpc/server.h"

#include <atomic>
#include <boost/asio/post.hpp>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "base/log.h"
#include "base/log_throttle.h"
#include "naming/registration.h"
#include "rdmarpc/method_ref.h"
#include "rpc/common/event_loop.h"
#include "rpc/server/server_session.h"
#include "transport/factory/factory.h"
#include "transport/uri.h"

namespace rdmarpc {
namespace {

// "tcp", "tls" or "rdma": the scheme of a connection's peer URI.
std::string TransportOf(const transport::Connection& connection) {
  const std::string& peer = connection.peer();
  const size_t scheme = peer.find("://");
  return scheme == std::string::npos ? std::string("unknown")
                                     : peer.substr(0, scheme);
}

}  // namespace

class Server::Impl {
 public:
  explicit Impl(ServerOptions options)
      : options_(std::move(options)),
        core_(std::make_shared<rpc::ServerCore>()) {
    core_->max_response_size = options_.max_response_size;
    core_->max_metadata_size = options_.max_metadata_size;
    core_->interceptors = options_.interceptors;
    for (const auto& interceptor : options_.interceptors) {
      if (interceptor->admission())
        core_->admitters.push_back(interceptor.get());
    }
    core_->max_unadmitted_frame_bytes = options_.max_unadmitted_frame_bytes;
    core_->metrics = options_.enable_metrics;
    core_->max_calls_per_connection = options_.max_calls_per_connection;
    core_->max_concurrency = options_.max_concurrency;
    core_->max_connection_idle = options_.max_connection_idle;
    core_->max_connection_age = options_.max_connection_age;
    core_->max_connection_age_grace = options_.max_connection_age_grace;
    core_->goaway_answer_timeout = options_.goaway_answer_timeout;
    if (options_.handler_executor) {
      core_->handler_executor = options_.handler_executor;
    } else if (options_.handler_threads > 0) {
      handler_pool_ = std::make_unique<ThreadPool>(options_.handler_threads);
      core_->handler_executor = handler_pool_->executor();
    }
    const int workers = options_.workers > 0 ? options_.workers : 1;
    for (int i = 0; i < workers; ++i) {
      workers_->push_back(std::make_unique<rpc::EventLoop>());
    }
  }

  void RegisterService(Service* service,
                       std::unique_ptr<Service> owned = nullptr) {
    std::lock_guard lock(mu_);
    if (serving_) {
      Log().error("RegisterService({}) after Listen is ignored",
                  service->name());
      return;
    }
    rpc::ServiceEntry entry;
    entry.service = service;
    for (const std::string& name : service->method_names()) {
      auto method = std::make_unique<rpc::MethodEntry>();
      method->handler = service->FindMethod(name);
      method->kind = service->method_kind(name);
      const auto limit =
          options_.method_max_concurrency.find(service->name() + "/" + name);
      if (limit != options_.method_max_concurrency.end()) {
        method->max_concurrency = limit->second;
      }
      entry.methods.emplace(name, std::move(method));
    }
    core_->services.insert_or_assign(service->name(), std::move(entry));
    if (owned) owned_services_.push_back(std::move(owned));
    IndexMethodsLocked();
  }

  // Names and ids every registered method. Rebuilt whole: a service
  // registered again under its name replaces the old one and its ids.
  void IndexMethodsLocked() {
    core_->methods_by_id.Clear();
    for (const auto& [service_name, service] : core_->services) {
      for (const auto& [method_name, method] : service.methods) {
        method->service = &service_name;
        method->method = &method_name;
        method->id = MethodId(service_name, method_name);
        if (!core_->methods_by_id.Add(method->id, method.get())) {
          Log().error(
              "{}/{}: method id {:#018x} is shared with another method; "
              "requests by that id are refused, call these by name",
              service_name, method_name, method->id);
        }
      }
    }
  }

  std::vector<const Service*> services() const {
    std::lock_guard lock(mu_);
    std::vector<const Service*> out;
    for (const auto& [name, entry] : core_->services) {
      out.push_back(entry.service);
    }
    return out;
  }

  void ForEachMethod(
      const std::function<void(const std::string&, const std::string&,
                               const rpc::MethodMetrics&)>& visit) const {
    std::lock_guard lock(mu_);  // Against a RegisterService before Listen.
    for (const auto& [service, entry] : core_->services) {
      for (const auto& [method, method_entry] : entry.methods) {
        visit(service, method, method_entry->metrics);
      }
    }
  }

  void ForEachConnection(
      const std::function<void(const transport::Connection&)>& visit) const {
    std::vector<std::shared_ptr<rpc::ServerSession>> sessions;
    {
      std::lock_guard lock(mu_);
      sessions.assign(sessions_.begin(), sessions_.end());
    }
    for (const auto& session : sessions) visit(session->connection());
  }

  using TransportTotals = Server::TransportTotals;
  void ForEachTransport(
      const std::function<void(const std::string&, const TransportTotals&)>&
          visit) const {
    std::map<std::string, TransportTotals> totals;
    std::vector<std::shared_ptr<rpc::ServerSession>> sessions;
    {
      // Both under one lock: a connection is counted open or closed, once.
      std::lock_guard lock(mu_);
      sessions.assign(sessions_.begin(), sessions_.end());
      for (const auto& [transport, stats] : closed_totals_) {
        totals[transport].counters.Add(stats);
      }
    }
    for (const auto& session : sessions) {
      const transport::Connection& connection = session->connection();
      TransportTotals& sum = totals[TransportOf(connection)];
      ++sum.open;
      sum.queued_bytes += connection.queued_bytes();
      sum.counters.Add(connection.stats());
    }
    for (const auto& [transport, sum] : totals) visit(transport, sum);
  }

  StatusOr<std::string> Listen(std::string_view uri) {
    std::lock_guard lock(mu_);
    if (shut_down_) {
      return Status(StatusCode::kFailedPrecondition, "server is shut down");
    }
    if (!serving_) {
      for (const auto& [name, limit] : options_.method_max_concurrency) {
        const auto slash = name.rfind('/');
        const auto service = core_->services.find(name.substr(0, slash));
        if (slash == std::string::npos || service == core_->services.end() ||
            !service->second.methods.contains(name.substr(slash + 1))) {
          Log().warn(
              "method_max_concurrency names {}, which no registered "
              "service has (expected \"pkg.Service/Method\")",
              name);
        }
      }
    }
    serving_ = true;
    auto listener = transport::Listen(
        (*workers_)[0]->context(), uri, options_.transport,
        [this]() -> boost::asio::io_context& {
          const size_t next = next_worker_++ % workers_->size();
          return (*workers_)[next]->context();
        },
        [this](const std::shared_ptr<transport::Connection>& connection) {
          Accept(connection);
        });
    if (!listener.ok()) return listener.status();
    std::string bound = (*listener)->uri();
    if (!side_started_) {
      if (!side_error_.ok()) return side_error_;
      for (auto& side : side_endpoints_) {
        Status started = side->Start((*workers_)[0]->context());
        if (!started.ok()) return started;
      }
      side_started_ = true;
    }
    if (!options_.register_at.empty() && !registration_) {
      Status registered = Register(bound);
      if (!registered.ok()) return registered;
    }
    Log().info("server listening on {}", bound);
    listeners_.push_back(std::move(*listener));
    return bound;
  }

  void OnShutdown(std::function<void()> hook) {
    std::lock_guard lock(mu_);
    shutdown_hooks_.push_back(std::move(hook));
  }

  void Shutdown(std::chrono::milliseconds grace) {
    std::unique_ptr<naming::Registration> registration;
    std::vector<std::function<void()>> hooks;
    {
      std::lock_guard lock(mu_);
      if (shut_down_) return;
      shut_down_ = true;
      registration = std::move(registration_);
      hooks = std::move(shutdown_hooks_);
    }
    for (auto& hook : hooks) hook();
    // Out of the cluster first, so that clients stop picking this server.
    if (registration) {
      const Status deregistered = registration->Stop();
      if (!deregistered.ok()) {
        Log().warn("shutdown: deregistering {} failed: {}", registration->key(),
                   deregistered.message());
      }
    }
    std::set<std::shared_ptr<rpc::ServerSession>> open;
    {
      std::lock_guard lock(mu_);
      for (auto& listener : listeners_) listener->Close();
      open = sessions_;
    }
    const auto deadline = std::chrono::steady_clock::now() + grace;
    if (grace.count() > 0) AwaitGoAwayAnswers(open, deadline);
    {
      std::unique_lock lock(core_->mu);
      core_->draining = true;
      const bool drained = core_->idle.wait_until(
          lock, deadline, [this] { return core_->live_calls == 0; });
      if (!drained) {
        Log().warn("shutdown: {} calls still running after {} ms; cancelling",
                   core_->live_calls.load(), grace.count());
      }
    }
    CloseAll();
  }

  // GOAWAY: clients send no new call here, and answer once they have sent
  // their last. Until every client answered (or `deadline`, or the answer
  // timeout) requests are still served: none that crossed the GOAWAY fails.
  void AwaitGoAwayAnswers(
      const std::set<std::shared_ptr<rpc::ServerSession>>& open,
      std::chrono::steady_clock::time_point deadline) {
    for (const auto& session : open) session->GoAway();
    std::unique_lock lock(core_->mu);
    const bool answered = core_->idle.wait_until(
        lock,
        std::min(deadline, std::chrono::steady_clock::now() +
                               options_.goaway_answer_timeout),
        [this] {
          return core_->goaways_answered.load() >= core_->goaways_sent.load();
        });
    if (!answered) {
      Log().warn("shutdown: {} of {} clients did not answer GOAWAY",
                 core_->goaways_sent.load() - core_->goaways_answered.load(),
                 core_->goaways_sent.load());
    }
  }

  // Shutdown's end: every connection, side endpoint and worker closed.
  void CloseAll() {
    std::set<std::shared_ptr<rpc::ServerSession>> sessions;
    {
      std::lock_guard lock(mu_);
      sessions = sessions_;
    }
    for (const auto& session : sessions) {
      session->Close(Status(StatusCode::kUnavailable, "server shut down"));
    }
    listeners_.clear();
    {
      std::vector<std::unique_ptr<SideEndpoint>> side;
      {
        std::lock_guard lock(mu_);
        side = std::move(side_endpoints_);
      }
      side.clear();  // Their connections close as the workers drain.
    }
    // From here a stream callback runs where it is posted: the workers
    // stop, and then the handler pool goes (ServerCore::stopped).
    core_->stopped = true;
    while (core_->posting > 0) std::this_thread::yield();
    // Every connection is closing: let each worker run its close handlers
    // (bounded, since a close flushes for at most kCloseFlushTimeout).
    for (auto& worker : *workers_) {
      worker->Drain(2 * tunables::kCloseFlushTimeout);
    }
    std::lock_guard lock(mu_);
    sessions_.clear();
  }

  std::string admin_uri() const {
    std::lock_guard lock(mu_);
    return side_started_ && !side_endpoints_.empty()
               ? side_endpoints_.front()->uri()
               : std::string();
  }

  void AddSideEndpoint(std::unique_ptr<SideEndpoint> endpoint) {
    std::lock_guard lock(mu_);
    if (serving_) {
      Log().error("AddSideEndpoint after Listen is ignored");
      return;
    }
    side_endpoints_.push_back(std::move(endpoint));
  }

  // A Listen fails with `why` (ServerOptions::admin_listen without the
  // admin endpoint linked in).
  void FailListen(Status why) {
    std::lock_guard lock(mu_);
    side_error_ = std::move(why);
  }

  const ServerOptions& options() const { return options_; }

  ServerStats stats() const {
    ServerStats out;
    {
      std::lock_guard lock(mu_);
      out.connections = sessions_.size();
    }
    out.live_calls = core_->live_calls;
    out.calls_started = core_->calls_started;
    out.responses_dropped = core_->responses_dropped;
    out.responses_refused = core_->responses_refused;
    out.protocol_errors = core_->protocol_errors;
    out.unknown_method_calls = core_->unknown_method_calls;
    out.stream_frames_dropped = core_->stream_frames_dropped;
    out.calls_over_limit = core_->calls_over_limit;
    out.calls_shed = core_->calls_shed;
    out.connections_refused = core_->connections_refused;
    out.peers_timed_out = core_->peers_timed_out;
    out.connections_recycled = core_->connections_recycled;
    return out;
  }

 private:
  void Accept(const std::shared_ptr<transport::Connection>& connection) {
    // One line per host and interval: a peer may open connections at will.
    if (const auto held = ThrottleLog("accepted", connection->peer())) {
      Log().info("{}: accepted{}", connection->peer(), HeldBack(*held));
    }
    auto session =
        std::make_shared<rpc::ServerSession>(core_, connection, workers_);
    std::string host;  // Counted in per_host_ (max_connections_per_peer).
    {
      std::lock_guard lock(mu_);
      if (shut_down_) {
        connection->Close(
            Status(StatusCode::kUnavailable, "server shutting down"));
        return;
      }
      const uint32_t limit = options_.max_connections;
      if (limit > 0 && sessions_.size() >= limit) {
        core_->connections_refused++;
        if (const auto held = ThrottleLog("refused", connection->peer())) {
          Log().warn(
              "{}: refused: the server has {} connections, its limit "
              "(max_connections){}",
              connection->peer(), sessions_.size(), HeldBack(*held));
        }
        session->Refuse(Status(
            StatusCode::kResourceExhausted,
            "server at its connection limit (" + std::to_string(limit) + ")"));
      } else if (const uint32_t per_peer = options_.max_connections_per_peer;
                 per_peer > 0) {
        host = PeerHost(connection->peer());
        if (per_host_[host]++ >= per_peer) {
          core_->connections_refused++;
          if (const auto held = ThrottleLog("refused", connection->peer())) {
            Log().warn(
                "{}: refused: {} connections from that host, its limit "
                "(max_connections_per_peer){}",
                connection->peer(), per_peer, HeldBack(*held));
          }
          session->Refuse(Status(StatusCode::kResourceExhausted,
                                 "server at its limit of connections from one "
                                 "host (" +
                                     std::to_string(per_peer) + ")"));
        }
      }
      sessions_.insert(session);
    }
    if (!core_->admitters.empty()) session->RequireAdmission();
    session->SetOnClosed([this, weak = std::weak_ptr(session), host] {
      std::lock_guard lock(mu_);
      if (!host.empty() && --per_host_[host] == 0) per_host_.erase(host);
      if (auto s = weak.lock()) {
        // Its counts stay in the transport's totals (ForEachTransport).
        closed_totals_[TransportOf(s->connection())].Add(
            s->connection().stats());
        sessions_.erase(s);
      }
    });
    session->Start();
  }

  // Under mu_: registers `bound` (or advertise_uri) at register_at.
  Status Register(const std::string& bound) {
    std::string uri =
        options_.advertise_uri.empty() ? bound : options_.advertise_uri;
    StatusOr<transport::Uri> parsed = transport::ParseUri(uri);
    if (!parsed.ok()) return parsed.status();
    if (parsed->host == "0.0.0.0" || parsed->host == "::" ||
        parsed->host.empty()) {
      return Status(StatusCode::kInvalidArgument,
                    "cannot register " + uri +
                        " in etcd: no client can dial a wildcard address; "
                        "set ServerOptions::advertise_uri");
    }
    auto registration = naming::Registration::Start(
        (*workers_)[0]->context().get_executor(), options_.register_at, uri,
        options_.registration);
    if (!registration.ok()) return registration.status();
    registration_ = std::move(*registration);
    return Status();
  }

  const ServerOptions options_;
  const std::shared_ptr<rpc::ServerCore> core_;
  // Shared with every session: a socket must not outlive its event loop.
  using Workers = std::vector<std::unique_ptr<rpc::EventLoop>>;
  const std::shared_ptr<Workers> workers_ = std::make_shared<Workers>();
  std::atomic<size_t> next_worker_{0};

  mutable std::mutex mu_;
  // Started at the first Listen; the admin endpoint's is first.
  std::vector<std::unique_ptr<SideEndpoint>> side_endpoints_;  // Guarded.
  bool side_started_ = false;                                  // Guarded.
  Status side_error_;                                          // Guarded.
  bool serving_ = false;    // Guarded by mu_.
  bool shut_down_ = false;  // Guarded by mu_.
  std::vector<std::unique_ptr<transport::Listener>> listeners_;  // Guarded.
  std::unique_ptr<naming::Registration> registration_;           // Guarded.
  std::vector<std::function<void()>> shutdown_hooks_;            // Guarded.
  std::set<std::shared_ptr<rpc::ServerSession>> sessions_;       // Guarded.
  // Open connections by peer host, with max_connections_per_peer. Guarded.
  std::map<std::string, uint32_t> per_host_;
  // Per transport, the counters of the connections closed (ForEachTransport).
  std::map<std::string, transport::ConnectionStats> closed_totals_;  // Guarded.
  std::vector<std::unique_ptr<Service>> owned_services_;             // Guarded.
  // Destroyed first: it runs the handlers given to it and waits for them,
  // while the services they belong to still exist.
  std::unique_ptr<ThreadPool> handler_pool_;
};

namespace internal {
AdminFromOptions admin_from_options = nullptr;
}  // namespace internal

Server::Server(ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {
  const std::string& admin = impl_->options().admin_listen;
  if (admin.empty()) return;
  if (internal::admin_from_options != nullptr) {
    internal::admin_from_options(*this, admin);
  } else {
    impl_->FailListen(Status(
        StatusCode::kFailedPrecondition,
        "ServerOptions::admin_listen needs the admin endpoint linked in: "
        "depend on //rpc/builtin:admin (@rdmarpc//:rdmarpc has it)"));
  }
}
std::string Server::admin_uri() const { return impl_->admin_uri(); }
void Server::AddSideEndpoint(std::unique_ptr<SideEndpoint> endpoint) {
  impl_->AddSideEndpoint(std::move(endpoint));
}
Server::~Server() { impl_->Shutdown(std::chrono::milliseconds(0)); }
void Server::RegisterService(Service* service) {
  impl_->RegisterService(service);
}
void Server::OnShutdown(std::function<void()> hook) {
  impl_->OnShutdown(std::move(hook));
}
StatusOr<std::string> Server::Listen(std::string_view uri) {
  return impl_->Listen(uri);
}
void Server::Shutdown(std::chrono::milliseconds grace) {
  impl_->Shutdown(grace);
}
void Server::RegisterService(std::unique_ptr<Service> service) {
  Service* raw = service.get();
  impl_->RegisterService(raw, std::move(service));
}
ServerStats Server::stats() const { return impl_->stats(); }

const ServerOptions& Server::options() const { return impl_->options(); }
std::vector<const Service*> Server::services() const {
  return impl_->services();
}
void Server::ForEachMethod(
    const std::function<void(const std::string&, const std::string&,
                             const rpc::MethodMetrics&)>& visit) const {
  impl_->ForEachMethod(visit);
}
void Server::ForEachConnection(
    const std::function<void(const transport::Connection&)>& visit) const {
  impl_->ForEachConnection(visit);
}

void Server::ForEachTransport(
    const std::function<void(const std::string&, const TransportTotals&)>&
        visit) const {
  impl_->ForEachTransport(visit);
}

}  // namespace rdmarpc
