// TlsSession: OpenSSL over two byte queues (a BIO of rdmarpc's own), and
// what the peer's certificate says.
#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "transport/tls/tls.h"

namespace rdmarpc::transport::tls {

void SslCtxFree::operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
void SslFree::operator()(SSL* ssl) const { SSL_free(ssl); }

void ByteQueue::Append(std::span<const std::byte> bytes) {
  if (bytes.empty()) return;
  std::memcpy(Reserve(bytes.size()).data(), bytes.data(), bytes.size());
  Commit(bytes.size());
}

void ByteQueue::Consume(size_t n) {
  head_ += std::min(n, size());
  if (head_ == tail_) head_ = tail_ = 0;  // Empty: from the start again.
}

std::span<std::byte> ByteQueue::Reserve(size_t n) {
  if (capacity_ - tail_ < n) {
    const size_t queued = size();
    if (capacity_ - queued >= n) {
      // Room enough once the queued bytes move to the front.
      std::memmove(data_.get(), data_.get() + head_, queued);
    } else {
      const size_t capacity = std::max(queued + n, 2 * capacity_);
      auto grown = std::make_unique_for_overwrite<std::byte[]>(capacity);
      if (queued > 0) std::memcpy(grown.get(), data_.get() + head_, queued);
      data_ = std::move(grown);
      capacity_ = capacity;
    }
    head_ = 0;
    tail_ = queued;
  }
  return {data_.get() + tail_, n};
}

std::string TakeOpenSslErrors() {
  std::string out;
  while (const unsigned long error = ERR_get_error()) {
    if (!out.empty()) out += "; ";
    if (const char* reason = ERR_reason_error_string(error)) {
      out += reason;
    } else {
      char text[256];
      ERR_error_string_n(error, text, sizeof(text));
      out += text;
    }
  }
  return out;
}

// The BIO under every session: OpenSSL writes ciphertext into the
// session's outgoing queue and reads what Receive queued.
struct BioAccess {
  static TlsSession& Of(BIO* bio) {
    return *static_cast<TlsSession*>(BIO_get_data(bio));
  }
  static int Write(BIO* bio, const char* data, int size) {
    BIO_clear_retry_flags(bio);
    if (size <= 0) return 0;
    Of(bio).out_.Append(
        std::as_bytes(std::span(data, static_cast<size_t>(size))));
    return size;
  }
  static int Read(BIO* bio, char* data, int size) {
    BIO_clear_retry_flags(bio);
    ByteQueue& in = Of(bio).in_;
    if (in.empty()) {
      BIO_set_retry_read(bio);
      return -1;
    }
    const size_t n = std::min(in.size(), static_cast<size_t>(size));
    std::memcpy(data, in.View().data(), n);
    in.Consume(n);
    return static_cast<int>(n);
  }
  static long Control(BIO* bio, int command, long, void*) {  // NOLINT
    switch (command) {
      case BIO_CTRL_FLUSH:
        return 1;
      case BIO_CTRL_PENDING:
        return static_cast<long>(Of(bio).in_.size());  // NOLINT
      case BIO_CTRL_WPENDING:
        return static_cast<long>(Of(bio).out_.size());  // NOLINT
      default:
        return 0;
    }
  }
  static int Create(BIO* bio) {
    BIO_set_init(bio, 1);
    return 1;
  }
  static int Destroy(BIO*) { return 1; }

  static BIO_METHOD* Method() {
    // Made once and kept for the process's life.
    static BIO_METHOD* const method = [] {
      BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
                                   "rdmarpc queues");
      BIO_meth_set_write(m, Write);
      BIO_meth_set_read(m, Read);
      BIO_meth_set_ctrl(m, Control);
      BIO_meth_set_create(m, Create);
      BIO_meth_set_destroy(m, Destroy);
      return m;
    }();
    return method;
  }
};

TlsSession::TlsSession(SslPtr ssl) : ssl_(std::move(ssl)) {
  BIO* bio = BIO_new(BioAccess::Method());
  BIO_set_data(bio, this);
  SSL_set_bio(ssl_.get(), bio, bio);  // One reference, taken by the SSL.
}

TlsSession::~TlsSession() = default;

void TlsSession::Receive(std::span<const std::byte> ciphertext) {
  in_.Append(ciphertext);
}

bool TlsSession::HasReadable() const {
  if (SSL_pending(ssl_.get()) > 0) return true;
  // A TLS record: type, version (2 bytes), length (2 bytes), then length
  // bytes.
  const auto in = in_.View();
  if (in.size() < 5) return false;
  const size_t length =
      (static_cast<size_t>(in[3]) << 8) | static_cast<size_t>(in[4]);
  return in.size() >= 5 + length;
}

namespace {

// Alerts by which a peer says it refused this side's certificate, or that
// it wanted one (OpenSSL's reason strings).
bool IsCertificateAlert(const std::string& errors) {
  static constexpr std::string_view kReasons[] = {
      "alert unknown ca",
      "alert bad certificate",
      "alert certificate expired",
      "alert certificate revoked",
      "alert certificate unknown",
      "alert certificate required",
      "alert unsupported certificate",
      "alert access denied",
      "peer did not return a certificate",
  };
  return std::any_of(std::begin(kReasons), std::end(kReasons),
                     [&](std::string_view reason) {
                       return errors.find(reason) != std::string::npos;
                     });
}

std::string NameText(X509_NAME* name) {
  BIO* bio = BIO_new(BIO_s_mem());
  X509_NAME_print_ex(bio, name, 0, XN_FLAG_RFC2253);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);  // NOLINT
  std::string text(data, static_cast<size_t>(std::max(size, 0L)));
  BIO_free(bio);
  return text;
}

std::string CommonName(X509_NAME* name) {
  const int at = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
  if (at < 0) return {};
  unsigned char* utf8 = nullptr;
  const int size = ASN1_STRING_to_UTF8(
      &utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, at)));
  if (size < 0) return {};
  std::string text(reinterpret_cast<char*>(utf8), static_cast<size_t>(size));
  OPENSSL_free(utf8);
  return text;
}

std::vector<std::string> AltNames(X509* cert) {
  std::vector<std::string> out;
  auto* names = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, i);
    auto text = [](const ASN1_STRING* s) {
      return std::string(
          reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
          static_cast<size_t>(ASN1_STRING_length(s)));
    };
    switch (name->type) {
      case GEN_DNS:
        out.push_back("DNS:" + text(name->d.dNSName));
        break;
      case GEN_URI:
        out.push_back("URI:" + text(name->d.uniformResourceIdentifier));
        break;
      case GEN_EMAIL:
        out.push_back("email:" + text(name->d.rfc822Name));
        break;
      case GEN_IPADD: {
        const ASN1_OCTET_STRING* ip = name->d.iPAddress;
        char buffer[INET6_ADDRSTRLEN] = {};
        const int family = ASN1_STRING_length(ip) == 4    ? AF_INET
                           : ASN1_STRING_length(ip) == 16 ? AF_INET6
                                                          : 0;
        if (family != 0 && inet_ntop(family, ASN1_STRING_get0_data(ip), buffer,
                                     sizeof(buffer)) != nullptr) {
          out.push_back(std::string("IP:") + buffer);
        }
        break;
      }
      default:
        break;
    }
  }
  GENERAL_NAMES_free(names);
  return out;
}

}  // namespace

Status TlsSession::Failure(int result, std::string_view during) {
  const int error = SSL_get_error(ssl_.get(), result);
  std::string errors = TakeOpenSslErrors();
  if (error == SSL_ERROR_ZERO_RETURN) {
    return Status(StatusCode::kUnavailable, "peer closed the TLS session");
  }
  const long verify = SSL_get_verify_result(ssl_.get());  // NOLINT
  if (verify != X509_V_OK) {
    return Status(StatusCode::kUnauthenticated,
                  std::string(during) +
                      ": the peer's certificate is refused: " +
                      X509_verify_cert_error_string(verify));
  }
  if (IsCertificateAlert(errors)) {
    return Status(StatusCode::kUnauthenticated,
                  std::string(during) + ": the peer refused: " + errors);
  }
  if (errors.empty()) errors = "error " + std::to_string(error);
  return Status(StatusCode::kUnavailable,
                std::string(during) + " failed: " + errors);
}

StatusOr<TlsSession::Step> TlsSession::Handshake() {
  if (done_) return Step::kDone;
  ERR_clear_error();
  const int result = SSL_do_handshake(ssl_.get());
  if (result == 1) {
    done_ = true;
    if (X509* cert = SSL_get0_peer_certificate(ssl_.get())) {
      X509_NAME* subject = X509_get_subject_name(cert);
      peer_.subject = NameText(subject);
      peer_.common_name = CommonName(subject);
      peer_.alt_names = AltNames(cert);
    }
    return Step::kDone;
  }
  if (SSL_get_error(ssl_.get(), result) == SSL_ERROR_WANT_READ) {
    return Step::kWantInput;
  }
  return Failure(result, "TLS handshake");
}

namespace {

// SSL_get_error reads the thread's error queue, so it must hold nothing
// stale before a call. Peeking is cheaper than clearing (OpenSSL 3 clears
// every slot: about 800 instructions a call), and the queue is nearly
// always empty: Failure drains it.
void ClearStaleErrors() {
  if (ERR_peek_error() != 0) ERR_clear_error();
}

}  // namespace

StatusOr<size_t> TlsSession::Read(std::span<std::byte> out) {
  if (out.empty()) return size_t{0};
  ClearStaleErrors();
  const int result =
      SSL_read(ssl_.get(), out.data(),
               static_cast<int>(std::min(out.size(), size_t{INT_MAX})));
  if (result > 0) return static_cast<size_t>(result);
  if (SSL_get_error(ssl_.get(), result) == SSL_ERROR_WANT_READ) {
    return size_t{0};
  }
  return Failure(result, "TLS read");
}

Status TlsSession::Write(std::span<const std::byte> plaintext) {
  if (!done_) {
    return Status(StatusCode::kFailedPrecondition,
                  "TLS write before the handshake is done");
  }
  while (!plaintext.empty()) {
    const size_t n = std::min(plaintext.size(), size_t{1} << 30);
    ClearStaleErrors();
    const int result =
        SSL_write(ssl_.get(), plaintext.data(), static_cast<int>(n));
    if (result <= 0) return Failure(result, "TLS write");
    plaintext = plaintext.subspan(static_cast<size_t>(result));
  }
  return Status();
}

void TlsSession::Shutdown() {
  ERR_clear_error();
  SSL_shutdown(ssl_.get());
  ERR_clear_error();
}

std::string_view TlsSession::version() const {
  return SSL_get_version(ssl_.get());
}

std::string_view TlsSession::cipher() const {
  const SSL_CIPHER* cipher = SSL_get_current_cipher(ssl_.get());
  return cipher == nullptr ? std::string_view() : SSL_CIPHER_get_name(cipher);
}

StatusOr<std::array<std::byte, 32>> TlsSession::ExportKeyingMaterial(
    std::string_view label) const {
  std::array<std::byte, 32> out{};
  if (!done_ ||
      SSL_export_keying_material(
          ssl_.get(), reinterpret_cast<unsigned char*>(out.data()), out.size(),
          label.data(), label.size(), nullptr, 0, 0) != 1) {
    TakeOpenSslErrors();
    return Status(StatusCode::kFailedPrecondition,
                  "TLS keying material is exported after the handshake");
  }
  return out;
}

}  // namespace rdmarpc::transport::tls
