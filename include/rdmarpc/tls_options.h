// TlsOptions: the certificates, key and trust a TLS endpoint uses (TLS 1.3
// with OpenSSL 3), and the checks it makes of its peer.
//
// A server needs `cert_file` and `key_file`; with `ca_file` and
// `require_client_cert` it also asks every client for a certificate that
// chains to that CA (mutual TLS). A client needs `ca_file` to verify the
// server, whose certificate must name the host it dialled (or
// `server_name`); with `cert_file` and `key_file` it can prove its own
// identity. Files are PEM. Revocation (CRL, OCSP) is not checked.
#ifndef RDMARPC_TLS_OPTIONS_H_
#define RDMARPC_TLS_OPTIONS_H_

#include <chrono>
#include <string>

namespace rdmarpc {

enum class TlsVersion {
  kTls12,
  kTls13,
};

struct TlsOptions {
  // This side's certificate chain, leaf first.
  std::string cert_file;
  // Its private key. Refused when others may read or write it (mode
  // o+rwx); group access is allowed, as Debian's ssl-cert group uses it.
  std::string key_file;
  // The CA certificates a peer's chain must end in. A client without one
  // cannot verify a server and is refused; a server without one accepts
  // no client certificate.
  std::string ca_file;
  // Server: a client without a valid certificate is refused.
  bool require_client_cert = false;
  // Client: the name (DNS name or IP address) the server's certificate
  // must carry; empty: the host of the URI dialled.
  std::string server_name;
  // The oldest protocol accepted. TLS 1.2 is off unless asked for.
  TlsVersion min_version = TlsVersion::kTls13;
  // TLS 1.3 cipher suites in OpenSSL's syntax, in order of preference
  // ("TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"); empty: all
  // three of TLS 1.3's, AES-128-GCM first (as BoringSSL and Go order them;
  // OpenSSL's own order puts AES-256-GCM first).
  std::string ciphersuites;
  // TLS 1.2's cipher list, when min_version allows it; empty: OpenSSL's
  // default.
  std::string cipher_list;
  // The files are read again when they change: their modification times
  // are compared when a connection starts, at most this often (zero: only
  // on an explicit reload). A reload that fails keeps what was loaded.
  std::chrono::milliseconds reload_check_interval{1000};
};

}  // namespace rdmarpc

#endif  // RDMARPC_TLS_OPTIONS_H_
