// A real etcd for a test: Debian's etcd-server (tools/setup), started on
// loopback at free ports with a data directory of its own under the test's
// temporary directory, stopped (SIGTERM) when the object goes.
#ifndef RDMARPC_TESTS_ETCD_PROCESS_H_
#define RDMARPC_TESTS_ETCD_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <string>

namespace rdmarpc::testing {

class EtcdProcess {
 public:
  // Starts etcd and waits until it answers (throws std::runtime_error if it
  // does not within 20 s, or if /usr/bin/etcd is missing).
  EtcdProcess();
  ~EtcdProcess();
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // "127.0.0.1:PORT", its client endpoint.
  std::string endpoint() const;
  // Stops it with `signal` (SIGTERM, SIGKILL) and waits for it to exit.
  void Stop(int signal);
  // Starts it again on the same ports and data, and waits until it answers.
  void Restart();
  // Compacts its history up to the current revision (etcdctl).
  void Compact();

 private:
  void Launch();
  void WaitReady();

  std::string dir_;
  int client_port_ = 0;
  int peer_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace rdmarpc::testing

#endif  // RDMARPC_TESTS_ETCD_PROCESS_H_
