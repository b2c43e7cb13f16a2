// A device's asynchronous events (ibv_get_async_event): a port going down or
// coming back, a QP or CQ in error, a device's fatal error.
//
// rdma_cm reports only what concerns connection setup and device removal;
// the rest reaches a process on the verbs context's async_fd, shared by every
// user of the device in the process. One thread per process (started with the
// first subscription) reads that descriptor for every device rdmarpc uses,
// acknowledges each event, and hands it to each subscriber of that device.
//
// A handler runs on that thread with the subscriptions' lock held: it must
// not block or subscribe, only look at the event and post work to its own
// event loop.
#ifndef RDMARPC_TRANSPORT_RDMA_DEVICE_EVENTS_H_
#define RDMARPC_TRANSPORT_RDMA_DEVICE_EVENTS_H_

#include <infiniband/verbs.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

namespace rdmarpc::transport::rdma {

struct DeviceEvent {
  ibv_event_type type = IBV_EVENT_DEVICE_FATAL;
  ibv_context* context = nullptr;
  ibv_qp* qp = nullptr;  // For QP events.
  ibv_cq* cq = nullptr;  // For IBV_EVENT_CQ_ERR.
  uint8_t port = 0;      // For port events.

  bool IsPortEvent() const;
  // A QP's, CQ's or the whole device's failure: its connections are dead.
  bool IsFatalFor(const ibv_qp* my_qp, const ibv_cq* my_cq) const;
  // "port 1 of rxe0 went down (IBV_EVENT_PORT_ERR)", for logs and statuses.
  std::string Describe() const;
};

class DeviceEventSubscription {
 public:
  using Handler = std::function<void(const DeviceEvent&)>;

  DeviceEventSubscription() = default;
  // Every event of `context` from now on goes to `handler`, until Reset.
  DeviceEventSubscription(ibv_context* context, Handler handler);
  ~DeviceEventSubscription() { Reset(); }
  DeviceEventSubscription(DeviceEventSubscription&& other) noexcept
      : id_(std::exchange(other.id_, 0)) {}
  DeviceEventSubscription& operator=(DeviceEventSubscription&& other) noexcept;

  // Once it returns, the handler is not running and never runs again. Call
  // it before the context can go (before the rdma_cm id that keeps it).
  void Reset();

 private:
  uint64_t id_ = 0;
};

// "port 1 of rxe0 is down" when that port is not ACTIVE; empty when it is.
std::string PortDownReason(ibv_context* context, uint8_t port);

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_DEVICE_EVENTS_H_
