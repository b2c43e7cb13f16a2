#include "tests/support/test_pki.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <stdexcept>

namespace rdmarpc::testing {

namespace {

void Check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("test PKI: ") + what);
}

struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct CertFree {
  void operator()(X509* cert) const { X509_free(cert); }
};
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyFree>;
using CertPtr = std::unique_ptr<X509, CertFree>;

KeyPtr NewKey() {
  KeyPtr key(EVP_EC_gen("P-256"));
  Check(key != nullptr, "EC key");
  return key;
}

void AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* extension =
      X509V3_EXT_conf_nid(nullptr, &context, nid, value.c_str());
  Check(extension != nullptr, "extension");
  Check(X509_add_ext(cert, extension, -1) == 1, "add extension");
  X509_EXTENSION_free(extension);
}

CertPtr NewCert(const std::string& common_name, EVP_PKEY* key, long serial,
                std::chrono::seconds not_before,
                std::chrono::seconds not_after) {
  CertPtr cert(X509_new());
  Check(cert != nullptr, "certificate");
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), not_before.count());
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), not_after.count());
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("rdmarpc"),
                             -1, -1, 0);
  if (!common_name.empty()) {
    X509_NAME_add_entry_by_txt(
        name, "CN", MBSTRING_ASC,
        reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1, 0);
  }
  return cert;
}

void WriteFile(const std::string& path, mode_t mode,
               const std::function<bool(FILE*)>& write) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, mode);
  Check(fd >= 0, "open");
  ::fchmod(fd, mode);
  FILE* file = ::fdopen(fd, "w");
  Check(file != nullptr, "fdopen");
  const bool ok = write(file);
  std::fclose(file);
  Check(ok, "write PEM");
}

void WriteCert(const std::string& path, X509* cert) {
  WriteFile(path, 0644,
            [cert](FILE* f) { return PEM_write_X509(f, cert) == 1; });
}

void WriteKey(const std::string& path, EVP_PKEY* key) {
  WriteFile(path, 0600, [key](FILE* f) {
    return PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr,
                                nullptr) == 1;
  });
}

}  // namespace

struct TestPki::Ca {
  KeyPtr key;
  CertPtr cert;
};

TestPki::TestPki(std::string dir, std::string name)
    : dir_(std::move(dir)), ca_(std::make_unique<Ca>()) {
  ca_->key = NewKey();
  ca_->cert = NewCert(name + " CA", ca_->key.get(), serial_++,
                      std::chrono::seconds(-3600),
                      std::chrono::seconds(30 * 24 * 3600));
  X509* cert = ca_->cert.get();
  X509_set_issuer_name(cert, X509_get_subject_name(cert));
  AddExtension(cert, cert, NID_basic_constraints, "critical,CA:TRUE");
  AddExtension(cert, cert, NID_key_usage, "critical,keyCertSign,cRLSign");
  AddExtension(cert, cert, NID_subject_key_identifier, "hash");
  Check(X509_sign(cert, ca_->key.get(), EVP_sha256()) > 0, "sign CA");
  ca_file_ = dir_ + "/" + name + "-ca.pem";
  WriteCert(ca_file_, cert);
}

TestPki::~TestPki() = default;

IssuedCert TestPki::Issue(const std::string& common_name,
                          const std::vector<std::string>& alt_names,
                          const std::string& file,
                          std::chrono::seconds not_before,
                          std::chrono::seconds not_after) {
  KeyPtr key = NewKey();
  CertPtr cert =
      NewCert(common_name, key.get(), serial_++, not_before, not_after);
  X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_->cert.get()));
  AddExtension(cert.get(), ca_->cert.get(), NID_basic_constraints, "CA:FALSE");
  AddExtension(cert.get(), ca_->cert.get(), NID_authority_key_identifier,
               "keyid");
  if (!alt_names.empty()) {
    std::string names;
    for (const std::string& n : alt_names) {
      names += (names.empty() ? "" : ",") + n;
    }
    AddExtension(cert.get(), ca_->cert.get(), NID_subject_alt_name, names);
  }
  Check(X509_sign(cert.get(), ca_->key.get(), EVP_sha256()) > 0, "sign");
  IssuedCert issued{dir_ + "/" + file + ".pem", dir_ + "/" + file + "-key.pem"};
  WriteCert(issued.cert_file, cert.get());
  WriteKey(issued.key_file, key.get());
  return issued;
}

TempDir::TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern =
      std::string(base != nullptr ? base : "/tmp") + "/rdmarpc-XXXXXX";
  Check(::mkdtemp(pattern.data()) != nullptr, "mkdtemp");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

TestCerts::TestCerts(const std::vector<std::string>& server_names, bool mutual)
    : server(pki.Issue("server", server_names, "server")),
      client(pki.Issue("client", {"URI:spiffe://test/c"}, "client")),
      mutual_(mutual) {}

TransportOptions TestCerts::Server(bool require_client_cert) const {
  TransportOptions options;
  options.tls.emplace();
  options.tls->cert_file = server.cert_file;
  options.tls->key_file = server.key_file;
  if (require_client_cert) {
    options.tls->ca_file = pki.ca_file();
    options.tls->require_client_cert = true;
  }
  return options;
}

TransportOptions TestCerts::Client(bool with_cert) const {
  TransportOptions options;
  options.tls.emplace();
  options.tls->ca_file = pki.ca_file();
  if (with_cert) {
    options.tls->cert_file = client.cert_file;
    options.tls->key_file = client.key_file;
  }
  return options;
}

}  // namespace rdmarpc::testing
