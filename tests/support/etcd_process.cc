#include "tests/support/etcd_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace rdmarpc::testing {

namespace {

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw std::runtime_error("no free loopback port");
  }
  close(fd);
  return ntohs(address.sin_port);
}

bool Answers(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  const bool ok =
      connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  close(fd);
  return ok;
}

// True once etcd at `port` serves requests: its /health answers
// {"health":"true"}, which it says only with a leader elected. It listens
// well before that (14 ms after a restart here, healthy after 1.3-1.7 s
// idle and longer under load), and a request sent in between waits for the
// election and may outlast the client's request_timeout.
bool Healthy(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  timeval timeout{.tv_sec = 1, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  std::string answer;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    const std::string request =
        "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(request.size())) {
      char chunk[512];
      ssize_t n;
      while ((n = recv(fd, chunk, sizeof chunk, 0)) > 0)
        answer.append(chunk, n);
    }
  }
  // Closed with a reset: a clean close would leave the connection in
  // TIME_WAIT on etcd's side, and etcd's port unbindable for a minute by
  // anyone without SO_REUSEADDR (naming_test binds it while etcd is down).
  linger reset{.l_onoff = 1, .l_linger = 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  close(fd);
  return answer.find("\"health\":\"true\"") != std::string::npos;
}

pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // Gone with the test, if it dies.
    FILE* out = freopen(log.c_str(), "a", stdout);
    if (out != nullptr) dup2(fileno(stdout), 2);
    std::vector<char*> argv;
    for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

std::string TempDir(const char* name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string base = tmp != nullptr ? tmp : "/tmp";
  char templ[4096];
  snprintf(templ, sizeof templ, "%s/%s.XXXXXX", base.c_str(), name);
  if (mkdtemp(templ) == nullptr) throw std::runtime_error("mkdtemp failed");
  return templ;
}

}  // namespace

DnsmasqProcess::DnsmasqProcess() {
  const char* binary = "/usr/sbin/dnsmasq";
  if (access(binary, X_OK) != 0) {
    throw std::runtime_error(
        "/usr/sbin/dnsmasq is missing: tools/setup installs dnsmasq-base");
  }
  dir_ = TempDir("dnsmasq");
  Set("");
  // UDP and TCP on the same port: take one that is free for TCP, and
  // retry if UDP's is not.
  for (int attempt = 0; attempt < 5 && pid_ < 0; ++attempt) {
    port_ = FreePort();
    pid_ =
        Spawn({binary, "--no-daemon", "--port=" + std::to_string(port_),
               "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv",
               "--no-hosts", "--addn-hosts=" + dir_ + "/hosts", "--user=root",
               "--pid-file=", "--conf-file=/dev/null", "--local-ttl=0",
               "--log-facility=-"},
              dir_ + "/dnsmasq.log");
    const auto give_up =
        std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!Answers(port_)) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      if (std::chrono::steady_clock::now() > give_up) {
        throw std::runtime_error("dnsmasq did not answer within 10 s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (pid_ < 0) throw std::runtime_error("dnsmasq did not start");
}

DnsmasqProcess::~DnsmasqProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    int status;
    waitpid(pid_, &status, 0);
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string DnsmasqProcess::server() const {
  return "127.0.0.1:" + std::to_string(port_);
}

void DnsmasqProcess::Set(const std::string& lines) {
  {
    std::ofstream hosts(dir_ + "/hosts.new");
    hosts << lines;
  }
  std::filesystem::rename(dir_ + "/hosts.new", dir_ + "/hosts");
  if (pid_ > 0) kill(pid_, SIGHUP);
}

EtcdProcess::EtcdProcess(EtcdTls tls) : tls_(std::move(tls)) {
  if (access("/usr/bin/etcd", X_OK) != 0) {
    throw std::runtime_error(
        "/usr/bin/etcd is missing: tools/setup installs etcd-server");
  }
  dir_ = TempDir("etcd");
  client_port_ = FreePort();
  peer_port_ = FreePort();
  metrics_port_ = FreePort();
  Launch(/*new_ports_if_taken=*/true);
}

EtcdProcess::~EtcdProcess() {
  if (pid_ > 0) Stop(SIGTERM);
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string EtcdProcess::endpoint() const {
  return "127.0.0.1:" + std::to_string(client_port_);
}

// etcd exits at once when one of its ports is taken. Between FreePort and
// etcd's bind, or while a test has etcd stopped, another process (tests run
// in parallel) may hold the port, even as the local port of a connection of
// its own, which the kernel picks from the same range. Such a port comes
// free again: a fresh etcd tries new ports, a restarted one (whose clients
// know its port) waits for its own.
void EtcdProcess::Launch(bool new_ports_if_taken) {
  constexpr int kTries = 20;
  for (int attempt = 1;; ++attempt) {
    const std::string client =
        (tls_.cert_file.empty() ? "http://127.0.0.1:" : "https://127.0.0.1:") +
        std::to_string(client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
    std::vector<std::string> args = {
        "/usr/bin/etcd",
        "--name",
        "t",
        "--data-dir",
        dir_ + "/data",
        "--listen-client-urls",
        client,
        "--advertise-client-urls",
        client,
        "--listen-peer-urls",
        peer,
        "--initial-advertise-peer-urls",
        peer,
        "--initial-cluster",
        "t=" + peer,
        "--listen-metrics-urls",
        "http://127.0.0.1:" + std::to_string(metrics_port_),
        "--log-level",
        "warn"};
    if (!tls_.cert_file.empty()) {
      args.insert(args.end(),
                  {"--cert-file", tls_.cert_file, "--key-file", tls_.key_file});
    }
    if (!tls_.client_ca_file.empty()) {
      args.insert(args.end(), {"--client-cert-auth", "--trusted-ca-file",
                               tls_.client_ca_file});
    }
    pid_ = Spawn(args, dir_ + "/etcd.log");
    if (WaitReady()) return;
    if (attempt == kTries) {
      throw std::runtime_error("etcd exited at start " +
                               std::to_string(kTries) + " times; see " + dir_ +
                               "/etcd.log");
    }
    if (new_ports_if_taken) {
      client_port_ = FreePort();
      peer_port_ = FreePort();
      metrics_port_ = FreePort();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  }
}

bool EtcdProcess::WaitReady() {
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!Healthy(metrics_port_)) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    if (std::chrono::steady_clock::now() > give_up) {
      throw std::runtime_error("etcd was not healthy within 20 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

void EtcdProcess::Stop(int signal) {
  if (pid_ <= 0) return;
  kill(pid_, signal);
  int status;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

void EtcdProcess::Restart() {
  if (pid_ > 0) Stop(SIGTERM);
  Launch(/*new_ports_if_taken=*/false);
}

std::string EtcdProcess::CtlPrefix() const {
  std::string command = "ETCDCTL_API=3 /usr/bin/etcdctl --endpoints=" +
                        std::string(tls_.cert_file.empty() ? "" : "https://") +
                        endpoint();
  if (!tls_.ctl_ca_file.empty()) command += " --cacert=" + tls_.ctl_ca_file;
  if (!tls_.ctl_cert_file.empty()) {
    command += " --cert=" + tls_.ctl_cert_file + " --key=" + tls_.ctl_key_file;
  }
  if (!ctl_user_.empty()) command += " --user=" + ctl_user_;
  return command;
}

void EtcdProcess::Compact() {
  // etcdctl prints the revision it compacted to; "compact" needs a number:
  // the current revision, from "endpoint status".
  const std::string command = "rev=$(" + CtlPrefix() +
                              " endpoint status -w json | sed -n "
                              "'s/.*\"revision\":\\([0-9]*\\).*/\\1/p')"
                              " && " +
                              CtlPrefix() + " compact \"$rev\" >/dev/null";
  if (std::system(command.c_str()) != 0) {
    throw std::runtime_error("etcdctl compact failed");
  }
}

void EtcdProcess::Ctl(const std::string& args) const {
  const std::string command =
      CtlPrefix() + " " + args + " >>" + dir_ + "/etcdctl.log 2>&1";
  if (std::system(command.c_str()) != 0) {
    throw std::runtime_error("etcdctl " + args + " failed; see " + dir_ +
                             "/etcdctl.log");
  }
}

void EtcdProcess::EnableAuth(const std::string& root_password) {
  Ctl("user add root --new-user-password=" + root_password);
  Ctl("user grant-role root root");
  Ctl("auth enable");
  ctl_user_ = "root:" + root_password;
}

}  // namespace rdmarpc::testing
