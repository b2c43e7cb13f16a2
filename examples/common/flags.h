// A tiny --flag VALUE parser for the example programs.
#ifndef RDMARPC_EXAMPLES_COMMON_FLAGS_H_
#define RDMARPC_EXAMPLES_COMMON_FLAGS_H_

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rdmarpc/naming_options.h"
#include "rdmarpc/tls_options.h"

namespace rdmarpc::examples {

class Flags {
 public:
  // Collects "--name value" pairs; everything else is positional.
  Flags(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg.rfind("--", 0) == 0 && i + 1 < argc) {
        values_[arg.substr(2)] = argv[++i];
      } else {
        positional_.push_back(arg);
      }
    }
  }
  std::string Get(const std::string& name, const std::string& fallback) const {
    const auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second;
  }
  long long GetInt(const std::string& name, long long fallback) const {
    const auto it = values_.find(name);
    return it == values_.end() ? fallback : std::atoll(it->second.c_str());
  }
  const std::vector<std::string>& positional() const { return positional_; }

  // TLS from --tls-cert FILE, --tls-key FILE, --tls-ca FILE and
  // --tls-server-name NAME (a client's check of the server's name), if any
  // is given. A server given --tls-ca requires client certificates from
  // that CA (mutual TLS).
  std::optional<TlsOptions> Tls(bool server) const {
    const std::string cert = Get("tls-cert", "");
    const std::string key = Get("tls-key", "");
    const std::string ca = Get("tls-ca", "");
    const std::string name = Get("tls-server-name", "");
    if (cert.empty() && key.empty() && ca.empty() && name.empty()) {
      return std::nullopt;
    }
    TlsOptions tls;
    tls.cert_file = cert;
    tls.key_file = key;
    tls.ca_file = ca;
    tls.server_name = name;
    tls.require_client_cert = server && !ca.empty();
    return tls;
  }

  // How to reach an etcd that wants credentials (docs/cluster.md): TLS from
  // --etcd-ca FILE (with --etcd-cert FILE --etcd-key FILE for a client
  // certificate), and etcd's user authentication as --etcd-user NAME, its
  // password from --etcd-password-file FILE or $ETCD_PASSWORD.
  EtcdOptions Etcd() const {
    EtcdOptions etcd;
    etcd.tls.ca_file = Get("etcd-ca", "");
    etcd.tls.cert_file = Get("etcd-cert", "");
    etcd.tls.key_file = Get("etcd-key", "");
    etcd.user = Get("etcd-user", "");
    if (!etcd.user.empty())
      etcd.password = Secret("etcd-password", "ETCD_PASSWORD");
    return etcd;
  }

  // A secret, never from the command line (where `ps` shows it): the file
  // named by --NAME-file (its first line), else the environment variable
  // `env`; empty if neither is set. Exits with status 2 if --NAME is given,
  // or the file cannot be read.
  std::string Secret(const std::string& name, const char* env) const {
    if (values_.count(name) != 0) {
      std::fprintf(stderr,
                   "--%s is not accepted: the command line is visible to "
                   "every user (ps); use --%s-file FILE or %s\n",
                   name.c_str(), name.c_str(), env);
      std::exit(2);
    }
    if (const auto it = values_.find(name + "-file"); it != values_.end()) {
      std::ifstream in(it->second);
      std::string secret;
      if (!in || !std::getline(in, secret)) {
        std::fprintf(stderr, "cannot read --%s-file %s\n", name.c_str(),
                     it->second.c_str());
        std::exit(2);
      }
      return secret;
    }
    const char* value = std::getenv(env);
    return value != nullptr ? value : "";
  }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

}  // namespace rdmarpc::examples

#endif  // RDMARPC_EXAMPLES_COMMON_FLAGS_H_
