// Wraps an Asio completion handler so its operation state is allocated from
// the buffer pool (base/buffer_pool.h) rather than the heap: Asio allocates
// each async operation through the handler's associated allocator, and its
// own per-thread recycling keeps a single block, which two operations in
// flight at once (a read and a write) defeat.
#ifndef RDMARPC_BASE_POOLED_HANDLER_H_
#define RDMARPC_BASE_POOLED_HANDLER_H_

#include <utility>

#include "base/buffer_pool.h"

namespace rdmarpc {

template <typename Handler>
class PooledHandler {
 public:
  using allocator_type = PoolAllocator<void>;

  explicit PooledHandler(Handler handler) : handler_(std::move(handler)) {}
  allocator_type get_allocator() const noexcept { return {}; }

  template <typename... Args>
  void operator()(Args&&... args) {
    handler_(std::forward<Args>(args)...);
  }

 private:
  Handler handler_;
};

template <typename Handler>
PooledHandler<Handler> Pooled(Handler handler) {
  return PooledHandler<Handler>(std::move(handler));
}

}  // namespace rdmarpc

#endif  // RDMARPC_BASE_POOLED_HANDLER_H_
