// Name servers for a test, each started on loopback at free ports with a
// directory of its own under the test's temporary directory, and stopped
// (SIGTERM) when the object goes: a real etcd (Debian's etcd-server) and a
// DNS server (dnsmasq), both installed by tools/setup.
#ifndef RDMARPC_TESTS_ETCD_PROCESS_H_
#define RDMARPC_TESTS_ETCD_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <string>

namespace rdmarpc::testing {

// dnsmasq (Debian's dnsmasq-base) as a DNS server on 127.0.0.1 at a free
// port, answering from a hosts file of the test's: Set() rewrites it and
// makes dnsmasq read it again (SIGHUP).
class DnsmasqProcess {
 public:
  DnsmasqProcess();
  ~DnsmasqProcess();
  DnsmasqProcess(const DnsmasqProcess&) = delete;
  DnsmasqProcess& operator=(const DnsmasqProcess&) = delete;
  // "127.0.0.1:PORT".
  std::string server() const;
  // `lines` of a hosts file, "ADDRESS NAME" each.
  void Set(const std::string& lines);

 private:
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// An etcd that serves its clients over TLS: its certificate and key, and
// with client_ca_file the CA a client's certificate must end in
// (--client-cert-auth).
struct EtcdTls {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
  // etcdctl's own credentials: the CA of etcd's certificate, and a client
  // certificate when etcd wants one.
  std::string ctl_ca_file;
  std::string ctl_cert_file;
  std::string ctl_key_file;
};

class EtcdProcess {
 public:
  // Starts etcd and waits until it serves requests, a leader elected
  // (throws std::runtime_error if it does not within 20 s, or if
  // /usr/bin/etcd is missing). With tls.cert_file set, clients reach it
  // over https:// only.
  explicit EtcdProcess(EtcdTls tls = {});
  ~EtcdProcess();
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // "127.0.0.1:PORT", its client endpoint.
  std::string endpoint() const;
  // Stops it with `signal` (SIGTERM, SIGKILL) and waits for it to exit.
  void Stop(int signal);
  // Starts it again on the same ports and data, and waits until it serves;
  // a port another process holds meanwhile is waited for (up to 5 s).
  void Restart();
  // Compacts its history up to the current revision (etcdctl).
  void Compact();
  // Runs etcdctl against it with `args` (its endpoint and TLS flags come
  // first); throws std::runtime_error if it fails.
  void Ctl(const std::string& args) const;
  // Turns on etcd's user authentication: a root user with
  // `root_password`, then `etcdctl auth enable`.
  void EnableAuth(const std::string& root_password);

 private:
  // Starts etcd; tries again while it exits at once (a port taken).
  void Launch(bool new_ports_if_taken);
  // True once it serves (/health); false if it exited first.
  bool WaitReady();

  // etcdctl's command line up to its arguments.
  std::string CtlPrefix() const;

  const EtcdTls tls_;
  std::string dir_;
  int client_port_ = 0;
  int peer_port_ = 0;
  int metrics_port_ = 0;  // Plain HTTP: /health, whatever the client side.
  std::string ctl_user_;  // "root:password" once auth is on.
  pid_t pid_ = -1;
};

}  // namespace rdmarpc::testing

#endif  // RDMARPC_TESTS_ETCD_PROCESS_H_
