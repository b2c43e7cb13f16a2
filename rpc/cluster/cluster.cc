// Cluster (rpc/cluster/cluster.h).
#include "rpc/cluster/cluster.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cmath>

#include "base/log.h"

namespace rdmarpc::rpc {

namespace asio = boost::asio;

namespace {

// xorshift64*, one per thread: the two random choices of kLeastLoaded.
uint64_t NextRandom() {
  thread_local uint64_t state =
      0x9e3779b97f4a7c15ull ^ reinterpret_cast<uintptr_t>(&state);
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return state * 2685821657736338717ull;
}

// A removed endpoint's subchannel finishes the calls it has, then closes.
constexpr auto kRetirePoll = std::chrono::milliseconds(100);
constexpr auto kRetireLimit = std::chrono::seconds(60);

}  // namespace

void Cluster::Retire(asio::io_context& context,
                     std::shared_ptr<Subchannel> impl,
                     std::shared_ptr<CallbackRunner> runner,
                     Clock::time_point give_up) {
  if (impl->outstanding() == 0 || Clock::now() >= give_up) {
    std::vector<CallTable::Entry> orphans;
    impl->Shutdown(&orphans);
    const Status removed(StatusCode::kUnavailable,
                         impl->target() + " left the cluster");
    for (auto& [id, done] : orphans) {
      RunOrInvoke(*runner, done, removed, Payload());
    }
    return;
  }
  auto timer = std::make_shared<asio::steady_timer>(context, kRetirePoll);
  timer->async_wait([&context, impl = std::move(impl),
                     runner = std::move(runner), give_up,
                     timer](const boost::system::error_code& error) mutable {
    if (!error) Retire(context, std::move(impl), std::move(runner), give_up);
  });
}

Cluster::Cluster(std::string target, ChannelOptions options,
                 asio::io_context& context)
    : target_(std::move(target)),
      options_(std::move(options)),
      context_(context),
      runner_(std::make_shared<CallbackRunner>(options_)),
      outlier_timer_(context),
      pending_timer_(context),
      health_timer_(context) {}

void Cluster::Begin() {
  auto resolver = naming::MakeResolver(target_, context_.get_executor(),
                                       options_.cluster.naming);
  std::lock_guard lock(mu_);
  if (!resolver.ok()) {
    resolved_ = true;
    resolver_error_ = resolver.status();
    return;
  }
  resolver_ = std::move(*resolver);
  resolver_->Start(
      [weak = weak_from_this()](StatusOr<std::vector<std::string>> endpoints) {
        if (auto self = weak.lock()) self->OnResolved(std::move(endpoints));
      });
}

std::shared_ptr<Subchannel> Cluster::Pick(const CallOptions& options) {
  std::lock_guard lock(mu_);
  if (!active_) [[unlikely]] {
    Activate();
  }
  const std::shared_ptr<Subchannel>* picked = PickLocked(options);
  if (picked == nullptr) [[unlikely]] {
    return nullptr;
  }
  return *picked;
}

Cluster::CallId Cluster::StartLater(std::string_view service,
                                    std::string_view method, uint64_t method_id,
                                    Payload request, const CallOptions& options,
                                    ResponseCallback done) {
  std::shared_ptr<Subchannel> impl;
  Status refused;
  {
    std::lock_guard lock(mu_);
    if (const auto* picked = PickLocked(options)) {
      impl = *picked;  // Connected meanwhile.
    } else if (shut_down_) {
      refused = Status(StatusCode::kCancelled, "channel is shut down");
    } else if (resolved_ && AllFailed() && !options.wait_for_ready) {
      refused = NoEndpointStatus();
    } else {
      // Nothing connected yet: wait for the first endpoint that connects.
      const uint64_t id = next_pending_id_++ & ((uint64_t{1} << 48) - 1);
      pending_.push_back({id, std::string(service), std::string(method),
                          method_id, std::move(request), options,
                          std::move(done)});
      if (options.deadline &&
          (!pending_armed_ || *options.deadline < *pending_armed_)) {
        pending_armed_ = options.deadline;
        asio::post(context_,
                   [self = shared_from_this()] { self->ArmPendingTimer(); });
      }
      return id;
    }
  }
  if (impl) {
    return impl->Start(service, method, method_id, std::move(request), options,
                       std::move(done));
  }
  MarkNotRun(options.response_metadata);
  auto task = [done = std::move(done), refused]() mutable {
    InvokeCallback(done, refused, Buffer());
  };
  if (runner_->enabled()) {
    runner_->Post(std::move(task));
  } else {
    asio::post(context_, std::move(task));
  }
  return 0;
}

void Cluster::Cancel(CallId id) {
  std::shared_ptr<Subchannel> impl;
  std::optional<Pending> cancelled;
  {
    std::lock_guard lock(mu_);
    const uint16_t tag = CallTable::IdTag(id);
    if (tag != 0) {
      if (tag < by_tag_.size()) impl = by_tag_[tag].lock();
    } else {
      auto it = std::find_if(pending_.begin(), pending_.end(),
                             [id](const Pending& p) { return p.id == id; });
      if (it == pending_.end()) return;
      cancelled.emplace(std::move(*it));
      pending_.erase(it);
    }
  }
  if (impl) return impl->Cancel(id);
  if (cancelled) {
    asio::post(context_, [done = std::move(cancelled->done)]() mutable {
      InvokeCallback(
          done, Status(StatusCode::kCancelled, "call cancelled by the client"),
          Buffer());
    });
  }
}

std::shared_ptr<Subchannel> Cluster::PickForStream(const CallOptions& options) {
  {
    std::lock_guard lock(mu_);
    if (!active_) Activate();
    if (const auto* picked = PickLocked(options)) return *picked;
    for (const auto& sub : subchannels_) {
      if (!sub->failed && !sub->ejected) return sub->impl;
    }
  }
  auto stand_in =
      std::make_shared<Subchannel>(target_, options_, context_, runner_);
  std::lock_guard lock(mu_);
  stand_in->Refuse(NoEndpointStatus());
  return stand_in;
}

void Cluster::Shutdown(std::vector<CallTable::Entry>* orphans) {
  std::vector<std::shared_ptr<Endpoint>> subchannels;
  {
    std::lock_guard lock(mu_);
    shut_down_ = true;
    for (auto& pending : pending_) {
      orphans->emplace_back(pending.id, std::move(pending.done));
    }
    pending_.clear();
    subchannels = std::move(subchannels_);
    subchannels_.clear();
    ready_.clear();
    ring_ = HashRing();
  }
  if (resolver_) resolver_->Stop();
  asio::post(context_, [self = shared_from_this()] {
    self->outlier_timer_.cancel();
    self->pending_timer_.cancel();
    self->health_timer_.cancel();
  });
  for (const auto& sub : subchannels) sub->impl->Shutdown(orphans);
}

// ------------------------------------------------------------- loop thread --

void Cluster::OnResolved(StatusOr<std::vector<std::string>> endpoints) {
  std::vector<std::shared_ptr<Subchannel>> removed;
  std::vector<std::pair<Pending, std::shared_ptr<Subchannel>>> ready;
  std::vector<Pending> failed;
  Status why;
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return;
    resolved_ = true;
    if (!endpoints.ok()) {
      resolver_error_ = endpoints.status();
      Log().warn("{}: {}", target_, endpoints.status().message());
    } else {
      resolver_error_.reset();
      std::vector<std::shared_ptr<Endpoint>> next;
      for (const std::string& uri : *endpoints) {
        auto it = std::find_if(
            subchannels_.begin(), subchannels_.end(),
            [&](const auto& sub) { return sub && sub->uri == uri; });
        if (it != subchannels_.end()) {
          next.push_back(std::move(*it));
        } else {
          next.push_back(AddSubchannel(uri));
        }
      }
      for (auto& sub : subchannels_) {
        if (!sub) continue;
        Log().info("{}: endpoint {} left", target_, sub->uri);
        by_tag_[sub->tag].reset();
        removed.push_back(std::move(sub->impl));
      }
      subchannels_ = std::move(next);
      Log().info("{}: {} endpoints", target_, subchannels_.size());
      RebuildPicker();
    }
    TakeDispatchable(&ready, &failed, &why);
  }
  for (auto& impl : removed) {
    Retire(context_, std::move(impl), runner_, Clock::now() + kRetireLimit);
  }
  Dispatch(std::move(ready), std::move(failed), why);
}

void Cluster::OnSubchannelState(const std::shared_ptr<Endpoint>& sub,
                                ChannelState state) {
  std::vector<std::pair<Pending, std::shared_ptr<Subchannel>>> ready;
  std::vector<Pending> failed;
  Status why;
  bool refresh = false;
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return;
    const bool was_ready = sub->ready;
    sub->ready = state == ChannelState::kReady;
    sub->failed = state == ChannelState::kTransientFailure;
    refresh = sub->failed;
    if (was_ready != sub->ready) RebuildPicker();
    TakeDispatchable(&ready, &failed, &why);
  }
  if (refresh && resolver_) resolver_->Refresh();
  Dispatch(std::move(ready), std::move(failed), why);
}

void Cluster::ArmPendingTimer() {
  std::optional<Clock::time_point> next;
  {
    std::lock_guard lock(mu_);
    for (const auto& pending : pending_) {
      if (pending.options.deadline &&
          (!next || *pending.options.deadline < *next)) {
        next = pending.options.deadline;
      }
    }
    pending_armed_ = next;
  }
  if (!next) return;
  pending_timer_.expires_at(*next);
  pending_timer_.async_wait(
      [weak = weak_from_this()](const boost::system::error_code& error) {
        if (error) return;
        auto self = weak.lock();
        if (!self) return;
        std::vector<Pending> expired;
        {
          std::lock_guard lock(self->mu_);
          const auto now = Clock::now();
          std::erase_if(self->pending_, [&](Pending& pending) {
            if (!pending.options.deadline || *pending.options.deadline > now) {
              return false;
            }
            expired.push_back(std::move(pending));
            return true;
          });
        }
        self->Dispatch({}, std::move(expired),
                       Status(StatusCode::kDeadlineExceeded,
                              "deadline exceeded before any endpoint of " +
                                  self->target_ + " connected"));
        self->ArmPendingTimer();
      });
}

// ---------------------------------------------------------------- under mu_ --

std::shared_ptr<Cluster::Endpoint> Cluster::AddSubchannel(
    const std::string& uri) {
  auto sub = std::make_shared<Endpoint>();
  sub->uri = uri;
  // A tag not in use: the next one, or a freed slot once 16 bits run out.
  if (by_tag_.empty()) by_tag_.resize(1);  // Tag 0: pending calls.
  if (by_tag_.size() < 65536) {
    sub->tag = static_cast<uint16_t>(by_tag_.size());
    by_tag_.emplace_back();
  } else {
    for (uint16_t tag = next_tag_;; tag = tag == 65535 ? 1 : tag + 1) {
      if (by_tag_[tag].expired()) {
        sub->tag = tag;
        break;
      }
    }
    next_tag_ = sub->tag == 65535 ? 1 : sub->tag + 1;
  }
  sub->impl = std::make_shared<Subchannel>(uri, options_, context_, runner_);
  sub->impl->set_id_tag(sub->tag);
  by_tag_[sub->tag] = sub->impl;
  Log().info("{}: endpoint {} joined", target_, uri);
  if (active_) KeepConnected(sub);
  return sub;
}

void Cluster::KeepConnected(const std::shared_ptr<Endpoint>& sub) {
  sub->impl->KeepConnected(
      [weak = weak_from_this(),
       held = std::weak_ptr<Endpoint>(sub)](ChannelState state) {
        auto self = weak.lock();
        auto sub = held.lock();
        if (self && sub) self->OnSubchannelState(sub, state);
      },
      [weak = weak_from_this(), held = std::weak_ptr<Subchannel>(sub->impl)](
          const CallOptions& options) -> std::shared_ptr<Subchannel> {
        auto self = weak.lock();
        if (!self) return nullptr;
        std::lock_guard lock(self->mu_);
        const std::shared_ptr<Subchannel>* picked = self->PickLocked(options);
        if (picked == nullptr || *picked == held.lock()) return nullptr;
        return *picked;
      });
}

void Cluster::Activate() {
  active_ = true;
  for (const auto& sub : subchannels_) KeepConnected(sub);
  asio::post(context_, [self = shared_from_this()] { self->CheckOutliers(); });
  if (options_.cluster.health_check.enabled) {
    asio::post(context_, [self = shared_from_this()] { self->CheckHealth(); });
  }
}

void Cluster::RebuildPicker() {
  ready_.clear();
  std::vector<std::string> uris;
  for (const auto& sub : subchannels_) {
    if (!sub->ready || sub->ejected || !sub->healthy) continue;
    ready_.push_back(sub->impl);
    uris.push_back(sub->uri);
  }
  if (options_.cluster.policy == LoadBalancing::kHashRing) {
    ring_ = HashRing(uris, options_.cluster.hash_points);
  }
}

const std::shared_ptr<Subchannel>* Cluster::PickLocked(
    const CallOptions& options) {
  const size_t n = ready_.size();
  if (n == 0) return nullptr;
  switch (options_.cluster.policy) {
    case LoadBalancing::kRoundRobin:
      break;
    case LoadBalancing::kLeastLoaded: {
      if (n == 1) return &ready_[0];
      const size_t a = NextRandom() % n;
      size_t b = NextRandom() % (n - 1);
      if (b >= a) ++b;
      return ready_[a]->outstanding() <= ready_[b]->outstanding() ? &ready_[a]
                                                                  : &ready_[b];
    }
    case LoadBalancing::kHashRing: {
      std::optional<uint64_t> key = options.balance_key;
      if (!key && !options_.cluster.balance_metadata_key.empty()) {
        if (auto value =
                options.metadata.Get(options_.cluster.balance_metadata_key)) {
          key = BalanceKey(*value);
        }
      }
      if (!key) break;
      uint64_t total = 0;
      for (const auto& impl : ready_) total += impl->outstanding();
      const auto cap = static_cast<uint64_t>(
          std::ceil(options_.cluster.hash_load_bound *
                    static_cast<double>(total + 1) / static_cast<double>(n)));
      size_t index = ring_.Find(
          *key, [&](size_t i) { return ready_[i]->outstanding() < cap; });
      if (index == HashRing::kNone) {
        index = ring_.Find(*key, [](size_t) { return true; });
      }
      return &ready_[index];
    }
  }
  // Round robin: a compare, not a division, per call.
  if (next_ >= n) next_ = 0;
  return &ready_[next_++];
}

bool Cluster::AllFailed() const {
  return std::all_of(
      subchannels_.begin(), subchannels_.end(),
      [](const auto& sub) { return sub->failed || !sub->healthy; });
}

Status Cluster::NoEndpointStatus() const {
  if (resolver_error_) {
    return Status(StatusCode::kUnavailable,
                  target_ + ": " + resolver_error_->message());
  }
  if (subchannels_.empty()) {
    return Status(StatusCode::kUnavailable, target_ + " lists no endpoint");
  }
  return Status(StatusCode::kUnavailable,
                "no endpoint of " + target_ +
                    " could be connected or is serving (" +
                    std::to_string(subchannels_.size()) + " tried)");
}

void Cluster::TakeDispatchable(
    std::vector<std::pair<Pending, std::shared_ptr<Subchannel>>>* ready,
    std::vector<Pending>* failed, Status* why) {
  if (pending_.empty()) return;
  if (!ready_.empty()) {
    for (auto& pending : pending_) {
      ready->emplace_back(std::move(pending), *PickLocked(pending.options));
    }
    pending_.clear();
    return;
  }
  if (!resolved_ || !AllFailed()) return;
  *why = NoEndpointStatus();
  std::erase_if(pending_, [&](Pending& pending) {
    if (pending.options.wait_for_ready) return false;
    failed->push_back(std::move(pending));
    return true;
  });
}

// ------------------------------------------------------------ outside mu_ --

void Cluster::Dispatch(
    std::vector<std::pair<Pending, std::shared_ptr<Subchannel>>>&& ready,
    std::vector<Pending>&& failed, const Status& why) {
  for (auto& [pending, impl] : ready) {
    impl->Start(pending.service, pending.method, pending.method_id,
                std::move(pending.request), pending.options,
                std::move(pending.done));
  }
  for (auto& pending : failed) {
    RunOrInvoke(*runner_, pending.done, why, Payload());
  }
}

// ------------------------------------------------------------------- stats --

ChannelState Cluster::state() const {
  std::lock_guard lock(mu_);
  if (!ready_.empty()) return ChannelState::kReady;
  if (!active_) return ChannelState::kIdle;
  if (resolved_ && AllFailed()) return ChannelState::kTransientFailure;
  return ChannelState::kConnecting;
}

ChannelStats Cluster::stats() const {
  std::lock_guard lock(mu_);
  ChannelStats out;
  out.outstanding_calls = pending_.size();
  for (const auto& sub : subchannels_) out.Add(sub->impl->stats());
  return out;
}

std::vector<EndpointStats> Cluster::endpoints() const {
  std::lock_guard lock(mu_);
  std::vector<EndpointStats> out;
  for (const auto& sub : subchannels_) {
    const Subchannel::Outcomes outcomes = sub->impl->outcomes();
    out.push_back({sub->uri, sub->ready, sub->ejected, sub->healthy,
                   sub->ejections, sub->impl->outstanding(), outcomes.completed,
                   outcomes.failed});
  }
  return out;
}

}  // namespace rdmarpc::rpc
