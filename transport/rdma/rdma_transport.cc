#include "transport/rdma/rdma_transport.h"

#include <arpa/inet.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "base/log_throttle.h"
#include "transport/rdma/device_info.h"
#include "transport/rdma/rdma_connection.h"
#include "transport/rdma/verbs.h"
#include "transport/tls/tls.h"

namespace rdmarpc::transport::rdma {

namespace asio = boost::asio;

namespace {

class RdmaListener final : public Listener {
 public:
  // Shared with the pending wait, which may outlive the Listener object.
  struct State {
    explicit State(asio::io_context& context)
        : fd(context), relisten(context) {}
    ~State() {
      if (fd.is_open()) fd.release();  // rdma-core owns the descriptor.
      DropId();
    }
    // Stops listening: the hold goes before the id (see DeviceHold).
    void DropId() {
      device_events.Reset();
      hold.Release();
      id.reset();
    }
    EventChannel events;
    DeviceHold hold;  // Of id's device.
    DeviceEventSubscription device_events;
    CmId id;  // Null while the device is gone.
    asio::posix::stream_descriptor fd;
    asio::steady_timer relisten;
    TransportOptions options;
    ContextPicker pick;
    AcceptHandler on_accept;
    std::shared_ptr<tls::TlsContext> tls;  // With options.tls.
    sockaddr_in address{};                 // The port once bound.
    std::string uri;
    bool closed = false;
  };

  // Creates the listening id on `state->events`, binds it to
  // `state->address` and listens.
  static Status BindAndListen(const std::shared_ptr<State>& shared) {
    State& state = *shared;
    rdma_cm_id* raw = nullptr;
    if (rdma_create_id(state.events.get(), &raw, nullptr, RDMA_PS_TCP) != 0) {
      return ErrnoStatus("rdma_create_id", errno);
    }
    CmId id(raw);
    if (state.options.rdma_tos >= 0) {  // Inherited by the ids it accepts.
      auto tos = static_cast<uint8_t>(state.options.rdma_tos);
      if (rdma_set_option(id.get(), RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos,
                          sizeof(tos)) != 0) {
        return ErrnoStatus("rdma_set_option(TOS)", errno);
      }
    }
    char host[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &state.address.sin_addr, host, sizeof(host));
    const std::string where = "rdma://" + std::string(host) + ":" +
                              std::to_string(ntohs(state.address.sin_port));
    if (rdma_bind_addr(id.get(), reinterpret_cast<sockaddr*>(&state.address)) !=
        0) {
      return ErrnoStatus(
          "bind " + where + " (is the address on an RDMA-capable netdev?)",
          errno);
    }
    if (rdma_listen(id.get(), 128) != 0) {
      return ErrnoStatus("rdma_listen " + where, errno);
    }
    state.address.sin_port = rdma_get_src_port(id.get());
    state.uri = "rdma://" + std::string(host) + ":" +
                std::to_string(ntohs(state.address.sin_port));
    state.hold = DeviceHold(id->verbs);
    state.device_events = DeviceEventSubscription(
        id->verbs, [weak = std::weak_ptr<State>(shared),
                    executor = state.fd.get_executor(),
                    port = id->port_num](const DeviceEvent& event) {
          if (!event.IsPortEvent() || event.port != port) return;
          asio::post(executor, [weak, event] {
            if (auto state = weak.lock()) OnPortEvent(state, event);
          });
        });
    state.id = std::move(id);
    return Status();
  }

  // Its port went down or came back: said in the log, where an operator
  // looks when connections fail (connections learn it on their own).
  static void OnPortEvent(const std::shared_ptr<State>& state,
                          const DeviceEvent& event) {
    if (state->closed || !state->id) return;
    if (event.type == IBV_EVENT_PORT_ERR) {
      Log().warn("{}: {}: no connection can be made until it is back",
                 state->uri, event.Describe());
    } else if (event.type == IBV_EVENT_PORT_ACTIVE) {
      Log().info("{}: {}", state->uri, event.Describe());
    }
  }

  // The device under the listening address went away: tries every
  // kRdmaRelistenInterval to listen on the same address and port again,
  // which works once a device serves that address again.
  static void Relisten(const std::shared_ptr<State>& state) {
    state->relisten.expires_after(tunables::kRdmaRelistenInterval);
    state->relisten.async_wait([state](const boost::system::error_code& e) {
      if (e || state->closed) return;
      Status status = BindAndListen(state);
      if (!status.ok()) {
        Log().debug("{}: cannot listen again yet: {}", state->uri,
                    status.message());
        return Relisten(state);
      }
      Log().info("{}: listening again", state->uri);
    });
  }

  explicit RdmaListener(std::shared_ptr<State> state)
      : state_(std::move(state)) {}
  ~RdmaListener() override { Close(); }

  const std::string& uri() const override { return state_->uri; }
  void Close() override {
    asio::post(state_->fd.get_executor(), [state = state_] {
      if (state->closed) return;
      state->closed = true;
      boost::system::error_code ignored;
      state->fd.cancel(ignored);
      state->relisten.cancel();
      state->DropId();
    });
  }

  static void Watch(const std::shared_ptr<State>& state) {
    state->fd.async_wait(
        asio::posix::stream_descriptor::wait_read,
        [state](const boost::system::error_code& error) {
          if (error || state->closed) return;
          rdma_cm_event* event = nullptr;
          while (rdma_get_cm_event(state->events.get(), &event) == 0) {
            OnEvent(state, event);
          }
          Watch(state);
        });
  }

 private:
  static void OnEvent(const std::shared_ptr<State>& state,
                      rdma_cm_event* event) {
    if (event->event == RDMA_CM_EVENT_DEVICE_REMOVAL &&
        event->id == state->id.get()) {
      // The kernel waits for us to let go of the device: the id goes now.
      rdma_ack_cm_event(event);
      const std::string device = DeviceName(state->id->verbs);
      DeviceHold::MarkRemoved(state->id->verbs);
      state->DropId();
      Log().warn(
          "{}: RDMA device {} was removed; listening again when a device "
          "serves this address",
          state->uri, device);
      return Relisten(state);
    }
    if (event->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
      Log().debug("{}: {}", state->uri, rdma_event_str(event->event));
      // Events of accepted ids arrive on their own channels once migrated.
      rdma_ack_cm_event(event);
      return;
    }
    rdma_cm_id* child = event->id;
    const rdma::ReadDepth requested{event->param.conn.initiator_depth,
                                    event->param.conn.responder_resources};
    StatusOr<ConnParams> peer = CheckConnParams(
        std::span(static_cast<const std::byte*>(event->param.conn.private_data),
                  event->param.conn.private_data_len));
    rdma_ack_cm_event(event);
    const bool tls = state->options.tls.has_value();
    if (peer.ok() && ((peer->flags & kConnTls) != 0) != tls) {
      peer = Status(StatusCode::kUnauthenticated,
                    tls ? "the peer does not use TLS, and this listener "
                          "requires it"
                        : "the peer uses TLS, and this listener has none "
                          "configured");
    }
    if (!peer.ok()) {
      // Anyone can send these at will: once per interval for the listener.
      if (const auto held =
              ThrottleLog("connection request refused", state->uri)) {
        Log().warn("{}: refused a connection request: {}{}", state->uri,
                   peer.status().message(), HeldBack(*held));
      }
      // Our own parameters go back with the reject: a peer of another
      // version names ours in its error.
      const ConnParams local = LocalConnParams(tls);
      rdma_reject(child, &local, sizeof(local));
      rdma_destroy_id(child);
      return;
    }
    // The connection keeps itself alive until established (or failed); then
    // the acceptor takes it.
    RdmaConnection::Accept(
        state->pick(), CmId(child), *peer, requested, state->options,
        [on_accept = state->on_accept, uri = state->uri](
            const Status& status, std::shared_ptr<RdmaConnection> connection) {
          if (status.code() == StatusCode::kResourceExhausted) {
            Log().warn("{}: refused a connection from {}: {}", uri,
                       connection->peer(), status.message());
            return;
          }
          if (!status.ok()) {
            Log().info("{}: connection from {} failed: {}", uri,
                       connection->peer(), status.message());
            return;
          }
          on_accept(std::move(connection));
        });
  }

  std::shared_ptr<State> state_;
};

}  // namespace

StatusOr<std::unique_ptr<Listener>> Listen(asio::io_context& accept_context,
                                           const std::string& host,
                                           uint16_t port,
                                           const TransportOptions& options,
                                           ContextPicker pick,
                                           AcceptHandler on_accept) {
  Status available = CheckRdmaAvailable();
  if (!available.ok()) {
    return Status(available.code(), "cannot listen on rdma://" + host + ":" +
                                        std::to_string(port) + ": " +
                                        available.message());
  }
  auto state = std::make_shared<RdmaListener::State>(accept_context);
  state->events.reset(rdma_create_event_channel());
  if (!state->events) return ErrnoStatus("rdma_create_event_channel", errno);
  Status status = SetNonBlocking(state->events->fd);
  if (!status.ok()) return status;
  state->address.sin_family = AF_INET;
  state->address.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &state->address.sin_addr) != 1) {
    return Status(StatusCode::kInvalidArgument,
                  "rdma listen address '" + host + "' is not an IPv4 address");
  }
  if (!options.rdma_device.empty()) {
    // The device's address: the one to bind (any address of it would do for
    // rdma_cm, but the GID asked for is this one).
    StatusOr<ChosenGid> gid = ChooseGid(
        options.rdma_device, options.rdma_port_num, options.rdma_gid_index);
    if (!gid.ok()) {
      return Status(gid.status().code(), "cannot listen on rdma://" + host +
                                             ":" + std::to_string(port) + ": " +
                                             gid.status().message());
    }
    if (host != "0.0.0.0" && host != gid->address) {
      return Status(
          StatusCode::kInvalidArgument,
          "cannot listen on rdma://" + host + ":" + std::to_string(port) +
              ": GID " + std::to_string(gid->index) + " of " +
              options.rdma_device + " holds " + gid->address + ", not " + host);
    }
    inet_pton(AF_INET, gid->address.c_str(), &state->address.sin_addr);
  }
  state->options = options;
  if (options.tls) {
    // Its files are checked now, and its context kept for the connections.
    auto context =
        tls::TlsContext::Shared(*options.tls, tls::TlsContext::Role::kServer);
    if (!context.ok()) return context.status();
    state->tls = std::move(*context);
  }
  status = RdmaListener::BindAndListen(state);
  if (!status.ok()) return status;
  state->pick = std::move(pick);
  state->on_accept = std::move(on_accept);
  state->fd.assign(state->events->fd);
  RdmaListener::Watch(state);
  return std::unique_ptr<Listener>(new RdmaListener(std::move(state)));
}

void Connect(asio::io_context& context, const std::string& host, uint16_t port,
             const TransportOptions& options, ConnectHandler done,
             const RailHello& rail) {
  Status available = CheckRdmaAvailable();
  if (!available.ok()) {
    asio::post(context, [done = std::move(done), available, host, port] {
      done(Status(available.code(), "cannot connect to rdma://" + host + ":" +
                                        std::to_string(port) + ": " +
                                        available.message()));
    });
    return;
  }
  // The connection answers exactly once; the timer bounds the whole setup.
  struct Attempt {
    explicit Attempt(asio::io_context& context) : timer(context) {}
    asio::steady_timer timer;
    ConnectHandler done;
    // Weak: the connection holds this attempt (in its handler), and its loop
    // holds the connection while it is set up (LoopState), so a loop
    // destroyed first frees both.
    std::weak_ptr<RdmaConnection> connection;
    void Finish(StatusOr<std::shared_ptr<Connection>> result) {
      timer.cancel();
      if (auto d = std::move(done)) d(std::move(result));
    }
  };
  auto attempt = std::make_shared<Attempt>(context);
  attempt->done = std::move(done);
  attempt->connection = RdmaConnection::Connect(
      context, host, port, options, rail,
      [attempt](const Status& status,
                std::shared_ptr<RdmaConnection> connection) {
        attempt->connection.reset();
        if (!status.ok()) return attempt->Finish(status);
        attempt->Finish(std::shared_ptr<Connection>(std::move(connection)));
      });
  attempt->timer.expires_after(options.connect_timeout);
  attempt->timer.async_wait(
      [attempt, host, port,
       waited = options.connect_timeout](const boost::system::error_code& e) {
        auto connection = attempt->connection.lock();
        if (e || !connection) return;
        connection->Close(Status(
            StatusCode::kUnavailable,
            "connect to rdma://" + host + ":" + std::to_string(port) +
                " timed out: no answer within " +
                std::to_string(waited.count()) + " ms (connect_timeout)"));
      });
}

}  // namespace rdmarpc::transport::rdma
