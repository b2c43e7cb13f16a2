// TestPki: a certificate authority made for a test, and the certificates
// it issues, written as PEM files into a directory of the test's own
// (OpenSSL's library, no openssl command). Keys are EC P-256, files 0600.
#ifndef RDMARPC_TESTS_SUPPORT_TEST_PKI_H_
#define RDMARPC_TESTS_SUPPORT_TEST_PKI_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "rdmarpc/transport_options.h"

namespace rdmarpc::testing {

struct IssuedCert {
  std::string cert_file;
  std::string key_file;
};

class TestPki {
 public:
  // A new CA named `name`, its certificate at dir/<name>-ca.pem.
  TestPki(std::string dir, std::string name = "test");
  ~TestPki();
  TestPki(const TestPki&) = delete;
  TestPki& operator=(const TestPki&) = delete;

  const std::string& ca_file() const { return ca_file_; }

  // A certificate signed by this CA for `common_name` (none if empty) with
  // `alt_names`
  // ("DNS:localhost", "IP:127.0.0.1", "URI:spiffe://test/x", ...), valid
  // from now + not_before to now + not_after, written to dir/<file>.pem and
  // dir/<file>-key.pem.
  IssuedCert Issue(const std::string& common_name,
                   const std::vector<std::string>& alt_names,
                   const std::string& file,
                   std::chrono::seconds not_before = std::chrono::hours(-1),
                   std::chrono::seconds not_after = std::chrono::hours(24));

 private:
  struct Ca;
  std::string dir_;
  std::string ca_file_;
  std::unique_ptr<Ca> ca_;
  long serial_ = 1;  // NOLINT(runtime/int): OpenSSL's type.
};

// A fresh directory under TEST_TMPDIR (or /tmp), removed by its destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// TLS credentials for a test: a CA, a server certificate (common name
// "server") for `server_names`, a client certificate ("client",
// URI:spiffe://test/c), and transport options that use them. With `mutual`
// the server requires a client certificate and a client presents its own,
// unless the call says otherwise.
class TestCerts {
 public:
  explicit TestCerts(const std::vector<std::string>& server_names =
                         {"DNS:localhost", "IP:127.0.0.1"},
                     bool mutual = false);

  // The server's certificate and key; with require_client_cert also the CA
  // a client's must end in.
  TransportOptions Server(bool require_client_cert) const;
  TransportOptions Server() const { return Server(mutual_); }
  // Trusting the CA; with_cert: also the client's certificate and key.
  TransportOptions Client(bool with_cert) const;
  TransportOptions Client() const { return Client(mutual_); }

  TempDir dir;
  TestPki pki{dir.path()};
  IssuedCert server;
  IssuedCert client;

 private:
  bool mutual_;
};

}  // namespace rdmarpc::testing

#endif  // RDMARPC_TESTS_SUPPORT_TEST_PKI_H_
