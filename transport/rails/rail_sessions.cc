#include "transport/rails/rail_sessions.h"

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <utility>

#include "base/log.h"
#include "transport/rails/railed_connection.h"
#include "transport/rdma/protocol.h"
#include "transport/rdma/rdma_connection.h"
#include "transport/rdma/rdma_transport.h"

namespace rdmarpc::transport::rails {

namespace {

using Session = std::array<uint8_t, 16>;

Session NewSession() {
  std::random_device random;
  Session session;
  for (size_t i = 0; i < session.size(); i += 4) {
    const uint32_t word = random();
    for (size_t b = 0; b < 4; ++b) session[i + b] = (word >> (8 * b)) & 0xff;
  }
  session[0] |= 1;  // Never all zero.
  return session;
}

std::string Name(const RailAddress& address) {
  return "rdma://" + address.host + ":" + std::to_string(address.port);
}

// One ConnectRails: the primary found, then the others connected.
struct Opening : std::enable_shared_from_this<Opening> {
  Opening(boost::asio::io_context& context, std::vector<RailAddress> addresses,
          const TransportOptions& options, ConnectHandler done)
      : context(context),
        addresses(std::move(addresses)),
        options(options),
        done(std::move(done)),
        session(NewSession()) {}

  boost::asio::io_context& context;
  const std::vector<RailAddress> addresses;
  const TransportOptions options;
  ConnectHandler done;
  const Session session;
  std::string failures;  // Of the rails tried as the primary.
  std::shared_ptr<RailedConnection> railed;
  size_t waiting = 0;  // Rails other than the primary still connecting.

  void Connect(uint8_t rail, bool primary, uint16_t epoch,
               ConnectHandler connected) {
    rdma::RailHello hello;
    hello.session = session;
    hello.rail = rail;
    hello.primary = primary;
    hello.epoch = epoch;
    rdma::Connect(context, addresses[rail].host, addresses[rail].port, options,
                  std::move(connected), hello);
  }

  void TryPrimary(uint8_t rail) {
    if (rail == addresses.size()) {
      return Finish(
          Status(StatusCode::kUnavailable, "no rail answered: " + failures));
    }
    Connect(rail, true, 0,
            [self = shared_from_this(),
             rail](StatusOr<std::shared_ptr<Connection>> connected) {
              if (!connected.ok()) {
                self->failures += (self->failures.empty() ? "" : "; ") +
                                  Name(self->addresses[rail]) + ": " +
                                  connected.status().message();
                return self->TryPrimary(rail + 1);
              }
              self->Opened(rail, std::move(*connected));
            });
  }

  void Opened(uint8_t primary, std::shared_ptr<Connection> connection) {
    // Rails connect again as their connection's peer: the addresses, the
    // options and the session outlive this opening.
    auto reconnect = [&context = context, addresses = addresses,
                      options = options, session = session](
                         uint8_t rail, uint16_t epoch, ConnectHandler done) {
      rdma::RailHello hello;
      hello.session = session;
      hello.rail = rail;
      hello.epoch = epoch;
      rdma::Connect(context, addresses[rail].host, addresses[rail].port,
                    options, std::move(done), hello);
    };
    railed = RailedConnection::Create(std::move(connection), primary,
                                      std::move(reconnect));
    for (size_t i = 0; i < addresses.size(); ++i) {
      const auto rail = static_cast<uint8_t>(i);
      if (rail == primary) continue;
      if (rail < primary) {  // It failed as a primary just now.
        railed->RejoinLater(rail);
        continue;
      }
      ++waiting;
      Connect(rail, false, 0,
              [self = shared_from_this(),
               rail](StatusOr<std::shared_ptr<Connection>> connected) {
                if (!connected.ok()) {
                  Log().warn("{}: rail {} ({}) did not connect: {}",
                             self->railed->peer(), rail,
                             Name(self->addresses[rail]),
                             connected.status().message());
                  self->railed->RejoinLater(rail);
                } else if (!self->railed->AddRail(rail, 0, *connected)) {
                  (*connected)
                      ->Close(Status(StatusCode::kCancelled,
                                     "closed while opening"));
                }
                if (--self->waiting == 0) self->Done();
              });
    }
    if (waiting == 0) Done();
  }

  void Done() { Finish(std::shared_ptr<Connection>(railed)); }
  void Finish(StatusOr<std::shared_ptr<Connection>> result) {
    if (auto d = std::move(done)) d(std::move(result));
  }
};

// The listener's sessions, by session: weak, so a session's connection
// going ends its entry.
class Sessions {
 public:
  void Open(const Session& session,
            const std::shared_ptr<RailedConnection>& railed) {
    std::lock_guard lock(mu_);
    for (auto it = open_.begin(); it != open_.end();) {
      it = it->second.expired() ? open_.erase(it) : std::next(it);
    }
    open_[session] = railed;
  }
  std::shared_ptr<RailedConnection> Find(const Session& session) {
    std::lock_guard lock(mu_);
    const auto it = open_.find(session);
    return it == open_.end() ? nullptr : it->second.lock();
  }

 private:
  std::mutex mu_;
  std::map<Session, std::weak_ptr<RailedConnection>> open_;
};

}  // namespace

void ConnectRails(boost::asio::io_context& context,
                  std::vector<RailAddress> addresses,
                  const TransportOptions& options, ConnectHandler done) {
  auto opening = std::make_shared<Opening>(context, std::move(addresses),
                                           options, std::move(done));
  opening->TryPrimary(0);
}

namespace {

// Both unauthenticated, or both the same identity.
bool SameIdentity(const PeerIdentity* a, const PeerIdentity* b) {
  const bool a_known = a != nullptr && a->authenticated();
  const bool b_known = b != nullptr && b->authenticated();
  if (!a_known || !b_known) return a_known == b_known;
  return a->SameAs(*b);
}

}  // namespace

AcceptHandler AcceptRails(AcceptHandler on_accept) {
  auto sessions = std::make_shared<Sessions>();
  return [sessions, on_accept = std::move(on_accept)](
             std::shared_ptr<Connection> connection) {
    auto* rdma = dynamic_cast<rdma::RdmaConnection*>(connection.get());
    if (rdma == nullptr || !rdma->peer_params().is_rail()) {
      return on_accept(std::move(connection));
    }
    const rdma::ConnParams& hello = rdma->peer_params();
    if ((hello.rail_flags & rdma::kRailPrimary) != 0) {
      auto railed =
          RailedConnection::Create(std::move(connection), hello.rail, nullptr);
      sessions->Open(hello.session, railed);
      return on_accept(std::move(railed));
    }
    std::shared_ptr<RailedConnection> railed = sessions->Find(hello.session);
    // The session id travels in the clear (rdma_cm's private data): over
    // authenticated RDMA a rail must prove the primary's identity, or
    // whoever read the id could join another peer's session.
    if (railed &&
        !SameIdentity(railed->peer_identity(), rdma->peer_identity())) {
      Log().warn("{}: closing rail {}: its certificate is not its session's",
                 connection->peer(), hello.rail);
      connection->Close(Status(StatusCode::kPermissionDenied,
                               "rail " + std::to_string(hello.rail) +
                                   " is not authenticated as its session"));
      return;
    }
    if (railed && railed->AddRail(hello.rail, hello.rail_epoch, connection)) {
      return;
    }
    Log().info("{}: closing rail {}: {}", connection->peer(), hello.rail,
               railed ? "its session is closed" : "of no session open here");
    connection->Close(Status(
        StatusCode::kFailedPrecondition,
        "rail " + std::to_string(hello.rail) + " of no session open here"));
  };
}

}  // namespace rdmarpc::transport::rails
