// dns:// (naming/resolver.h): every address of a name, through c-ares on
// the resolver's executor (c-ares's sockets watched by Asio, its timeouts
// by a timer), resolved again every dns_refresh and on Refresh().
//
//   dns:///name:port              the system's DNS servers (resolv.conf)
//   dns://10.0.0.53:53/name:port  that DNS server
#include <ares.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <atomic>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <map>
#include <mutex>

#include "base/log.h"
#include "naming/resolver_internal.h"

namespace rdmarpc::naming {

namespace asio = boost::asio;

namespace {

// c-ares's library-wide state, once per process.
void InitAresLibrary() {
  static std::once_flag once;
  std::call_once(once, [] { ares_library_init(ARES_LIB_INIT_ALL); });
}

class DnsWatcher : public std::enable_shared_from_this<DnsWatcher> {
 public:
  DnsWatcher(std::string server, std::string host, std::string port,
             const asio::any_io_executor& executor,
             const ResolverOptions& options)
      : server_(std::move(server)),
        host_(std::move(host)),
        port_(std::move(port)),
        scheme_(options.default_scheme),
        refresh_every_(options.dns_refresh),
        executor_(executor),
        ares_timer_(executor),
        refresh_timer_(executor) {}

  ~DnsWatcher() {
    // c-ares owns its sockets: Asio must not close them too.
    for (auto& [fd, watched] : sockets_) watched->descriptor.release();
    sockets_.clear();
    destroying_ = true;
    if (channel_ != nullptr) ares_destroy(channel_);
  }

  Status Init() {
    InitAresLibrary();
    ares_options options{};
    options.sock_state_cb = &DnsWatcher::SocketState;
    options.sock_state_cb_data = this;
    if (ares_init_options(&channel_, &options, ARES_OPT_SOCK_STATE_CB) !=
        ARES_SUCCESS) {
      channel_ = nullptr;
      return Status(StatusCode::kInternal, "c-ares did not start");
    }
    if (!server_.empty() &&
        ares_set_servers_ports_csv(channel_, server_.c_str()) != ARES_SUCCESS) {
      return Status(StatusCode::kInvalidArgument,
                    "DNS server \"" + server_ + "\" is not host:port");
    }
    return Status();
  }

  void Start(Resolver::Update update) {
    asio::post(executor_, [self = shared_from_this(),
                           update = std::move(update)]() mutable {
      self->update_ = std::move(update);
      self->Resolve();
    });
  }

  void Stop() {
    if (stopped_.exchange(true)) return;
    asio::post(executor_, [self = shared_from_this()] {
      self->update_ = nullptr;
      self->refresh_timer_.cancel();
      self->ares_timer_.cancel();
      ares_cancel(self->channel_);  // Its callback sees ARES_ECANCELLED.
    });
  }

  void Refresh() {
    asio::post(executor_, [self = shared_from_this()] {
      if (!self->stopped_.load() && !self->resolving_) self->Resolve();
    });
  }

 private:
  void Resolve() {
    if (stopped_.load()) return;
    resolving_ = true;
    ares_addrinfo_hints hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    // The callback holds a reference until c-ares calls it (it always does,
    // if only with ARES_EDESTRUCTION).
    auto* self = new std::shared_ptr<DnsWatcher>(shared_from_this());
    ares_getaddrinfo(channel_, host_.c_str(), port_.c_str(), &hints,
                     &DnsWatcher::OnAnswer, self);
    ArmAresTimer();
  }

  static void OnAnswer(void* arg, int status, int /*timeouts*/,
                       ares_addrinfo* result) {
    std::unique_ptr<std::shared_ptr<DnsWatcher>> self(
        static_cast<std::shared_ptr<DnsWatcher>*>(arg));
    (*self)->Answered(status, result);
    if (result != nullptr) ares_freeaddrinfo(result);
  }

  void Answered(int status, ares_addrinfo* result) {
    resolving_ = false;
    if (stopped_.load() || status == ARES_ECANCELLED ||
        status == ARES_EDESTRUCTION) {
      return;
    }
    if (status != ARES_SUCCESS) {
      const Status error(StatusCode::kUnavailable,
                         "DNS: " + host_ + ": " + ares_strerror(status));
      Log().warn("{}; again in {} ms", error.message(), refresh_every_.count());
      if (!known_ && update_) update_(error);
    } else {
      std::vector<std::string> endpoints;
      for (ares_addrinfo_node* node = result->nodes; node != nullptr;
           node = node->ai_next) {
        char text[INET6_ADDRSTRLEN] = {};
        if (node->ai_family == AF_INET) {
          inet_ntop(AF_INET,
                    &reinterpret_cast<sockaddr_in*>(node->ai_addr)->sin_addr,
                    text, sizeof text);
          endpoints.push_back(scheme_ + "://" + text + ":" + port_);
        } else if (node->ai_family == AF_INET6) {
          inet_ntop(AF_INET6,
                    &reinterpret_cast<sockaddr_in6*>(node->ai_addr)->sin6_addr,
                    text, sizeof text);
          endpoints.push_back(scheme_ + "://[" + text + "]:" + port_);
        }
      }
      Normalize(endpoints);
      if (!known_ || endpoints != last_) {
        known_ = true;
        last_ = endpoints;
        if (update_) update_(std::move(endpoints));
      }
    }
    refresh_timer_.expires_after(refresh_every_);
    refresh_timer_.async_wait(
        [weak = weak_from_this()](const boost::system::error_code& error) {
          auto self = weak.lock();
          if (!error && self && !self->resolving_) self->Resolve();
        });
  }

  // c-ares's sockets, watched on the executor.
  static void SocketState(void* data, ares_socket_t fd, int readable,
                          int writable) {
    static_cast<DnsWatcher*>(data)->OnSocketState(fd, readable, writable);
  }

  void OnSocketState(int fd, bool readable, bool writable) {
    if (destroying_) return;
    if (!readable && !writable) {
      const auto it = sockets_.find(fd);
      if (it != sockets_.end()) {
        it->second->descriptor.release();  // c-ares closes it.
        sockets_.erase(it);
      }
      return;
    }
    auto& watched = sockets_[fd];
    if (!watched) {
      watched = std::make_shared<Watched>(executor_, fd);
    }
    watched->read = readable;
    watched->write = writable;
    Watch(fd, watched);
  }

  struct Watched {
    Watched(const asio::any_io_executor& executor, int fd)
        : descriptor(executor, fd) {}
    asio::posix::stream_descriptor descriptor;
    bool read = false;
    bool write = false;
    bool waiting = false;
  };

  void Watch(int fd, const std::shared_ptr<Watched>& watched) {
    if (watched->waiting) return;
    const bool want_write = watched->write;
    if (!watched->read && !want_write) return;
    watched->waiting = true;
    watched->descriptor.async_wait(
        want_write ? asio::posix::stream_descriptor::wait_write
                   : asio::posix::stream_descriptor::wait_read,
        [self = shared_from_this(), fd, watched,
         want_write](const boost::system::error_code& error) {
          watched->waiting = false;
          if (error || self->sockets_.find(fd) == self->sockets_.end() ||
              self->sockets_[fd] != watched) {
            return;
          }
          ares_process_fd(self->channel_, want_write ? ARES_SOCKET_BAD : fd,
                          want_write ? fd : ARES_SOCKET_BAD);
          const auto still = self->sockets_.find(fd);
          if (still != self->sockets_.end() && still->second == watched) {
            self->Watch(fd, watched);
          }
          self->ArmAresTimer();
        });
  }

  void ArmAresTimer() {
    timeval tv{};
    if (ares_timeout(channel_, nullptr, &tv) == nullptr) return;
    ares_timer_.expires_after(std::chrono::seconds(tv.tv_sec) +
                              std::chrono::microseconds(tv.tv_usec));
    ares_timer_.async_wait(
        [weak = weak_from_this()](const boost::system::error_code& error) {
          auto self = weak.lock();
          if (error || !self) return;
          ares_process_fd(self->channel_, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
          self->ArmAresTimer();
        });
  }

  const std::string server_;  // "host:port", or empty: resolv.conf's.
  const std::string host_;
  const std::string port_;
  const std::string scheme_;
  const std::chrono::milliseconds refresh_every_;
  asio::any_io_executor executor_;
  std::atomic<bool> stopped_{false};
  // The executor's thread only.
  ares_channel channel_ = nullptr;
  std::map<int, std::shared_ptr<Watched>> sockets_;
  asio::steady_timer ares_timer_;
  asio::steady_timer refresh_timer_;
  Resolver::Update update_;
  bool resolving_ = false;
  bool destroying_ = false;
  bool known_ = false;
  std::vector<std::string> last_;
};

class DnsResolver final : public Resolver {
 public:
  explicit DnsResolver(std::shared_ptr<DnsWatcher> watcher)
      : watcher_(std::move(watcher)) {}
  ~DnsResolver() override { watcher_->Stop(); }
  void Start(Update update) override { watcher_->Start(std::move(update)); }
  void Stop() override { watcher_->Stop(); }
  void Refresh() override { watcher_->Refresh(); }

 private:
  std::shared_ptr<DnsWatcher> watcher_;
};

}  // namespace

StatusOr<std::unique_ptr<Resolver>> MakeDnsResolver(
    std::string_view target, const asio::any_io_executor& executor,
    const ResolverOptions& options) {
  // dns://[SERVER]/NAME:PORT
  std::string_view rest = target.substr(6);
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos) {
    return Status(StatusCode::kInvalidArgument,
                  "a DNS target is dns://[dns-server:port]/name:port");
  }
  const std::string server(rest.substr(0, slash));
  const std::string_view name_port = rest.substr(slash + 1);
  const auto colon = name_port.rfind(':');
  if (colon == std::string_view::npos || colon == 0 ||
      colon + 1 == name_port.size() ||
      name_port.substr(colon + 1).find_first_not_of("0123456789") !=
          std::string_view::npos) {
    return Status(StatusCode::kInvalidArgument,
                  "a DNS target is dns://[dns-server:port]/name:port, not \"" +
                      std::string(target) + "\"");
  }
  auto watcher = std::make_shared<DnsWatcher>(
      server, std::string(name_port.substr(0, colon)),
      std::string(name_port.substr(colon + 1)), executor, options);
  if (Status ready = watcher->Init(); !ready.ok()) return ready;
  return std::unique_ptr<Resolver>(new DnsResolver(std::move(watcher)));
}

}  // namespace rdmarpc::naming
