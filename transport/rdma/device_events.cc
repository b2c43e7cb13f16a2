#include "transport/rdma/device_events.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "base/log.h"
#include "transport/rdma/verbs.h"

namespace rdmarpc::transport::rdma {
namespace {

// The process's one reader of async events. Never destroyed: its thread may
// outlive every static destructor.
class Watcher {
 public:
  static Watcher& Get() {
    static Watcher* watcher = new Watcher;
    return *watcher;
  }

  uint64_t Add(ibv_context* context, DeviceEventSubscription::Handler handler) {
    std::lock_guard lock(mu_);
    if (!started_) {
      started_ = true;
      std::thread([this] { Run(); }).detach();
    }
    bool known = false;
    for (const Subscriber& s : subscribers_) known |= s.context == context;
    if (!known) {
      broken_.erase(context);
      Status status = SetNonBlocking(context->async_fd);
      if (!status.ok()) {
        Log().warn("{}: async events not watched: {}", DeviceName(context),
                   status.message());
      }
    }
    const uint64_t id = next_id_++;
    subscribers_.push_back({id, context, std::move(handler)});
    Wake();
    return id;
  }

  void Remove(uint64_t id) {
    std::lock_guard lock(mu_);
    std::erase_if(subscribers_,
                  [id](const Subscriber& s) { return s.id == id; });
    Wake();
  }

 private:
  struct Subscriber {
    uint64_t id;
    ibv_context* context;
    DeviceEventSubscription::Handler handler;
  };

  Watcher() : wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

  void Wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
  }

  bool Subscribed(ibv_context* context) const {
    for (const Subscriber& s : subscribers_) {
      if (s.context == context) return true;
    }
    return false;
  }

  void Run() {
    std::vector<pollfd> fds;
    std::vector<ibv_context*> contexts;
    for (;;) {
      fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
      contexts.assign(1, nullptr);
      {
        std::lock_guard lock(mu_);
        for (const Subscriber& s : subscribers_) {
          if (broken_.contains(s.context) ||
              std::find(contexts.begin(), contexts.end(), s.context) !=
                  contexts.end()) {
            continue;
          }
          fds.push_back(pollfd{s.context->async_fd, POLLIN, 0});
          contexts.push_back(s.context);
        }
      }
      if (poll(fds.data(), fds.size(), -1) < 0) {
        if (errno != EINTR) {
          Log().error("async events: poll: {}", std::strerror(errno));
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        continue;
      }
      if (fds[0].revents != 0) {
        uint64_t count;
        [[maybe_unused]] ssize_t n = read(wake_fd_, &count, sizeof(count));
      }
      std::lock_guard lock(mu_);
      for (size_t i = 1; i < fds.size(); ++i) {
        ibv_context* context = contexts[i];
        // Unsubscribed meanwhile: the context may be gone.
        if (fds[i].revents == 0 || !Subscribed(context)) continue;
        ReadEvents(context);
      }
    }
  }

  // Under mu_: every event waiting on `context`, to its subscribers.
  void ReadEvents(ibv_context* context) {
    for (;;) {
      ibv_async_event raw;
      errno = 0;
      if (ibv_get_async_event(context, &raw) != 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          // A released device's descriptor reads as end of file: never
          // poll it again (it would always be ready).
          Log().debug("{}: async events no longer readable: {}",
                      DeviceName(context),
                      errno != 0 ? std::strerror(errno) : "end of file");
          broken_.insert(context);
        }
        return;
      }
      DeviceEvent event;
      event.type = raw.event_type;
      event.context = context;
      if (event.IsPortEvent()) {
        event.port = static_cast<uint8_t>(raw.element.port_num);
      } else if (raw.event_type == IBV_EVENT_CQ_ERR) {
        event.cq = raw.element.cq;
      } else if (raw.event_type != IBV_EVENT_DEVICE_FATAL) {
        event.qp = raw.element.qp;
      }
      ibv_ack_async_event(&raw);
      // Fatal for its own QP or CQ: any QP, CQ or device error.
      if (event.type == IBV_EVENT_PORT_ERR ||
          event.IsFatalFor(event.qp, event.cq)) {
        Log().warn("{}", event.Describe());
      } else {
        Log().info("{}", event.Describe());
      }
      for (const Subscriber& s : subscribers_) {
        if (s.context == context) s.handler(event);
      }
    }
  }

  std::mutex mu_;  // Held while handlers run.
  std::vector<Subscriber> subscribers_;
  std::unordered_set<ibv_context*> broken_;
  uint64_t next_id_ = 1;
  bool started_ = false;
  const int wake_fd_;
};

}  // namespace

bool DeviceEvent::IsPortEvent() const {
  switch (type) {
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
      return true;
    default:
      return false;
  }
}

bool DeviceEvent::IsFatalFor(const ibv_qp* my_qp, const ibv_cq* my_cq) const {
  switch (type) {
    case IBV_EVENT_DEVICE_FATAL:
      return true;
    case IBV_EVENT_CQ_ERR:
      return cq != nullptr && cq == my_cq;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR:
      return qp != nullptr && qp == my_qp;
    default:
      return false;
  }
}

std::string DeviceEvent::Describe() const {
  const std::string device = DeviceName(context);
  const std::string code = std::string(" (") + ibv_event_type_str(type) + ")";
  const std::string port_name =
      "port " + std::to_string(port) + " of " + device;
  switch (type) {
    case IBV_EVENT_PORT_ERR:
      return port_name + " went down" + code;
    case IBV_EVENT_PORT_ACTIVE:
      return port_name + " is active" + code;
    case IBV_EVENT_DEVICE_FATAL:
      return "RDMA device " + device + " failed" + code;
    case IBV_EVENT_CQ_ERR:
      return "RDMA device " + device + " reported a completion queue error" +
             code;
    default:
      break;
  }
  if (IsPortEvent()) return port_name + code;
  return "RDMA device " + device + " reported a queue pair error" + code;
}

DeviceEventSubscription::DeviceEventSubscription(ibv_context* context,
                                                 Handler handler) {
  if (context != nullptr) id_ = Watcher::Get().Add(context, std::move(handler));
}

DeviceEventSubscription& DeviceEventSubscription::operator=(
    DeviceEventSubscription&& other) noexcept {
  if (this != &other) {
    Reset();
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

void DeviceEventSubscription::Reset() {
  if (const uint64_t id = std::exchange(id_, 0); id != 0) {
    Watcher::Get().Remove(id);
  }
}

std::string PortDownReason(ibv_context* context, uint8_t port) {
  if (context == nullptr || port == 0) return "";
  const std::optional<ibv_port_state> state = PortState(context, port);
  if (!state) {
    const int error = errno;  // Before building the message can change it.
    return "port " + std::to_string(port) + " of " + DeviceName(context) +
           " cannot be queried: " + std::strerror(error);
  }
  if (*state == IBV_PORT_ACTIVE) return "";
  return "port " + std::to_string(port) + " of " + DeviceName(context) +
         (*state == IBV_PORT_DOWN ? std::string(" is down")
                                  : std::string(" is not active (") +
                                        ibv_port_state_str(*state) + ")");
}

}  // namespace rdmarpc::transport::rdma
