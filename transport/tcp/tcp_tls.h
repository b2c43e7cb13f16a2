// TLS on a TCP socket before it becomes a TcpConnection: the handshake,
// and reading the peer's first bytes (its HELLO) through the session.
// Both run on the socket's executor; the caller keeps the socket and the
// session alive until `done` has run.
#ifndef RDMARPC_TRANSPORT_TCP_TCP_TLS_H_
#define RDMARPC_TRANSPORT_TCP_TCP_TLS_H_

#include <sys/types.h>

#include <boost/asio/ip/tcp.hpp>
#include <cstddef>
#include <span>

#include "rdmarpc/status.h"
#include "rdmarpc/unique_function.h"
#include "transport/tls/tls.h"

namespace rdmarpc::transport::tcp {

// Runs the handshake to its end: done(OK), or done(error) naming the fault
// (tls::TlsSession::Handshake's errors; a peer that greets in plaintext is
// told apart: "does not speak TLS"). A failing side sends its alert first.
void HandshakeTls(boost::asio::ip::tcp::socket& socket,
                  tls::TlsSession& session, UniqueFunction<void(Status)> done);

// Reads decrypted bytes until `out` is full: done(OK), or done(error) with
// what failed. Bytes after them stay in the session.
void ReadTlsExactly(boost::asio::ip::tcp::socket& socket,
                    tls::TlsSession& session, std::span<std::byte> out,
                    UniqueFunction<void(Status)> done);

// Encrypts `bytes` and writes the ciphertext at once, blocking only as a
// socket whose buffer is empty does (a HELLO): false if it did not all go.
bool WriteTlsNow(boost::asio::ip::tcp::socket& socket, tls::TlsSession& session,
                 std::span<const std::byte> bytes);

// One non-blocking recv of up to tunables::kTlsReadChunk bytes of ciphertext
// into the session: > 0 bytes, 0 for the peer's end of stream, < 0 with errno.
ssize_t ReceiveCiphertext(int fd, tls::TlsSession& session);

// Whether `first` bytes from a peer begin a TLS record (a handshake or an
// alert): a TLS peer answering plaintext.
bool LooksLikeTls(std::span<const std::byte> first);

}  // namespace rdmarpc::transport::tcp

#endif  // RDMARPC_TRANSPORT_TCP_TCP_TLS_H_
