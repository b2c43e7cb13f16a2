#include "rdmarpc/executor.h"

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

namespace rdmarpc {

class ThreadPool::Impl {
 public:
  explicit Impl(int threads) : pool(threads > 0 ? threads : 1) {}
  // join() before the pool's own destructor, which would stop it and drop
  // the tasks not yet run.
  ~Impl() { pool.join(); }
  boost::asio::thread_pool pool;
};

ThreadPool::ThreadPool(int threads) : impl_(std::make_unique<Impl>(threads)) {}
ThreadPool::~ThreadPool() = default;

Executor ThreadPool::executor() {
  return [pool = &impl_->pool](UniqueFunction<void()> task) {
    boost::asio::post(*pool, std::move(task));
  };
}

}  // namespace rdmarpc
