#include "transport/tcp/tcp_transport.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <span>

#include "base/log.h"
#include "base/log_throttle.h"
#include "transport/tcp/tcp_connection_internal.h"
#include "transport/tcp/tcp_tls.h"

namespace rdmarpc::transport::tcp {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// A connected socket whose event-loop registration watches reads only.
// Asio keeps a descriptor's EPOLLOUT interest (edge-triggered) for good once
// a write wait was started on it, and async_connect starts one: every ACK
// that frees send-buffer space would then wake the client's loop for
// nothing, once per call in a ping-pong. Registering the descriptor afresh
// drops that interest until a write actually blocks.
tcp::socket WatchReadsOnly(tcp::socket socket, boost::system::error_code& ec) {
  const auto executor = socket.get_executor();
  const tcp protocol = socket.local_endpoint(ec).protocol();
  if (ec) return socket;
  const int fd = socket.release(ec);
  if (ec) return socket;
  tcp::socket fresh(executor);
  fresh.assign(protocol, fd, ec);
  if (ec) ::close(fd);
  return fresh;
}

class TcpListener final : public Listener {
 public:
  // Shared with pending accepts, which may outlive the Listener object.
  struct State {
    explicit State(asio::io_context& context)
        : acceptor(context), retry(context) {}
    tcp::acceptor acceptor;
    asio::steady_timer retry;
    TransportOptions options;
    std::shared_ptr<tls::TlsContext> tls;  // TLS listeners only.
    // Set by Close: handshakes still under way hand over nothing.
    std::atomic<bool> closed{false};
    ContextPicker pick;
    AcceptHandler on_accept;
    std::string uri;
  };

  explicit TcpListener(std::shared_ptr<State> state)
      : state_(std::move(state)) {}
  ~TcpListener() override { Close(); }

  const std::string& uri() const override { return state_->uri; }
  void Close() override {
    state_->closed = true;
    asio::post(state_->acceptor.get_executor(), [state = state_] {
      boost::system::error_code ignored;
      state->acceptor.close(ignored);
      state->retry.cancel();
    });
  }

  static void AcceptNext(const std::shared_ptr<State>& state) {
    state->acceptor.async_accept(
        state->pick(),
        [state](const boost::system::error_code& error, tcp::socket socket) {
          if (error == asio::error::operation_aborted ||
              !state->acceptor.is_open()) {
            return;
          }
          if (error) {
            // EMFILE and friends: keep serving the connections we have and
            // retry later; the backlog stays readable, so retrying at once
            // would spin.
            Log().warn("{}: accept failed: {}; retrying in 100 ms", state->uri,
                       error.message());
            state->retry.expires_after(std::chrono::milliseconds(100));
            state->retry.async_wait(
                [state](const boost::system::error_code& e) {
                  if (!e && state->acceptor.is_open()) AcceptNext(state);
                });
            return;
          } else if (state->tls != nullptr) {
            AcceptTls(state, std::move(socket));
          } else {
            state->on_accept(std::make_shared<TcpConnection>(
                std::move(socket), state->options,
                TcpConnection::Role::kServer));
          }
          AcceptNext(state);
        });
  }

  // An accepted socket's TLS handshake, on its own loop, within
  // connect_timeout; then the connection is handed over from there.
  static void AcceptTls(const std::shared_ptr<State>& state,
                        tcp::socket socket) {
    auto session = state->tls->NewSession();
    if (!session.ok()) {
      Log().warn("{}: {}", state->uri, session.status().message());
      return;
    }
    auto pending =
        std::make_shared<PendingTls>(std::move(socket), std::move(*session));
    asio::post(pending->socket.get_executor(), [state, pending] {
      pending->timer.expires_after(state->options.connect_timeout);
      pending->timer.async_wait(
          [pending](const boost::system::error_code& error) {
            boost::system::error_code ignored;
            if (!error) pending->socket.close(ignored);
          });
      HandshakeTls(
          pending->socket, *pending->session,
          [state, pending](const Status& done) {
            pending->timer.cancel();
            if (done.ok() && state->closed) {
              boost::system::error_code ignored;
              pending->socket.close(ignored);
              return;
            }
            if (!done.ok()) {
              const std::string peer = PeerUri(pending->socket, "tls");
              if (const auto held = ThrottleLog("tls refused", peer)) {
                Log().warn("{}: refused: {}{}", peer, done.message(),
                           HeldBack(*held));
              }
              boost::system::error_code ignored;
              pending->socket.close(ignored);
              return;
            }
            state->on_accept(std::make_shared<TcpConnection>(
                std::move(pending->socket), state->options,
                TcpConnection::Role::kServer, std::move(pending->session)));
          });
    });
  }

 private:
  struct PendingTls {
    PendingTls(tcp::socket s, std::unique_ptr<tls::TlsSession> t)
        : socket(std::move(s)),
          session(std::move(t)),
          timer(socket.get_executor()) {}
    tcp::socket socket;
    std::unique_ptr<tls::TlsSession> session;
    asio::steady_timer timer;
  };
  std::shared_ptr<State> state_;
};

Status BindError(const std::string& what, const boost::system::error_code& e) {
  return Status(StatusCode::kUnavailable, what + ": " + e.message());
}

}  // namespace

StatusOr<std::unique_ptr<Listener>> Listen(asio::io_context& accept_context,
                                           const std::string& host,
                                           uint16_t port,
                                           const TransportOptions& options,
                                           ContextPicker pick,
                                           AcceptHandler on_accept) {
  boost::system::error_code error;
  const auto address = asio::ip::make_address(host, error);
  if (error) {
    return Status(StatusCode::kInvalidArgument,
                  "tcp listen address '" + host + "' is not an IP address");
  }
  auto state = std::make_shared<TcpListener::State>(accept_context);
  if (options.tls) {
    auto context =
        tls::TlsContext::Shared(*options.tls, tls::TlsContext::Role::kServer);
    if (!context.ok()) return context.status();
    state->tls = std::move(*context);
  }
  const tcp::endpoint endpoint(address, port);
  const std::string where = "listen on " + endpoint.address().to_string() +
                            ":" + std::to_string(port);
  state->acceptor.open(endpoint.protocol(), error);
  if (error) return BindError(where, error);
  state->acceptor.set_option(tcp::acceptor::reuse_address(true), error);
  state->acceptor.bind(endpoint, error);
  if (error) return BindError(where, error);
  state->acceptor.listen(asio::socket_base::max_listen_connections, error);
  if (error) return BindError(where, error);
  const auto bound = state->acceptor.local_endpoint(error);
  if (error) return BindError(where, error);
  const std::string bound_host = bound.address().is_v6()
                                     ? "[" + bound.address().to_string() + "]"
                                     : bound.address().to_string();
  state->uri = (state->tls ? "tls://" : "tcp://") + bound_host + ":" +
               std::to_string(bound.port());
  state->options = options;
  state->pick = std::move(pick);
  state->on_accept = std::move(on_accept);
  TcpListener::AcceptNext(state);
  return std::unique_ptr<Listener>(new TcpListener(std::move(state)));
}

namespace {

// What the server's first bytes, `got` of them, say: OK for a HELLO;
// UNIMPLEMENTED for another version; UNAVAILABLE for anything else.
Status ServerHello(std::span<const std::byte> got, const std::string& target) {
  if (LooksLikeTls(got)) {
    return Status(StatusCode::kUnavailable,
                  target +
                      " speaks TLS: connect with tls:// (or "
                      "TransportOptions::tls)");
  }
  Status hello = CheckHello(got);
  if (hello.ok()) return hello;
  if (hello.code() == StatusCode::kUnimplemented) {
    return Status(StatusCode::kUnimplemented, target + ": " + hello.message());
  }
  return Status(StatusCode::kUnavailable,
                target +
                    " is not an rdmarpc server: its first bytes are not "
                    "a HELLO");
}

// One Connect: resolve, connect, exchange HELLOs, all under one timer.
struct Attempt {
  explicit Attempt(asio::io_context& context)
      : resolver(context), socket(context), timer(context) {}
  tcp::resolver resolver;
  tcp::socket socket;
  asio::steady_timer timer;
  ConnectHandler done;
  TransportOptions options;
  std::string target;
  bool finished = false;
  bool connected = false;  // Waiting for the server's HELLO.
  std::array<std::byte, kTcpControlFrameSize> hello{};
  // TLS connections: the credentials, and once connected the session.
  std::shared_ptr<tls::TlsContext> tls_context;
  std::unique_ptr<tls::TlsSession> tls;
  std::string host;
  // What the timer, once it fires, says was waited for.
  std::string waited_for = "connect_timeout";
  std::chrono::milliseconds wait{};

  // Gives the attempt `wait` from now.
  void Arm(const std::shared_ptr<Attempt>& self,
           std::chrono::milliseconds wait) {
    this->wait = wait;
    timer.expires_after(wait);
    timer.async_wait([self](const boost::system::error_code& error) {
      if (error || self->finished) return;
      boost::system::error_code ignored;
      self->socket.close(ignored);
      self->Finish(Status(
          StatusCode::kUnavailable,
          self->connected ? "connected to " + self->target +
                                ", which sent no HELLO within " +
                                std::to_string(self->wait.count()) + " ms (" +
                                self->waited_for +
                                "): a hung or overloaded server, or not rdmarpc"
                          : "connect to " + self->target + " timed out"));
    });
  }

  void Finish(StatusOr<std::shared_ptr<Connection>> result) {
    if (std::exchange(finished, true)) return;
    timer.cancel();
    resolver.cancel();
    done(std::move(result));
  }
  // The server's HELLO (or why there is none): hands over the connection,
  // with its TLS session if it has one, or fails with `hello`.
  void Greeted(Status hello) {
    if (!hello.ok()) {
      boost::system::error_code ignored;
      socket.close(ignored);
      return Finish(std::move(hello));
    }
    Finish(std::shared_ptr<Connection>(std::make_shared<TcpConnection>(
        std::move(socket), options, TcpConnection::Role::kClient,
        std::move(tls))));
  }
  void Fail(const std::string& what, const boost::system::error_code& e) {
    boost::system::error_code ignored;
    socket.close(ignored);
    Finish(Status(StatusCode::kUnavailable,
                  what + " " + target + ": " + e.message()));
  }
};
// ExchangeHellos over TLS: the HELLOs travel inside the session.
void ExchangeTlsHellos(const std::shared_ptr<Attempt>& attempt) {
  const auto hello = TcpControlFrame(KeepaliveKind::kHello);
  if (!WriteTlsNow(attempt->socket, *attempt->tls, hello)) {
    return attempt->Fail("cannot greet", asio::error::broken_pipe);
  }
  ReadTlsExactly(attempt->socket, *attempt->tls, attempt->hello,
                 [attempt](const Status& read) {
                   if (attempt->finished) return;
                   Status hello =
                       read.ok() ? ServerHello(attempt->hello, attempt->target)
                                 : Status(read.code(), attempt->target + ": " +
                                                           read.message());
                   attempt->Greeted(std::move(hello));
                 });
}

// Connected (and with TLS, the handshake done): sends this side's HELLO and
// waits for the server's (the timer still runs), then hands over the
// connection.
void ExchangeHellos(const std::shared_ptr<Attempt>& attempt) {
  attempt->connected = true;
  // A peer connected and silent for keepalive_timeout is taken for dead,
  // as on an open connection: so is a server that sends no HELLO.
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      attempt->timer.expiry() - std::chrono::steady_clock::now());
  const auto silence = attempt->options.keepalive_timeout;
  if (attempt->options.keepalive_interval.count() > 0 && silence < left) {
    attempt->waited_for = "keepalive_timeout";
    attempt->Arm(attempt, silence);
  }
  if (attempt->tls != nullptr) return ExchangeTlsHellos(attempt);
  const auto hello = TcpControlFrame(KeepaliveKind::kHello);
  boost::system::error_code error;
  asio::write(attempt->socket, asio::buffer(hello), error);  // Fits.
  if (error) return attempt->Fail("cannot greet", error);
  asio::async_read(
      attempt->socket, asio::buffer(attempt->hello),
      [attempt](const boost::system::error_code& error, size_t bytes) {
        if (attempt->finished) return;
        const auto got = std::span(attempt->hello).first(bytes);
        Status hello = ServerHello(got, attempt->target);
        if (!hello.ok() && error && !LooksLikeTls(got) &&
            hello.code() != StatusCode::kUnimplemented) {
          return attempt->Fail("lost the connection to", error);
        }
        attempt->Greeted(std::move(hello));
      });
}

}  // namespace

void Connect(asio::io_context& context, const std::string& host, uint16_t port,
             const TransportOptions& options, ConnectHandler done) {
  auto attempt = std::make_shared<Attempt>(context);
  attempt->done = std::move(done);
  attempt->options = options;
  attempt->host = host;
  attempt->target =
      (options.tls ? "tls://" : "tcp://") + host + ":" + std::to_string(port);
  if (options.tls) {
    auto credentials =
        tls::TlsContext::Shared(*options.tls, tls::TlsContext::Role::kClient);
    if (!credentials.ok()) {
      Status error(credentials.status().code(),
                   attempt->target + ": " + credentials.status().message());
      asio::post(context, [attempt, error] { attempt->Finish(error); });
      return;
    }
    attempt->tls_context = std::move(*credentials);
  }
  attempt->Arm(attempt, options.connect_timeout);
  attempt->resolver.async_resolve(
      host, std::to_string(port),
      [attempt](const boost::system::error_code& error,
                const tcp::resolver::results_type& results) {
        if (attempt->finished) return;
        if (error) return attempt->Fail("cannot resolve", error);
        asio::async_connect(
            attempt->socket, results,
            [attempt](const boost::system::error_code& error,
                      const tcp::endpoint&) {
              if (attempt->finished) return;
              if (error) return attempt->Fail("cannot connect to", error);
              boost::system::error_code rewatch_error;
              tcp::socket socket =
                  WatchReadsOnly(std::move(attempt->socket), rewatch_error);
              if (rewatch_error) {
                return attempt->Fail("cannot use the connection to",
                                     rewatch_error);
              }
              attempt->socket = std::move(socket);
              if (attempt->tls_context == nullptr) {
                return ExchangeHellos(attempt);
              }
              auto session = attempt->tls_context->NewSession(attempt->host);
              if (!session.ok()) {
                return attempt->Finish(Status(
                    session.status().code(),
                    attempt->target + ": " + session.status().message()));
              }
              attempt->tls = std::move(*session);
              HandshakeTls(attempt->socket, *attempt->tls,
                           [attempt](const Status& shaken) {
                             if (attempt->finished) return;
                             if (!shaken.ok()) {
                               boost::system::error_code ignored;
                               attempt->socket.close(ignored);
                               return attempt->Finish(Status(
                                   shaken.code(),
                                   attempt->target + ": " + shaken.message()));
                             }
                             ExchangeHellos(attempt);
                           });
            });
      });
}

}  // namespace rdmarpc::transport::tcp
