// Registration (naming/registration.h): grant a lease, put the key on it,
// renew every ttl/3; on any failure start over from the step that failed
// after a pause of ttl/3.
#include "naming/registration.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <future>
#include <mutex>

#include "base/log.h"
#include "naming/resolver.h"

namespace rdmarpc::naming {

namespace asio = boost::asio;

class Registration::State : public std::enable_shared_from_this<State> {
 public:
  State(std::shared_ptr<EtcdClient> etcd, std::string key, std::string uri,
        const asio::any_io_executor& executor, RegistrationOptions options)
      : etcd_(std::move(etcd)),
        key_(std::move(key)),
        uri_(std::move(uri)),
        options_(std::move(options)),
        period_(std::max<std::chrono::milliseconds>(
            std::chrono::milliseconds(200),
            std::chrono::duration_cast<std::chrono::milliseconds>(options.ttl) /
                3)),
        executor_(executor),
        timer_(executor) {}

  void Begin() {
    asio::post(executor_, [self = shared_from_this()] { self->Grant(); });
  }

  // Stops renewing; `done` gets the revocation's outcome.
  void End(UniqueFunction<void(Status)> done) {
    asio::post(executor_, [self = shared_from_this(),
                           done = std::move(done)]() mutable {
      self->timer_.cancel();
      int64_t lease;
      {
        std::lock_guard lock(self->mu_);
        if (self->stopped_) return done(Status());
        self->stopped_ = true;
        self->registered_ = false;
        lease = self->lease_;
      }
      if (lease == 0) return done(Status());
      self->etcd_->RevokeLease(
          lease,
          [self, done = std::move(done)](
              const StatusOr<etcd::LeaseRevokeResponse>& revoked) mutable {
            if (revoked.ok()) {
              Log().info("etcd: deregistered {}", self->key_);
              return done(Status());
            }
            done(revoked.status());
          });
    });
  }

  bool registered() const {
    std::lock_guard lock(mu_);
    return registered_;
  }
  RegistrationStats stats() const {
    std::lock_guard lock(mu_);
    return stats_;
  }
  const std::string& key() const { return key_; }

 private:
  bool Stopped() const {
    std::lock_guard lock(mu_);
    return stopped_;
  }

  void Grant() {
    if (Stopped()) return;
    etcd_->GrantLease(
        std::max<int64_t>(1, options_.ttl.count()),
        [self = shared_from_this()](StatusOr<etcd::LeaseGrantResponse> lease) {
          if (self->Stopped()) {
            // Granted as the server stopped: give it back at once.
            if (lease.ok()) self->etcd_->RevokeLease(lease->id(), [](auto) {});
            return;
          }
          if (!lease.ok()) return self->Retry(lease.status(), "grant a lease");
          {
            std::lock_guard lock(self->mu_);
            self->lease_ = lease->id();
          }
          self->PutKey();
        });
  }

  void PutKey() {
    int64_t lease;
    {
      std::lock_guard lock(mu_);
      lease = lease_;
    }
    etcd_->Put(
        key_, uri_, lease,
        [self = shared_from_this()](const StatusOr<etcd::PutResponse>& put) {
          if (self->Stopped()) return;
          if (!put.ok()) return self->Retry(put.status(), "put the key");
          {
            std::lock_guard lock(self->mu_);
            self->registered_ = true;
            ++self->stats_.registrations;
          }
          Log().info("etcd: registered {}", self->key_);
          self->Wait([self] { self->Renew(); });
        });
  }

  void Renew() {
    int64_t lease;
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      lease = lease_;
    }
    etcd_->KeepAlive(lease, [self = shared_from_this()](
                                StatusOr<etcd::LeaseKeepAliveResponse> kept) {
      if (self->Stopped()) return;
      if (!kept.ok()) {
        // etcd unreachable: the lease may live on; renew it again soon.
        self->Failed(kept.status(), "renew the lease");
        return self->Wait([self] { self->Renew(); });
      }
      if (kept->ttl() <= 0) {
        // Expired while etcd was out of reach: the key is gone with it.
        {
          std::lock_guard lock(self->mu_);
          self->registered_ = false;
          self->lease_ = 0;
        }
        Log().warn("etcd: the lease of {} expired; registering again",
                   self->key_);
        return self->Grant();
      }
      {
        std::lock_guard lock(self->mu_);
        ++self->stats_.renewals;
      }
      self->Wait([self] { self->Renew(); });
    });
  }

  void Failed(const Status& error, const char* what) {
    std::lock_guard lock(mu_);
    ++stats_.failures;
    Log().warn("etcd: could not {} for {}: {}", what, key_, error.message());
  }

  void Retry(const Status& error, const char* what) {
    Failed(error, what);
    auto self = shared_from_this();
    Wait([self] { self->Grant(); });
  }

  template <typename F>
  void Wait(F next) {
    timer_.expires_after(period_);
    timer_.async_wait(
        [next = std::move(next)](const boost::system::error_code& error) {
          if (!error) next();
        });
  }

  const std::shared_ptr<EtcdClient> etcd_;
  const std::string key_;
  const std::string uri_;
  const RegistrationOptions options_;
  const std::chrono::milliseconds period_;
  asio::any_io_executor executor_;
  asio::steady_timer timer_;  // The executor's thread only.

  mutable std::mutex mu_;
  int64_t lease_ = 0;
  bool registered_ = false;
  bool stopped_ = false;
  RegistrationStats stats_;
};

Registration::Registration(std::shared_ptr<State> state)
    : state_(std::move(state)) {}

StatusOr<std::unique_ptr<Registration>> Registration::Start(
    const asio::any_io_executor& executor, std::string_view target,
    std::string uri, RegistrationOptions options) {
  StatusOr<EtcdTarget> parsed = ParseEtcdTarget(target);
  if (!parsed.ok()) return parsed.status();
  if (uri.find("://") == std::string::npos) {
    return Status(
        StatusCode::kInvalidArgument,
        "a server registers its URI (scheme://host:port), not \"" + uri + "\"");
  }
  StatusOr<std::shared_ptr<EtcdClient>> etcd =
      EtcdClient::Create(executor, parsed->endpoints, options.etcd);
  if (!etcd.ok()) return etcd.status();
  auto state = std::make_shared<State>(
      std::move(*etcd), RegistrationKey(parsed->prefix, uri), std::move(uri),
      executor, std::move(options));
  state->Begin();
  return std::unique_ptr<Registration>(new Registration(std::move(state)));
}

Registration::~Registration() {
  state_->End([](const Status&) {});
}

Status Registration::Stop() {
  std::promise<Status> revoked;
  auto answer = revoked.get_future();
  state_->End([&revoked](const Status& status) { revoked.set_value(status); });
  return answer.get();
}

bool Registration::registered() const { return state_->registered(); }
RegistrationStats Registration::stats() const { return state_->stats(); }
const std::string& Registration::key() const { return state_->key(); }

}  // namespace rdmarpc::naming
