// Executor: where user code runs when it must not run on an I/O thread.
//
// By default a handler runs on its connection's event-loop thread: the
// fastest way, and fine for a handler that answers at once or hands its work
// elsewhere. A handler that blocks (on a disk, a lock, another call's
// future) holds up every other connection on that loop meanwhile. Given an
// Executor, the server hands each handler to it instead, and the loop goes
// back to its connections at once.
//
//   rdmarpc::ServerOptions options;
//   options.handler_threads = 8;             // A pool the server owns, or
//   options.handler_executor = [&](rdmarpc::UniqueFunction<void()> task) {
//     my_pool.Submit(std::move(task));       // any executor of your own.
//   };
//
// An Executor runs each task it is given exactly once, on any thread, later
// or at once; it must not drop one, and it must outlive what hands it tasks.
#ifndef RDMARPC_EXECUTOR_H_
#define RDMARPC_EXECUTOR_H_

#include <functional>
#include <memory>

#include "rdmarpc/unique_function.h"

namespace rdmarpc {

using Executor = std::function<void(UniqueFunction<void()> task)>;

// A fixed pool of threads that runs the tasks it is given, in the order
// given when it has one thread. Its destructor runs the tasks already given,
// then joins the threads; it must not run on one of them.
class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Hands tasks to this pool; valid while the pool lives.
  Executor executor();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Deprecated: the name this had before it moved to rdmarpc::; it goes in
// the next release.
namespace rpc {
using rdmarpc::Executor;
using rdmarpc::ThreadPool;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_EXECUTOR_H_
