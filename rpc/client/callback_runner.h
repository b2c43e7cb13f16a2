// CallbackRunner: where a Channel's callbacks run when ChannelOptions gives
// it a callback executor, and the guards every user callback runs inside.
// Internal to the rpc layer.
#ifndef RDMARPC_RPC_CLIENT_CALLBACK_RUNNER_H_
#define RDMARPC_RPC_CLIENT_CALLBACK_RUNNER_H_

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

#include "base/log.h"
#include "rdmarpc/channel_options.h"
#include "rdmarpc/executor.h"
#include "rdmarpc/status.h"
#include "rdmarpc/unique_function.h"
#include "rpc/client/call_table.h"

namespace rdmarpc::rpc {

// Runs a user callback; an exception it throws is logged, not propagated
// into the transport (where it would stall the connection) or a pool's
// thread (where it would end the process).
void InvokeCallback(ResponseCallback& done, const Status& status,
                    Payload&& response);
template <typename F>
void InvokeGuarded(F& callback) {
  try {
    callback();
  } catch (const std::exception& e) {
    Log().error("a stream callback threw: {}", e.what());
  }
}

// Hands a channel's callbacks to its callback executor
// (ChannelOptions::callback_threads or callback_executor), and counts those
// handed over and not yet run, so the channel can wait for them when it goes.
class CallbackRunner {
 public:
  explicit CallbackRunner(const ChannelOptions& options) {
    if (options.callback_executor) {
      executor_ = options.callback_executor;
    } else if (options.callback_threads > 0) {
      pool_ = std::make_unique<ThreadPool>(options.callback_threads);
      executor_ = pool_->executor();
    }
  }

  // False: callbacks run on the event loop.
  bool enabled() const { return static_cast<bool>(executor_); }

  // Hands the callback to the executor; after Close, runs it here.
  void Run(ResponseCallback done, Status status, Payload response) {
    Post([done = std::move(done), status = std::move(status),
          response = std::move(response)]() mutable {
      InvokeCallback(done, status, std::move(response));
    });
  }
  // Hands any of the user's callbacks (wrapped in `task`) to the executor.
  void Post(UniqueFunction<void()> task) {
    bool closed;
    {
      std::lock_guard lock(mu_);
      closed = closed_;
      if (!closed) ++running_;
    }
    if (closed) {
      // Nothing completes a call once the channel is gone; should something,
      // it runs here rather than on a pool that is gone.
      task();
      return;
    }
    executor_([this, task = std::move(task)]() mutable {
      // Counted out however the task ends.
      struct Done {
        CallbackRunner* runner;
        ~Done() {
          current_ = nullptr;
          std::lock_guard lock(runner->mu_);
          if (--runner->running_ == 0) runner->idle_.notify_all();
        }
      };
      current_ = this;
      {
        Done done{this};
        task();
        task = nullptr;  // The user's closure goes before the channel may.
      }
    });
  }

  // Whether this thread is inside one of this runner's callbacks.
  bool InCallback() const { return current_ == this; }

  // Waits until every callback handed over has run, then stops the pool (if
  // the channel owns one). Must not run inside one of the callbacks.
  void Close() {
    std::unique_lock lock(mu_);
    closed_ = true;
    idle_.wait(lock, [this] { return running_ == 0; });
    lock.unlock();
    pool_.reset();  // Joins its threads.
  }

 private:
  static thread_local const CallbackRunner* current_;
  Executor executor_;
  std::unique_ptr<ThreadPool> pool_;
  std::mutex mu_;
  std::condition_variable idle_;
  size_t running_ = 0;
  bool closed_ = false;
};

// Runs `done` on `runner`'s executor if it has one, else here, now.
inline void RunOrInvoke(CallbackRunner& runner, ResponseCallback& done,
                        const Status& status, Payload&& response) {
  if (runner.enabled()) {
    return runner.Run(std::move(done), status, std::move(response));
  }
  InvokeCallback(done, status, std::move(response));
}

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_CLIENT_CALLBACK_RUNNER_H_
