// EventLoop: one io_context run by one thread it owns.
#ifndef RDMARPC_RPC_COMMON_EVENT_LOOP_H_
#define RDMARPC_RPC_COMMON_EVENT_LOOP_H_

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <future>
#include <optional>
#include <thread>

namespace rdmarpc::rpc {

class EventLoop {
 public:
  EventLoop();
  ~EventLoop() { Stop(); }
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  boost::asio::io_context& context() { return context_; }
  bool InLoopThread() const {
    return std::this_thread::get_id() == thread_.get_id();
  }
  // Stops the loop and joins its thread; handlers not yet run are destroyed
  // with the loop. Must not be called from the loop's own thread.
  void Stop();
  // After Stop: runs, on the calling thread, every handler that is ready
  // (posted completions), so none is silently destroyed.
  void RunPending();
  // Lets the loop run until it has no work left (every close handler has
  // run), for at most `timeout`; then stops it.
  void Drain(std::chrono::milliseconds timeout);

 private:
  void RunUntilOutOfWork();

  boost::asio::io_context context_{1};
  std::optional<
      boost::asio::executor_work_guard<boost::asio::io_context::executor_type>>
      work_;
  std::thread thread_;
  std::future<void> finished_;  // Ready when the thread's run() returned.
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_COMMON_EVENT_LOOP_H_
