#include "transport/rdma/cm_channel.h"

#include <cerrno>
#include <map>
#include <mutex>

#include "transport/rdma/loop_state.h"
#include "transport/rdma/rdma_connection.h"

namespace rdmarpc::transport::rdma {

namespace asio = boost::asio;

namespace {

std::mutex channels_mu;
// Guarded by channels_mu.
// Keyed by LoopState::loop_id(), never by the io_context's address.
std::map<uint64_t, std::weak_ptr<CmChannel>>& Channels() {
  static auto* channels = new std::map<uint64_t, std::weak_ptr<CmChannel>>;
  return *channels;
}

}  // namespace

StatusOr<std::shared_ptr<CmChannel>> CmChannel::For(asio::io_context& context) {
  const uint64_t loop = LoopState::Of(context).loop_id();
  std::shared_ptr<CmChannel> channel;
  Status opened;
  {
    std::lock_guard lock(channels_mu);
    // Entries of channels gone are dropped here, not by their destructors.
    std::erase_if(Channels(),
                  [](const auto& entry) { return entry.second.expired(); });
    if (auto it = Channels().find(loop); it != Channels().end()) {
      channel = it->second.lock();
    }
    if (channel) return channel;
    channel = std::make_shared<CmChannel>(context);
    opened = channel->Open();
    if (opened.ok()) {
      Channels()[loop] = channel;
      return channel;
    }
  }
  channel.reset();  // Outside the lock.
  return opened;
}

CmChannel::CmChannel(asio::io_context& context) : fd_(context) {}

CmChannel::~CmChannel() {
  // The descriptor belongs to rdma-core, not to Asio.
  if (fd_.is_open()) fd_.release();
}

Status CmChannel::Open() {
  events_.reset(rdma_create_event_channel());
  if (!events_) return ErrnoStatus("rdma_create_event_channel", errno);
  if (Status s = SetNonBlocking(events_->fd); !s.ok()) return s;
  fd_.assign(events_->fd);
  Watch();
  return Status();
}

void CmChannel::Register(rdma_cm_id* id,
                         std::weak_ptr<RdmaConnection> connection,
                         uint64_t owner) {
  ids_[id] = {std::move(connection), owner};
}

void CmChannel::Forget(rdma_cm_id* id, uint64_t owner) {
  if (auto it = ids_.find(id); it != ids_.end() && it->second.owner == owner) {
    ids_.erase(it);
  }
}

void CmChannel::Watch() {
  fd_.async_wait(asio::posix::stream_descriptor::wait_read,
                 [weak = weak_from_this()](const boost::system::error_code& e) {
                   auto self = weak.lock();
                   if (e || !self) return;
                   rdma_cm_event* event = nullptr;
                   while (rdma_get_cm_event(self->events_.get(), &event) == 0) {
                     auto it = self->ids_.find(event->id);
                     std::shared_ptr<RdmaConnection> connection;
                     if (it != self->ids_.end()) {
                       connection = it->second.connection.lock();
                     }
                     if (connection) {
                       connection->OnCmEvent(event);  // Acknowledges it.
                     } else {
                       rdma_ack_cm_event(event);
                     }
                   }
                   self->Watch();
                 });
}

}  // namespace rdmarpc::transport::rdma
