// Retrier (rpc/cluster/retry.h).
#include "rpc/cluster/retry.h"

#include <algorithm>
#include <boost/asio/steady_timer.hpp>
#include <random>

#include "rdmarpc/method_ref.h"
#include "rpc/client/callback_runner.h"

namespace rdmarpc::rpc {

namespace asio = boost::asio;

namespace {

Payload Copy(const Payload& payload) {
  return Payload(Buffer::CopyOf(payload.message.span()),
                 payload.attachment.size() == 0
                     ? Buffer()
                     : Buffer::CopyOf(payload.attachment.span()));
}

double Uniform() {
  thread_local std::minstd_rand random(std::random_device{}());
  return std::uniform_real_distribution<double>(0, 1)(random);
}

}  // namespace

// One call and its attempts. Its lock guards everything below it.
class Retrier::Call : public std::enable_shared_from_this<Call> {
 public:
  Call(std::shared_ptr<Retrier> retrier, const RetryPolicy& policy,
       std::string_view service, std::string_view method, uint64_t method_id,
       bool idempotent, Payload request, const CallOptions& options,
       ResponseCallback done)
      : retrier_(std::move(retrier)),
        policy_(policy),
        service_(service),
        method_(method),
        method_id_(method_id),
        idempotent_(idempotent),
        request_(std::move(request)),
        options_(options),
        done_(std::move(done)),
        timer_(retrier_->context_),
        backoff_(policy.initial_backoff) {
    user_sink_ = std::move(options_.response_metadata);
    user_cancel_ = std::move(options_.cancellation);
  }

  uint64_t Begin() {
    if (user_cancel_) {
      user_cancel_->Attach([weak = weak_from_this()] {
        if (auto self = weak.lock()) self->CancelAttempts();
      });
    }
    return Attempt();
  }

  // Ends a call waiting for its next attempt (the channel is going): its
  // callback to `orphans`.
  void Abandon(std::vector<CallTable::Entry>* orphans) {
    std::lock_guard lock(mu_);
    if (finished_ || running_ > 0) return;
    finished_ = true;
    timer_.cancel();
    orphans->emplace_back(0, std::move(done_));
  }

 private:
  uint64_t Attempt() {
    auto cancel = std::make_shared<CallCancellation>();
    auto sink = std::make_shared<ResponseMetadata>();
    CallOptions options = options_;
    options.cancellation = cancel;
    options.response_metadata = sink;
    Payload request;
    {
      std::lock_guard lock(mu_);
      if (finished_) return 0;
      ++started_;
      ++running_;
      attempts_.push_back(cancel);
      // The last attempt may take the request itself.
      request = started_ == policy_.max_attempts ? std::move(request_)
                                                 : Copy(request_);
      if (idempotent_ && policy_.hedging_delay.count() > 0 &&
          started_ < policy_.max_attempts) {
        ArmHedge();
      }
    }
    return retrier_->start_(
        service_, method_, method_id_, std::move(request), options,
        [self = shared_from_this(), sink](const Status& status,
                                          Payload response) mutable {
          self->OnAnswer(status, std::move(response), sink);
        });
  }

  void ArmHedge() {  // Under mu_.
    timer_.expires_after(policy_.hedging_delay);
    timer_.async_wait(
        [weak = weak_from_this()](const boost::system::error_code& error) {
          auto self = weak.lock();
          if (error || !self) return;
          {
            std::lock_guard lock(self->mu_);
            if (self->finished_ || self->running_ == 0 ||
                self->started_ >= self->policy_.max_attempts) {
              return;
            }
          }
          if (!self->retrier_->Withdraw()) return;  // Wait for the one running.
          self->retrier_->Count(&Stats::hedges);
          self->Attempt();
        });
  }

  void OnAnswer(const Status& status, Payload response,
                const std::shared_ptr<ResponseMetadata>& sink) {
    const bool not_run = sink->trailers.Get(kNotRunTrailer).has_value();
    const StatusCode code = status.code();
    const bool retryable =
        !status.ok() &&
        ((idempotent_ && std::find(policy_.retryable_codes.begin(),
                                   policy_.retryable_codes.end(),
                                   code) != policy_.retryable_codes.end()) ||
         (not_run && (code == StatusCode::kUnavailable ||
                      code == StatusCode::kResourceExhausted)));
    std::unique_lock lock(mu_);
    if (finished_) return;
    --running_;
    if (retryable && !cancelled_) {
      if (running_ > 0) return;  // A hedge may still answer.
      const auto now = Clock::now();
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
          backoff_ * (0.5 + 0.5 * Uniform()));
      const bool time_left =
          !options_.deadline || now + wait < *options_.deadline;
      if (started_ < policy_.max_attempts && time_left &&
          !retrier_->ShutDown()) {
        if (retrier_->Withdraw()) {
          retrier_->Count(&Stats::retries);
          backoff_ =
              std::min(policy_.max_backoff,
                       std::chrono::duration_cast<std::chrono::milliseconds>(
                           backoff_ * policy_.backoff_multiplier));
          timer_.expires_after(wait);
          // The wait holds the call: nothing else does until it sends.
          timer_.async_wait([self = shared_from_this()](
                                const boost::system::error_code& error) {
            if (!error) self->Attempt();
          });
          return;
        }
        retrier_->Count(&Stats::throttled);
      }
    }
    // This answer is the call's.
    finished_ = true;
    timer_.cancel();
    std::vector<std::shared_ptr<CallCancellation>> others =
        std::move(attempts_);
    ResponseCallback done = std::move(done_);
    lock.unlock();
    for (auto& other : others) other->Cancel();  // Ended ones: nothing.
    if (user_sink_) *user_sink_ = std::move(*sink);
    retrier_->Forget(shared_from_this());
    InvokeCallback(done, status, std::move(response));
  }

  void CancelAttempts() {
    std::vector<std::shared_ptr<CallCancellation>> attempts;
    {
      std::lock_guard lock(mu_);
      cancelled_ = true;
      attempts = attempts_;
    }
    for (auto& attempt : attempts) attempt->Cancel();
  }

  const std::shared_ptr<Retrier> retrier_;
  const RetryPolicy& policy_;  // The Retrier's.
  const std::string service_;
  const std::string method_;
  const uint64_t method_id_;
  const bool idempotent_;

  std::mutex mu_;
  Payload request_;
  CallOptions options_;  // Without the caller's sink and cancellation.
  std::shared_ptr<ResponseMetadata> user_sink_;
  std::shared_ptr<CallCancellation> user_cancel_;
  ResponseCallback done_;
  asio::steady_timer timer_;
  std::chrono::milliseconds backoff_;
  std::vector<std::shared_ptr<CallCancellation>> attempts_;
  int started_ = 0;
  int running_ = 0;
  bool finished_ = false;
  bool cancelled_ = false;
};

Retrier::Retrier(
    RetryPolicy policy,
    const std::map<std::string, RetryPolicy, std::less<>>& per_method,
    RetryBudget budget, asio::io_context& context, StartFn start)
    : policy_(std::move(policy)),
      budget_(budget),
      context_(context),
      start_(std::move(start)),
      tokens_(budget.max_tokens),
      refilled_(Clock::now()) {
  for (const auto& [name, method_policy] : per_method) {
    const auto slash = name.rfind('/');
    if (slash == std::string::npos) continue;
    by_method_.emplace(MethodId(std::string_view(name).substr(0, slash),
                                std::string_view(name).substr(slash + 1)),
                       method_policy);
  }
}

uint64_t Retrier::Start(const RetryPolicy& policy, std::string_view service,
                        std::string_view method, uint64_t method_id,
                        bool idempotent, Payload request,
                        const CallOptions& options, ResponseCallback done) {
  auto call = std::make_shared<Call>(
      shared_from_this(), policy, service, method, method_id, idempotent,
      std::move(request), options, std::move(done));
  {
    std::lock_guard lock(mu_);
    live_.insert(call);
  }
  Deposit();
  return call->Begin();
}

void Retrier::Shutdown(std::vector<CallTable::Entry>* orphans) {
  std::vector<std::weak_ptr<Call>> live;
  {
    std::lock_guard lock(mu_);
    shut_down_ = true;
    live.assign(live_.begin(), live_.end());
  }
  for (const auto& weak : live) {
    if (auto call = weak.lock()) call->Abandon(orphans);
  }
}

bool Retrier::ShutDown() const {
  std::lock_guard lock(mu_);
  return shut_down_;
}

void Retrier::Count(uint64_t Stats::*counter) {
  std::lock_guard lock(mu_);
  ++(stats_.*counter);
}

Retrier::Stats Retrier::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void Retrier::Deposit() {
  std::lock_guard lock(mu_);
  tokens_ = std::min(budget_.max_tokens, tokens_ + budget_.ratio);
}

bool Retrier::Withdraw() {
  std::lock_guard lock(mu_);
  const auto now = Clock::now();
  const double seconds = std::chrono::duration<double>(now - refilled_).count();
  refilled_ = now;
  tokens_ = std::min(budget_.max_tokens,
                     tokens_ + seconds * budget_.reserve_per_second);
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

void Retrier::Forget(const std::shared_ptr<Call>& call) {
  std::lock_guard lock(mu_);
  live_.erase(call);
}

}  // namespace rdmarpc::rpc
