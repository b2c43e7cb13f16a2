#include "rpc/event_loop.h"

#include <exception>

#include "base/log.h"

namespace rdmarpc::rpc {

EventLoop::EventLoop() : work_(context_.get_executor()) {
  thread_ = std::thread([this] {
    for (;;) {
      try {
        context_.run();
        return;
      } catch (const std::exception& e) {
        // A throwing handler must not take the process down; keep serving.
        Log().error("event loop: handler threw: {}", e.what());
      }
    }
  });
}

void EventLoop::Stop() {
  if (!thread_.joinable()) return;
  work_.reset();
  context_.stop();
  thread_.join();
}

}  // namespace rdmarpc::rpc
