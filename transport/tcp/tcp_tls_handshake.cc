// TLS before a TcpConnection exists: the handshake and the HELLOs through
// the session. Apart from tcp_tls.cc's connection paths (a translation unit
// of its own): its Asio operations would change how the compiler inlines
// Asio's code into the call path's.
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <vector>

#include "transport/keepalive.h"
#include "transport/tcp/tcp_connection_internal.h"
#include "transport/tcp/tcp_tls.h"

namespace rdmarpc::transport::tcp {

namespace asio = boost::asio;

ssize_t ReceiveCiphertext(int fd, tls::TlsSession& session) {
  const std::span<std::byte> space =
      session.InputSpace(tunables::kTlsReadChunk);
  ssize_t n;
  do {
    n = Recv(fd, space.data(), space.size());
  } while (n < 0 && errno == EINTR);
  session.InputFilled(n > 0 ? static_cast<size_t>(n) : 0);
  return n;
}

namespace {

Status Lost(std::string_view during, const std::string& why) {
  return Status(StatusCode::kUnavailable, std::string(during) + ": " + why);
}

// Sends what the session queued, best effort (an alert before closing).
void SendQueued(int fd, tls::TlsSession& session) {
  const auto out = session.Outgoing();
  if (out.empty()) return;
  const ssize_t n =
      ::send(fd, out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  session.Consume(out.size());  // What did not go is dropped.
  (void)n;
}

struct Handshake : std::enable_shared_from_this<Handshake> {
  Handshake(asio::ip::tcp::socket& socket, tls::TlsSession& session,
            UniqueFunction<void(Status)> done)
      : socket(socket), session(session), done(std::move(done)) {}

  void Step() {
    auto step = session.Handshake();
    if (!step.ok()) {
      const bool plaintext = GreetedInPlaintext(step.status());
      if (plaintext && session.Outgoing().empty()) {
        // OpenSSL sends no alert for bytes that are not TLS at all: this
        // one (fatal, unexpected_message) tells an rdmarpc client that it
        // reached a TLS listener.
        static constexpr std::array<std::byte, 7> kAlert = {
            std::byte{21}, std::byte{3}, std::byte{3}, std::byte{0},
            std::byte{2},  std::byte{2}, std::byte{10}};
        ::send(socket.native_handle(), kAlert.data(), kAlert.size(),
               MSG_DONTWAIT | MSG_NOSIGNAL);
      }
      SendQueued(socket.native_handle(), session);
      if (plaintext) {
        return Finish(Status(StatusCode::kUnavailable,
                             "the peer does not speak TLS: it greeted in "
                             "plaintext (a tcp:// server, or a client "
                             "without TLS)"));
      }
      return Finish(step.status());
    }
    if (!session.Outgoing().empty()) {
      writing.assign(session.Outgoing().begin(), session.Outgoing().end());
      session.Consume(writing.size());
      asio::async_write(
          socket, asio::buffer(writing),
          [self = shared_from_this()](const boost::system::error_code& error,
                                      size_t) {
            if (error) {
              return self->Finish(
                  Lost("TLS handshake: cannot write", error.message()));
            }
            self->AfterWrite();
          });
      return;
    }
    AfterWrite();
  }

  void AfterWrite() {
    if (session.handshake_done()) return Finish(Status());
    socket.async_wait(
        asio::ip::tcp::socket::wait_read,
        [self = shared_from_this()](const boost::system::error_code& error) {
          if (error) {
            return self->Finish(
                Lost("TLS handshake: cannot read", error.message()));
          }
          self->OnReadable();
        });
  }

  void OnReadable() {
    std::array<std::byte, tunables::kTlsRecordPlaintext> buffer;
    ssize_t n;
    do {
      n = Recv(socket.native_handle(), buffer.data(), buffer.size());
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
      const auto got = std::span(buffer).first(static_cast<size_t>(n));
      // The peer's first bytes, to tell a plaintext peer apart.
      const size_t keep = std::min(first.size() - first_size, got.size());
      std::memcpy(first.data() + first_size, got.data(), keep);
      first_size += keep;
      session.Receive(got);
      return Step();
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return AfterWrite();
    }
    Finish(Lost("TLS handshake", n == 0 ? "the peer closed the connection"
                                        : std::string(std::strerror(errno))));
  }

  // Whether the handshake failed because the peer greeted with an rdmarpc
  // HELLO in plaintext.
  bool GreetedInPlaintext(const Status& failure) const {
    return failure.code() == StatusCode::kUnavailable && first_size > 0 &&
           CheckHello(std::span(first).first(first_size)).ok();
  }

  void Finish(Status status) {
    if (!done) return;
    auto call = std::move(done);
    call(std::move(status));
  }

  asio::ip::tcp::socket& socket;
  tls::TlsSession& session;
  UniqueFunction<void(Status)> done;
  std::vector<std::byte> writing;
  std::array<std::byte, kTcpControlFrameSize> first{};
  size_t first_size = 0;
};

struct ExactRead : std::enable_shared_from_this<ExactRead> {
  ExactRead(asio::ip::tcp::socket& socket, tls::TlsSession& session,
            std::span<std::byte> out, UniqueFunction<void(Status)> done)
      : socket(socket), session(session), out(out), done(std::move(done)) {}

  void Step() {
    while (filled < out.size()) {
      auto n = session.Read(out.subspan(filled));
      if (!n.ok()) return Finish(n.status());
      if (*n > 0) {
        filled += *n;
        continue;
      }
      const ssize_t got = ReceiveCiphertext(socket.native_handle(), session);
      if (got > 0) continue;
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        socket.async_wait(
            asio::ip::tcp::socket::wait_read,
            [self =
                 shared_from_this()](const boost::system::error_code& error) {
              if (error) {
                return self->Finish(Lost("TLS read", error.message()));
              }
              self->Step();
            });
        return;
      }
      return Finish(Lost("TLS read", got == 0
                                         ? "the peer closed the connection"
                                         : std::string(std::strerror(errno))));
    }
    Finish(Status());
  }

  void Finish(Status status) {
    if (!done) return;
    auto call = std::move(done);
    call(std::move(status));
  }

  asio::ip::tcp::socket& socket;
  tls::TlsSession& session;
  std::span<std::byte> out;
  size_t filled = 0;
  UniqueFunction<void(Status)> done;
};

}  // namespace

void HandshakeTls(asio::ip::tcp::socket& socket, tls::TlsSession& session,
                  UniqueFunction<void(Status)> done) {
  std::make_shared<Handshake>(socket, session, std::move(done))->Step();
}

void ReadTlsExactly(asio::ip::tcp::socket& socket, tls::TlsSession& session,
                    std::span<std::byte> out,
                    UniqueFunction<void(Status)> done) {
  std::make_shared<ExactRead>(socket, session, out, std::move(done))->Step();
}

bool WriteTlsNow(asio::ip::tcp::socket& socket, tls::TlsSession& session,
                 std::span<const std::byte> bytes) {
  if (!session.Write(bytes).ok()) return false;
  const auto out = session.Outgoing();
  boost::system::error_code error;
  const size_t n =
      asio::write(socket, asio::buffer(out.data(), out.size()), error);
  session.Consume(out.size());
  return !error && n == out.size();
}

bool LooksLikeTls(std::span<const std::byte> first) {
  // A record's type (21 alert, 22 handshake) and major version 3.
  return first.size() >= 2 &&
         (first[0] == std::byte{21} || first[0] == std::byte{22}) &&
         first[1] == std::byte{3};
}

}  // namespace rdmarpc::transport::tcp
