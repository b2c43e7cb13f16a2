// TlsContext: one side's certificates, key and trust, loaded, checked and
// read again when they change.
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "base/log.h"
#include "transport/tls/tls.h"

namespace rdmarpc::transport::tls {

namespace {

Status Invalid(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}

// A file that must exist; its error names the option and the file.
Status CheckReadable(std::string_view option, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Invalid("TLS " + std::string(option) + " '" + path +
                   "': " + std::strerror(errno));
  }
  return Status();
}

// A private key nobody else may read: mode o+rwx is refused.
Status CheckKeyFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Invalid("TLS key_file '" + path + "': " + std::strerror(errno));
  }
  if ((st.st_mode & S_IRWXO) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o",
                  static_cast<unsigned>(st.st_mode & 07777));
    return Status(StatusCode::kFailedPrecondition,
                  "TLS key_file '" + path + "' may be used by others (mode " +
                      mode + "); remove their access (chmod o-rwx)");
  }
  return Status();
}

bool IsIpAddress(const std::string& host) {
  unsigned char buffer[16];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1 ||
         inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

// The versions and cipher suites `options` allow.
Status SetProtocol(SSL_CTX* ctx, const TlsOptions& options) {
  SSL_CTX_set_min_proto_version(ctx, options.min_version == TlsVersion::kTls13
                                         ? TLS1_3_VERSION
                                         : TLS1_2_VERSION);
  // Empty: TLS 1.3's three suites with AES-128-GCM first, as BoringSSL and
  // Go order them (OpenSSL puts AES-256-GCM first, about a third slower).
  const std::string suites =
      options.ciphersuites.empty()
          ? "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
            "TLS_CHACHA20_POLY1305_SHA256"
          : options.ciphersuites;
  if (SSL_CTX_set_ciphersuites(ctx, suites.c_str()) != 1) {
    TakeOpenSslErrors();
    return Invalid("TLS ciphersuites '" + options.ciphersuites +
                   "' name no suite OpenSSL has");
  }
  if (!options.cipher_list.empty() &&
      SSL_CTX_set_cipher_list(ctx, options.cipher_list.c_str()) != 1) {
    TakeOpenSslErrors();
    return Invalid("TLS cipher_list '" + options.cipher_list +
                   "' names no cipher OpenSSL has");
  }
  return Status();
}

// OpenSSL 3.0 works out a certificate's extensions on its first use and
// caches them in the X509 object, testing its "done" flag without the lock
// it writes them under: two handshakes on two threads verifying against the
// same CA certificate of one shared context race on that cache
// (ThreadSanitizer caught it in tls_transport_test). Worked out here, before
// the context is shared, they are only read afterwards.
void CacheExtensions(SSL_CTX* ctx) {
  STACK_OF(X509_OBJECT)* objects =
      X509_STORE_get0_objects(SSL_CTX_get_cert_store(ctx));
  for (int i = 0; i < sk_X509_OBJECT_num(objects); ++i) {
    X509* cert = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objects, i));
    if (cert != nullptr) X509_check_purpose(cert, -1, 0);
  }
  if (X509* own = SSL_CTX_get0_certificate(ctx)) X509_check_purpose(own, -1, 0);
  STACK_OF(X509)* chain = nullptr;
  SSL_CTX_get0_chain_certs(ctx, &chain);
  for (int i = 0; i < sk_X509_num(chain); ++i) {
    X509_check_purpose(sk_X509_value(chain, i), -1, 0);
  }
}

}  // namespace

TlsContext::TlsContext(const TlsOptions& options, Role role)
    : options_(options), role_(role) {}

TlsContext::~TlsContext() = default;

StatusOr<std::shared_ptr<TlsContext>> TlsContext::Create(
    const TlsOptions& options, Role role) {
  if (options.cert_file.empty() != options.key_file.empty()) {
    return Invalid("TLS needs cert_file and key_file together");
  }
  if (role == Role::kServer && options.cert_file.empty()) {
    return Invalid("a TLS server needs cert_file and key_file");
  }
  if (role == Role::kServer && options.require_client_cert &&
      options.ca_file.empty()) {
    return Invalid(
        "require_client_cert needs ca_file, the CAs client certificates "
        "chain to");
  }
  std::shared_ptr<TlsContext> context(new TlsContext(options, role));
  context->stamps_ = context->Stamps();
  auto loaded = context->Load();
  if (!loaded.ok()) return loaded.status();
  context->ctx_ = std::move(*loaded);
  context->loads_ = 1;
  context->last_check_ = std::chrono::steady_clock::now();
  return context;
}

StatusOr<std::shared_ptr<TlsContext>> TlsContext::Shared(
    const TlsOptions& options, Role role) {
  static std::mutex mu;
  static auto* const contexts =
      new std::map<std::string, std::weak_ptr<TlsContext>>();
  std::string key = std::to_string(static_cast<int>(role));
  for (const std::string* field :
       {&options.cert_file, &options.key_file, &options.ca_file,
        &options.server_name, &options.ciphersuites, &options.cipher_list}) {
    key += '\0' + *field;
  }
  key += '\0' + std::to_string(options.require_client_cert) + '/' +
         std::to_string(static_cast<int>(options.min_version)) + '/' +
         std::to_string(options.reload_check_interval.count());
  std::lock_guard lock(mu);
  for (auto it = contexts->begin(); it != contexts->end();) {
    it = it->second.expired() ? contexts->erase(it) : std::next(it);
  }
  if (auto found = contexts->find(key); found != contexts->end()) {
    if (auto context = found->second.lock()) return context;
  }
  auto made = Create(options, role);
  if (made.ok()) (*contexts)[key] = *made;
  return made;
}

StatusOr<SslCtxPtr> TlsContext::Load() const {
  ERR_clear_error();
  SslCtxPtr ctx(SSL_CTX_new(role_ == Role::kClient ? TLS_client_method()
                                                   : TLS_server_method()));
  if (ctx == nullptr) {
    return Status(StatusCode::kInternal,
                  "cannot make a TLS context: " + TakeOpenSslErrors());
  }
  if (Status s = SetProtocol(ctx.get(), options_); !s.ok()) return s;
  // No resumption: every connection proves who it is afresh.
  SSL_CTX_set_session_cache_mode(ctx.get(), SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(ctx.get(), 0);
  if (!options_.cert_file.empty()) {
    if (Status s = CheckReadable("cert_file", options_.cert_file); !s.ok()) {
      return s;
    }
    if (Status s = CheckKeyFile(options_.key_file); !s.ok()) return s;
    if (SSL_CTX_use_certificate_chain_file(ctx.get(),
                                           options_.cert_file.c_str()) != 1) {
      return Invalid("TLS cert_file '" + options_.cert_file +
                     "' holds no usable certificate: " + TakeOpenSslErrors());
    }
    const bool used =
        SSL_CTX_use_PrivateKey_file(ctx.get(), options_.key_file.c_str(),
                                    SSL_FILETYPE_PEM) == 1 &&
        SSL_CTX_check_private_key(ctx.get()) == 1;
    if (!used) {
      const std::string errors = TakeOpenSslErrors();
      if (errors.find("mismatch") != std::string::npos) {
        return Invalid("TLS key_file '" + options_.key_file +
                       "' is not the key of cert_file '" + options_.cert_file +
                       "'");
      }
      return Invalid("TLS key_file '" + options_.key_file +
                     "' holds no usable key: " + errors);
    }
  }
  if (!options_.ca_file.empty()) {
    if (Status s = CheckReadable("ca_file", options_.ca_file); !s.ok()) {
      return s;
    }
    if (SSL_CTX_load_verify_locations(ctx.get(), options_.ca_file.c_str(),
                                      nullptr) != 1) {
      return Invalid("TLS ca_file '" + options_.ca_file +
                     "' holds no usable certificate: " + TakeOpenSslErrors());
    }
    if (role_ == Role::kServer) {
      // Named in the certificate request, so a client picks a matching one.
      SSL_CTX_set_client_CA_list(
          ctx.get(), SSL_load_client_CA_file(options_.ca_file.c_str()));
    }
  } else if (role_ == Role::kClient) {
    SSL_CTX_set_default_verify_paths(ctx.get());
  }
  // A client always checks the server; a server with a CA checks a
  // certificate offered, and with require_client_cert wants one.
  const bool verify = role_ == Role::kClient || !options_.ca_file.empty();
  int mode = verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE;
  if (role_ == Role::kServer && options_.require_client_cert) {
    mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
  }
  SSL_CTX_set_verify(ctx.get(), mode, nullptr);
  CacheExtensions(ctx.get());
  ERR_clear_error();
  return ctx;
}

std::vector<TlsContext::FileStamp> TlsContext::Stamps() const {
  std::vector<FileStamp> stamps;
  for (const std::string* path :
       {&options_.cert_file, &options_.key_file, &options_.ca_file}) {
    FileStamp stamp;
    struct stat st {};
    if (!path->empty() && ::stat(path->c_str(), &st) == 0) {
      stamp.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 +
                       st.st_mtim.tv_nsec;
      stamp.size = static_cast<uint64_t>(st.st_size);
      stamp.inode = st.st_ino;
    }
    stamps.push_back(stamp);
  }
  return stamps;
}

Status TlsContext::Reload() {
  std::vector<FileStamp> stamps = Stamps();  // Before: a later change shows.
  auto loaded = Load();
  std::lock_guard lock(mu_);
  stamps_ = std::move(stamps);
  if (!loaded.ok()) return loaded.status();
  ctx_ = std::move(*loaded);
  ++loads_;
  return Status();
}

void TlsContext::ReloadIfChanged() {
  if (options_.reload_check_interval.count() <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mu_);
    if (now - last_check_ < options_.reload_check_interval) return;
    last_check_ = now;
    if (Stamps() == stamps_) return;
  }
  if (Status reloaded = Reload(); reloaded.ok()) {
    Log().info("TLS credentials read again from {}", options_.cert_file);
  } else {
    Log().warn("TLS credentials changed but were not loaded: {}",
               reloaded.message());
  }
}

uint64_t TlsContext::loads() const {
  std::lock_guard lock(mu_);
  return loads_;
}

StatusOr<std::unique_ptr<TlsSession>> TlsContext::NewSession(
    std::string_view host) {
  ReloadIfChanged();
  SslPtr ssl;
  {
    std::lock_guard lock(mu_);
    ssl.reset(SSL_new(ctx_.get()));  // Holds its own reference to ctx_.
  }
  if (ssl == nullptr) {
    return Status(StatusCode::kInternal,
                  "cannot make a TLS session: " + TakeOpenSslErrors());
  }
  SSL* raw = ssl.get();
  std::unique_ptr<TlsSession> session(new TlsSession(std::move(ssl)));
  if (role_ == Role::kServer) {
    SSL_set_accept_state(raw);
    return session;
  }
  SSL_set_connect_state(raw);
  if (Status named = NameServer(raw, host); !named.ok()) return named;
  return session;
}

SslCtxPtr TlsContext::NativeContext() {
  ReloadIfChanged();
  std::lock_guard lock(mu_);
  SSL_CTX_up_ref(ctx_.get());
  return SslCtxPtr(ctx_.get());
}

Status TlsContext::NameServer(SSL* ssl, std::string_view host) const {
  std::string name =
      options_.server_name.empty() ? std::string(host) : options_.server_name;
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);  // "[::1]" from a URI.
  }
  if (name.empty()) {
    return Invalid("a TLS client needs the server's name to check");
  }
  const bool named = IsIpAddress(name)
                         ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl),
                                                         name.c_str()) == 1
                         : SSL_set1_host(ssl, name.c_str()) == 1 &&
                               SSL_set_tlsext_host_name(ssl, name.c_str()) == 1;
  if (!named) {
    TakeOpenSslErrors();
    return Invalid("'" + name + "' is not a name a certificate can carry");
  }
  return Status();
}

}  // namespace rdmarpc::transport::tls
