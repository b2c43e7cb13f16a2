// One rdma_cm event channel per event loop, shared by every RDMA connection
// on the loop: a connection costs no file descriptor of its own.
//
// A connection creates its id on the channel (or, accepted, migrates it
// there) and registers it; the channel's descriptor is watched by the loop's
// io_context, and each event is handed to the connection whose id it names
// (and acknowledged there). An event for an id no longer registered is
// acknowledged and dropped. The channel lives while a connection holds it.
#ifndef RDMARPC_TRANSPORT_RDMA_CM_CHANNEL_H_
#define RDMARPC_TRANSPORT_RDMA_CM_CHANNEL_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>

#include "rdmarpc/status.h"
#include "transport/rdma/device_events.h"
#include "transport/rdma/verbs.h"

namespace rdmarpc::transport::rdma {

// What an id's events go to: a connection (rdma_connection.h).
class CmEventHandler {
 public:
  CmEventHandler(const CmEventHandler&) = delete;
  CmEventHandler& operator=(const CmEventHandler&) = delete;

 protected:
  CmEventHandler() = default;
  ~CmEventHandler() = default;  // Owned as its connection.

 private:
  friend class CmChannel;
  // Handles `event`, and acknowledges it (rdma_ack_cm_event).
  virtual void OnCmEvent(rdma_cm_event* event) = 0;
};

class CmChannel : public std::enable_shared_from_this<CmChannel> {
 public:
  // `context`'s channel, opened on first use.
  static StatusOr<std::shared_ptr<CmChannel>> For(
      boost::asio::io_context& context);

  explicit CmChannel(boost::asio::io_context& context);  // Use For.
  ~CmChannel();
  CmChannel(const CmChannel&) = delete;
  CmChannel& operator=(const CmChannel&) = delete;

  rdma_event_channel* get() const { return events_.get(); }

  // Events for `id` go to `handler` (`owner` names it) while it lives,
  // until Forget (on the loop thread).
  void Register(rdma_cm_id* id, std::weak_ptr<CmEventHandler> handler,
                uint64_t owner);
  // Unless `id` has been registered again since, by another owner.
  void Forget(rdma_cm_id* id, uint64_t owner);

  // Whether `id`'s port is down now: destroying a connected id then would
  // send the peer a CM message (DREQ, or REJ) on a port that cannot carry
  // it. On rdma_rxe in Linux 6.1 such a message can be left on the
  // device's QP1 without ever completing, and rdma_destroy_id then waits in
  // the kernel, uninterruptibly, forever ("cm_destroy_id_wait_timeout" in
  // the kernel log): the loop thread, and the process's exit, with it.
  static bool PortIsDown(const rdma_cm_id* id);
  // Keeps `id` (its QP destroyed; no one else's) until its port is up
  // again, its device is removed, or this loop ends, and destroys it then
  // (on the loop thread).
  void Park(CmId id);
  // Ids parked in this process now (tests, metrics).
  static uint64_t ParkedIds();

 private:
  Status Open();
  void Watch();
  // Destroys the ids parked on `device` whose port is up now.
  void DestroyParkedOnPortsUp(ibv_context* device);
  // Destroys one parked id; the last one lets go of this channel.
  void Unpark(rdma_cm_id* id);

  boost::asio::io_context& context_;

  EventChannel events_;
  boost::asio::posix::stream_descriptor fd_;
  struct Registered {
    std::weak_ptr<CmEventHandler> handler;
    uint64_t owner = 0;
  };
  std::unordered_map<rdma_cm_id*, Registered> ids_;
  // Declared after what they need: destroyed first. The watches go before
  // the ids that keep their devices open.
  std::unordered_map<rdma_cm_id*, CmId> parked_;
  std::map<ibv_context*, DeviceEventSubscription> port_watches_;
};

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_CM_CHANNEL_H_
