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
#include <memory>
#include <unordered_map>

#include "base/status_or.h"
#include "transport/rdma/verbs.h"

namespace rdmarpc::transport::rdma {

class RdmaConnection;

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

  // Events for `id` go to `connection` (`owner` names it) while it lives,
  // until Forget (on the loop thread).
  void Register(rdma_cm_id* id, std::weak_ptr<RdmaConnection> connection,
                uint64_t owner);
  // Unless `id` has been registered again since, by another owner.
  void Forget(rdma_cm_id* id, uint64_t owner);

 private:
  Status Open();
  void Watch();

  EventChannel events_;
  boost::asio::posix::stream_descriptor fd_;
  struct Registered {
    std::weak_ptr<RdmaConnection> connection;
    uint64_t owner = 0;
  };
  std::unordered_map<rdma_cm_id*, Registered> ids_;
};

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_CM_CHANNEL_H_
