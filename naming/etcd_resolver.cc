// etcd:// (naming/resolver.h): lists the prefix, then watches it from the
// revision after the list's; a lost watch resumes from the revision after
// the last event seen, and one whose revision etcd has compacted away
// lists again. The set known last stands while etcd cannot be reached.
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <map>

#include "base/log.h"
#include "naming/resolver_internal.h"

namespace rdmarpc::naming {

namespace asio = boost::asio;

namespace {

class EtcdWatcher : public std::enable_shared_from_this<EtcdWatcher> {
 public:
  EtcdWatcher(std::shared_ptr<EtcdClient> etcd, std::string prefix,
              const asio::any_io_executor& executor,
              const ResolverOptions& options)
      : etcd_(std::move(etcd)),
        prefix_(std::move(prefix) + "/"),
        executor_(executor),
        retry_after_(options.etcd_retry),
        retry_(executor) {}

  void Start(Resolver::Update update) {
    asio::post(executor_, [self = shared_from_this(),
                           update = std::move(update)]() mutable {
      self->update_ = std::move(update);
      self->List();
    });
  }

  void Stop() {
    if (stopped_.exchange(true)) return;  // Once: the loop may be gone now.
    asio::post(executor_, [self = shared_from_this()] {
      self->retry_.cancel();
      self->watch_.reset();
      self->update_ = nullptr;
    });
  }

 private:
  void List() {
    if (stopped_.load()) return;
    etcd_->Range(prefix_, [self = shared_from_this()](
                              StatusOr<etcd::RangeResponse> range) {
      if (self->stopped_.load()) return;
      if (!range.ok()) {
        self->Failed(range.status(), "list");
        return self->RetryLater([self] { self->List(); });
      }
      self->keys_.clear();
      for (const auto& kv : range->kvs()) self->keys_[kv.key()] = kv.value();
      self->next_revision_ = range->header().revision() + 1;
      self->Publish();
      self->Watch();
    });
  }

  void Watch() {
    if (stopped_.load()) return;
    std::weak_ptr<EtcdWatcher> weak = shared_from_this();
    watch_ = etcd_->WatchPrefix(prefix_, next_revision_,
                                [weak](StatusOr<etcd::WatchResponse> response) {
                                  if (auto self = weak.lock())
                                    self->OnWatch(std::move(response));
                                });
  }

  void OnWatch(StatusOr<etcd::WatchResponse> response) {
    if (stopped_.load()) return;
    if (!response.ok()) {
      Failed(response.status(), "watch");
      auto self = shared_from_this();
      return RetryLater([self] { self->Watch(); });
    }
    if (response->canceled()) {
      if (response->compact_revision() > 0) {
        Log().info(
            "etcd {}: revision {} compacted away (now {}); listing again",
            prefix_, next_revision_, response->compact_revision());
        return List();
      }
      Failed(Status(StatusCode::kUnavailable,
                    "etcd canceled the watch: " + response->cancel_reason()),
             "watch");
      auto self = shared_from_this();
      return RetryLater([self] { self->List(); });
    }
    if (response->events().empty()) return;
    for (const auto& event : response->events()) {
      if (event.type() == etcd::Event::DELETE) {
        keys_.erase(event.kv().key());
      } else {
        keys_[event.kv().key()] = event.kv().value();
      }
      next_revision_ = std::max(next_revision_, event.kv().mod_revision() + 1);
    }
    Publish();
  }

  void Publish() {
    std::vector<std::string> endpoints;
    for (const auto& [key, value] : keys_) {
      StatusOr<std::string> uri = EndpointUri(value, "");
      if (!uri.ok() || value.find("://") == std::string::npos) {
        Log().warn("etcd {}: ignoring {}: its value \"{}\" is not a URI",
                   prefix_, key, value);
        continue;
      }
      endpoints.push_back(std::move(*uri));
    }
    Normalize(endpoints);
    if (known_ && endpoints == last_) return;
    known_ = true;
    last_ = endpoints;
    if (update_) update_(std::move(endpoints));
  }

  void Failed(const Status& error, const char* what) {
    Log().warn("etcd {}: {} failed: {}; again in {} ms", prefix_, what,
               error.message(), retry_after_.count());
    if (!known_ && update_) update_(error);
  }

  template <typename F>
  void RetryLater(F retry) {
    retry_.expires_after(retry_after_);
    retry_.async_wait(
        [retry = std::move(retry)](const boost::system::error_code& error) {
          if (!error) retry();
        });
  }

  const std::shared_ptr<EtcdClient> etcd_;
  const std::string prefix_;
  asio::any_io_executor executor_;
  const std::chrono::milliseconds retry_after_;
  std::atomic<bool> stopped_{false};
  // The executor's thread only.
  Resolver::Update update_;
  asio::steady_timer retry_;
  std::unique_ptr<EtcdClient::Watch> watch_;
  std::map<std::string, std::string> keys_;
  int64_t next_revision_ = 0;
  bool known_ = false;
  std::vector<std::string> last_;
};

class EtcdResolver final : public Resolver {
 public:
  explicit EtcdResolver(std::shared_ptr<EtcdWatcher> watcher)
      : watcher_(std::move(watcher)) {}
  ~EtcdResolver() override { watcher_->Stop(); }
  void Start(Update update) override { watcher_->Start(std::move(update)); }
  void Stop() override { watcher_->Stop(); }

 private:
  std::shared_ptr<EtcdWatcher> watcher_;
};

}  // namespace

std::unique_ptr<Resolver> MakeEtcdResolver(
    std::shared_ptr<EtcdClient> etcd, std::string prefix,
    const asio::any_io_executor& executor, const ResolverOptions& options) {
  return std::make_unique<EtcdResolver>(std::make_shared<EtcdWatcher>(
      std::move(etcd), std::move(prefix), executor, options));
}

}  // namespace rdmarpc::naming
