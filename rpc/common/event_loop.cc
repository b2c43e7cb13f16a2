#include "rpc/common/event_loop.h"

#include <exception>

#include "base/log.h"

namespace rdmarpc::rpc {

EventLoop::EventLoop() : work_(context_.get_executor()) {
  std::promise<void> finished;
  finished_ = finished.get_future();
  thread_ = std::thread([this, finished = std::move(finished)]() mutable {
    RunUntilOutOfWork();
    finished.set_value();
  });
}

void EventLoop::RunUntilOutOfWork() {
  for (;;) {
    try {
      context_.run();
      return;
    } catch (const std::exception& e) {
      // A throwing handler must not take the process down; keep serving.
      Log().error("event loop: handler threw: {}", e.what());
    }
  }
}

void EventLoop::RunPending() {
  context_.restart();
  try {
    context_.poll();
  } catch (const std::exception& e) {
    Log().error("event loop: handler threw: {}", e.what());
  }
}

void EventLoop::Drain(std::chrono::milliseconds timeout) {
  if (!thread_.joinable()) return;
  work_.reset();
  if (finished_.wait_for(timeout) != std::future_status::ready) {
    Log().warn("event loop still busy after {} ms; stopping it",
               timeout.count());
  }
  Stop();
}

void EventLoop::Stop() {
  if (!thread_.joinable()) return;
  work_.reset();
  context_.stop();
  thread_.join();
}

}  // namespace rdmarpc::rpc
