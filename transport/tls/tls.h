// TLS 1.3 (OpenSSL 3) for the transports, over memory: a TlsSession never
// touches a descriptor. Its owner hands it the ciphertext it received
// (from a socket, or from frames over a queue pair) and sends what it
// queues, so TLS fits under a gathered sendmsg as well as under RDMA SENDs.
//
// TlsContext holds one side's certificates, key and trust (TlsOptions),
// loaded and checked once, and read again when the files change or on
// Reload(); each connection takes a TlsSession from it.
#ifndef RDMARPC_TRANSPORT_TLS_TLS_H_
#define RDMARPC_TRANSPORT_TLS_TLS_H_

#include <openssl/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rdmarpc/peer_identity.h"
#include "rdmarpc/status.h"
#include "rdmarpc/tls_options.h"

namespace rdmarpc::transport::tls {

struct SslCtxFree {
  void operator()(SSL_CTX* ctx) const;
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxFree>;
struct SslFree {
  void operator()(SSL* ssl) const;
};
using SslPtr = std::unique_ptr<SSL, SslFree>;

// Bytes queued in order: appended at the back, consumed from the front.
// Its memory is never zeroed (Reserve hands out room a read fills: a
// zero-filled 64 KiB per read cost a TLS call ~65,000 instructions), and
// is reused once the bytes in it are consumed.
class ByteQueue {
 public:
  void Append(std::span<const std::byte> bytes);
  // The bytes not yet consumed, contiguous.
  std::span<const std::byte> View() const {
    return {data_.get() + head_, tail_ - head_};
  }
  void Consume(size_t n);
  // Room for up to n more bytes at the back, to be filled in place; then
  // Commit(k) keeps the first k of them.
  std::span<std::byte> Reserve(size_t n);
  void Commit(size_t n) { tail_ += std::min(n, capacity_ - tail_); }
  size_t size() const { return tail_ - head_; }
  bool empty() const { return size() == 0; }

 private:
  std::unique_ptr<std::byte[]> data_;
  size_t capacity_ = 0;
  size_t head_ = 0;  // The first byte not consumed.
  size_t tail_ = 0;  // One past the last byte queued.
};

// One connection's TLS. Not thread-safe: its connection's loop drives it.
class TlsSession {
 public:
  enum class Step { kDone, kWantInput };

  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // Ciphertext from the peer, in whatever pieces it arrived: copied in, or
  // read in place into InputSpace(n), then InputFilled(k) for k bytes.
  void Receive(std::span<const std::byte> ciphertext);
  std::span<std::byte> InputSpace(size_t n) { return in_.Reserve(n); }
  void InputFilled(size_t n) { in_.Commit(n); }
  // Read() has something to return without more input: decrypted bytes
  // not yet read, or a whole record received. (Not: part of a record.)
  bool HasReadable() const;

  // Advances the handshake with what was received: kDone once both sides
  // are authenticated as configured (peer() is then set), kWantInput while
  // it waits for the peer. Its messages are queued for Outgoing() either
  // way. A failure names its fault: UNAUTHENTICATED for a certificate this
  // side refused ("certificate has expired", "hostname mismatch", ...) or
  // the peer's alert that it refused ours ("tlsv1 alert unknown ca");
  // UNAVAILABLE for bytes that are not TLS or a broken handshake.
  StatusOr<Step> Handshake();
  bool handshake_done() const { return done_; }

  // Decrypted bytes, up to out.size(); 0 when no whole record is in yet.
  // An error: a corrupt record, the peer's alert, or its close_notify
  // (UNAVAILABLE "peer closed the TLS session").
  StatusOr<size_t> Read(std::span<std::byte> out);

  // Encrypts all of `plaintext` into records of up to 16 KiB, queued for
  // Outgoing(). Only after the handshake.
  Status Write(std::span<const std::byte> plaintext);

  // Ciphertext waiting to be sent, then Consume(n) once n bytes went.
  std::span<const std::byte> Outgoing() const { return out_.View(); }
  void Consume(size_t n) { out_.Consume(n); }

  // Queues a close_notify.
  void Shutdown();

  // Who the peer proved to be (after the handshake).
  const PeerIdentity& peer() const { return peer_; }
  // "TLSv1.3", and the cipher suite, once the handshake is done.
  std::string_view version() const;
  std::string_view cipher() const;

  // 32 bytes both sides derive from the session's secrets (RFC 8446,
  // section 7.5): binds something else, such as a queue pair, to this
  // session.
  StatusOr<std::array<std::byte, 32>> ExportKeyingMaterial(
      std::string_view label) const;

 private:
  friend class TlsContext;
  friend struct BioAccess;
  explicit TlsSession(SslPtr ssl);
  Status Failure(int result, std::string_view during);

  SslPtr ssl_;
  ByteQueue in_;   // Received ciphertext OpenSSL has not read yet.
  ByteQueue out_;  // Ciphertext OpenSSL wrote, not yet sent.
  bool done_ = false;
  PeerIdentity peer_;
};

// One side's credentials. Thread-safe; shared by its connections.
class TlsContext {
 public:
  enum class Role { kClient, kServer };

  // Loads and checks the files: a missing or unreadable file, a key that
  // does not match its certificate or that others may read, a server
  // without a certificate, or require_client_cert without ca_file is an
  // error (INVALID_ARGUMENT or FAILED_PRECONDITION, naming the file).
  static StatusOr<std::shared_ptr<TlsContext>> Create(const TlsOptions& options,
                                                      Role role);
  ~TlsContext();

  // A session for one connection. A client's checks that the server's
  // certificate names `host` (options.server_name wins if set). Reads the
  // files again first when they changed (reload_check_interval).
  StatusOr<std::unique_ptr<TlsSession>> NewSession(std::string_view host = {});

  // One context per distinct options and role in the process, shared by
  // every listener and channel that asks for it while any holds it.
  static StatusOr<std::shared_ptr<TlsContext>> Shared(const TlsOptions& options,
                                                      Role role);

  // For a TLS stream that is not a TlsSession (Boost.Asio's ssl::stream,
  // as the etcd client's): a reference of the caller's to the credentials
  // a new session gets now (read again first if the files changed).
  SslCtxPtr NativeContext();
  // Makes a client's `ssl` check that the server's certificate names `host`
  // (options.server_name wins if set) and name it in its hello (SNI).
  Status NameServer(SSL* ssl, std::string_view host) const;
  // Reads the files again now. New sessions use them; sessions running go
  // on with what they began with. On failure the loaded ones stay.
  Status Reload();
  // How many times files were loaded (1 after Create).
  uint64_t loads() const;

  const TlsOptions& options() const { return options_; }
  Role role() const { return role_; }

 private:
  struct FileStamp {
    int64_t mtime_ns = 0;
    uint64_t size = 0;
    uint64_t inode = 0;
    bool operator==(const FileStamp&) const = default;
  };
  TlsContext(const TlsOptions& options, Role role);
  StatusOr<SslCtxPtr> Load() const;
  std::vector<FileStamp> Stamps() const;
  void ReloadIfChanged();

  const TlsOptions options_;
  const Role role_;
  mutable std::mutex mu_;
  SslCtxPtr ctx_;
  std::vector<FileStamp> stamps_;
  std::chrono::steady_clock::time_point last_check_;
  uint64_t loads_ = 0;
};

// OpenSSL's queued errors as one line, oldest first (and clears them).
std::string TakeOpenSslErrors();

}  // namespace rdmarpc::transport::tls

#endif  // RDMARPC_TRANSPORT_TLS_TLS_H_
