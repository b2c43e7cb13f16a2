#include "transport/rdma/cm_channel.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "transport/rdma/device_events.h"
#include "transport/rdma/loop_state.h"
#include "transport/rdma/verbs.h"

namespace rdmarpc::transport::rdma {

namespace asio = boost::asio;

namespace {

std::atomic<uint64_t> parked_ids{0};

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

CmChannel::CmChannel(asio::io_context& context)
    : context_(context), fd_(context) {}

CmChannel::~CmChannel() {
  // The descriptor belongs to rdma-core, not to Asio.
  if (fd_.is_open()) fd_.release();
  // The loop ends with ids still parked: they go now, port down or not.
  port_watches_.clear();
  parked_ids.fetch_sub(parked_.size(), std::memory_order_relaxed);
  parked_.clear();
}

Status CmChannel::Open() {
  events_.reset(rdma_create_event_channel());
  if (!events_) return ErrnoStatus("rdma_create_event_channel", errno);
  if (Status s = SetNonBlocking(events_->fd); !s.ok()) return s;
  fd_.assign(events_->fd);
  Watch();
  return Status();
}

void CmChannel::Register(rdma_cm_id* id, std::weak_ptr<CmEventHandler> handler,
                         uint64_t owner) {
  ids_[id] = {std::move(handler), owner};
}

void CmChannel::Forget(rdma_cm_id* id, uint64_t owner) {
  if (auto it = ids_.find(id); it != ids_.end() && it->second.owner == owner) {
    ids_.erase(it);
  }
}

bool CmChannel::PortIsDown(const rdma_cm_id* id) {
  // A port that cannot be queried is not taken for down.
  const std::optional<ibv_port_state> state =
      PortState(id->verbs, id->port_num);
  return state && *state != IBV_PORT_ACTIVE;
}

uint64_t CmChannel::ParkedIds() {
  return parked_ids.load(std::memory_order_relaxed);
}

void CmChannel::Park(CmId id) {
  ibv_context* device = id->verbs;
  if (!port_watches_.contains(device)) {
    // The watch's handler runs on the device events' thread: it only posts.
    port_watches_.emplace(
        device,
        DeviceEventSubscription(
            device, [weak = weak_from_this(), device,
                     executor = fd_.get_executor()](const DeviceEvent& event) {
              if (event.type != IBV_EVENT_PORT_ACTIVE) return;
              asio::post(executor, [weak, device] {
                if (auto self = weak.lock()) {
                  self->DestroyParkedOnPortsUp(device);
                }
              });
            }));
  }
  if (parked_.empty()) LoopState::Of(context_).Hold(shared_from_this());
  parked_.emplace(id.get(), std::move(id));
  parked_ids.fetch_add(1, std::memory_order_relaxed);
  // The port may have come back before the watch began.
  DestroyParkedOnPortsUp(device);
}

void CmChannel::DestroyParkedOnPortsUp(ibv_context* device) {
  std::vector<rdma_cm_id*> up;
  for (const auto& [id, owned] : parked_) {
    if (id->verbs == device && !PortIsDown(id)) up.push_back(id);
  }
  for (rdma_cm_id* id : up) Unpark(id);
}

void CmChannel::Unpark(rdma_cm_id* id) {
  auto it = parked_.find(id);
  if (it == parked_.end()) return;
  CmId owned = std::move(it->second);
  parked_.erase(it);
  parked_ids.fetch_sub(1, std::memory_order_relaxed);
  ibv_context* device = owned->verbs;
  if (std::none_of(parked_.begin(), parked_.end(), [device](const auto& p) {
        return p.first->verbs == device;
      })) {
    port_watches_.erase(device);  // Before the id that keeps the device.
  }
  owned.reset();
  // This channel's own hold, maybe its last reference: the caller holds
  // another while it runs.
  if (parked_.empty()) LoopState::Of(context_).Release(this);
}

void CmChannel::Watch() {
  fd_.async_wait(asio::posix::stream_descriptor::wait_read,
                 [weak = weak_from_this()](const boost::system::error_code& e) {
                   auto self = weak.lock();
                   if (e || !self) return;
                   rdma_cm_event* event = nullptr;
                   while (rdma_get_cm_event(self->events_.get(), &event) == 0) {
                     if (self->parked_.contains(event->id)) {
                       rdma_cm_id* id = event->id;
                       const bool removed =
                           event->event == RDMA_CM_EVENT_DEVICE_REMOVAL;
                       rdma_ack_cm_event(event);
                       if (removed) {
                         DeviceHold::MarkRemoved(id->verbs);
                         self->Unpark(id);
                       }
                       continue;
                     }
                     auto it = self->ids_.find(event->id);
                     std::shared_ptr<CmEventHandler> handler;
                     if (it != self->ids_.end()) {
                       handler = it->second.handler.lock();
                     }
                     if (handler) {
                       handler->OnCmEvent(event);  // Acknowledges it.
                     } else {
                       rdma_ack_cm_event(event);
                     }
                   }
                   self->Watch();
                 });
}

}  // namespace rdmarpc::transport::rdma
