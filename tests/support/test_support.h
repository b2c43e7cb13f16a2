// Shared test fixtures: a generic test service, a synchronous call helper,
// and the transport under test (RDMARPC_TEST_TRANSPORT: tcp by default; the
// same suites run over rdma inside the Soft-RoCE VM).
#ifndef RDMARPC_TESTS_TEST_SUPPORT_H_
#define RDMARPC_TESTS_TEST_SUPPORT_H_

#include <spdlog/common.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rdmarpc/channel.h"
#include "rdmarpc/server.h"
#include "rdmarpc/service.h"
#include "rpc/common/event_loop.h"

namespace rdmarpc::testing {

using namespace std::chrono_literals;

// What the rdmarpc logger printed since this object was made (one capture at
// a time). The sink is installed once, before main(): spdlog's sink list
// must not change while other threads log.
class LogCapture {
 public:
  LogCapture();
  bool Contains(std::string_view text) const;
  // Lines captured so far that contain `text`.
  size_t Count(std::string_view text) const;
  // Printed at exactly `level`.
  bool Contains(spdlog::level::level_enum level, std::string_view text) const;
};

// "tcp://127.0.0.1:0", or the rdma equivalent on the VM's RXE_IP.
std::string ListenUri();
// A request's encoded metadata carrying `authorization: Bearer <token>`,
// as TokenClientInterceptor sends it; empty for an empty token. For peers
// that write raw frames.
std::string TokenMetadata(std::string_view token);
// True when the suite runs over rdma:// (RDMARPC_TEST_TRANSPORT=rdma).
bool OverRdma();
// Bytes this process has registered with the RDMA device now (0 over tcp).
uint64_t RegisteredBytes();
// rdma_cm ids of connections closed on a down port, kept until it is up.
uint64_t ParkedCmIds();

// A TCP socket listening on 127.0.0.1 at a free port, for a test that plays
// a raw peer (one that never answers, or speaks another version). Throws
// std::runtime_error if it cannot listen.
class LoopbackListener {
 public:
  LoopbackListener();
  ~LoopbackListener();
  LoopbackListener(const LoopbackListener&) = delete;
  LoopbackListener& operator=(const LoopbackListener&) = delete;
  // "tcp://127.0.0.1:PORT".
  std::string uri() const;
  // The next connection's socket (blocking); -1 on failure.
  int Accept() const;

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// A service named "test.Test" with methods:
//   Echo        returns the request
//   Fail        request "CODE:message" -> that status
//   SleepMs     request "N": finishes OK after N ms (timer; no thread blocked)
//   BlockMs     request "N": blocks its worker thread N ms, then finishes OK
//   Deadline    returns "none" or the remaining milliseconds
//   WaitCancel  never finishes on its own; finishes CANCELLED when cancelled
//   Bytes       request "N": returns N bytes
//   GatedBytes  request "N": returns N bytes once OpenGate() is called
//   Drop        drops the call without finishing it
class TestService : public rpc::Service {
 public:
  TestService();
  ~TestService() override;

  std::atomic<int> cancels_observed{0};
  std::atomic<int> calls_started{0};

  // The GatedBytes calls waiting for OpenGate().
  size_t gated_calls();
  // Answers every GatedBytes call waiting, one after the other.
  void OpenGate();

 private:
  rpc::EventLoop timers_;
  std::mutex gate_mutex_;
  std::vector<std::shared_ptr<rpc::ServerCall>> gated_;
};

// Holds a channel's event loop: the callback of an Echo call (made on a
// TestService) blocks until Release(), destruction, or `limit`, so the
// client reads nothing meanwhile. Keep the hold shorter than the server's
// keepalive timeout, or the server takes the client for dead.
class LoopHold {
 public:
  explicit LoopHold(rpc::Channel& channel,
                    std::chrono::milliseconds limit = std::chrono::seconds(30));
  ~LoopHold() { Release(); }
  LoopHold(const LoopHold&) = delete;
  LoopHold& operator=(const LoopHold&) = delete;

  // Waits until the loop is held; false if it was not within 10 s.
  bool WaitHeld();
  void Release();

 private:
  struct State {
    std::atomic<bool> holding{false};
    std::atomic<bool> released{false};
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

struct CallResult {
  Status status;
  std::string response;
};

// Makes one call and waits for it.
CallResult CallSync(rpc::Channel& channel, std::string_view method,
                    std::string request,
                    rpc::CallOptions options = rpc::CallOptions{},
                    std::string_view service = "test.Test");
// The same, naming the method by its id.
CallResult CallSync(rpc::Channel& channel, const rpc::MethodRef& method,
                    std::string request,
                    rpc::CallOptions options = rpc::CallOptions{});

// Services a TestServer may host besides test.Test.
enum TestServerHosts : unsigned {
  kHostCalculator = 1,  // rdmarpc.test.Calculator (typed_services.h)
  kHostClock = 2,       // rdmarpc.test.Clock (typed_services.h)
  kHostIntrospection =
      4,          // rdmarpc.Introspection (include/rdmarpc/introspection.h)
  kHostBlob = 8,  // rdmarpc.test.Blob (typed_services.h)
};
// Registers `service` and what `hosts` names with `server`, before it
// listens; the services it makes are kept in `keep`.
void HostServices(rpc::Server& server, TestService& service, unsigned hosts,
                  std::vector<std::unique_ptr<rpc::Service>>& keep);

// A started server with a TestService: in this process, or, when
// RDMARPC_TEST_PEER names a tools/softroce/peerctl directory (the two-host
// suite), a tests/test_server process on the other host (PEER_IP), started
// through peerctl and asked about its state over a control connection. The
// accessors below work either way; `service` and `server` are this
// process's own, used only in-process.
//
// Besides test.Test it hosts what `hosts` names (TestServerHosts, or'ed).
struct TestServer {
  // Listens on `listen`, or on ListenUri() (its remote equivalent) if empty.
  explicit TestServer(rpc::ServerOptions options = {}, std::string listen = "",
                      unsigned hosts = 0);
  ~TestServer();
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  int calls_started();
  int cancels_observed();
  rpc::ServerStats stats();
  void Shutdown(std::chrono::milliseconds grace);
  // Keepalive PINGs over the server's open connections.
  uint64_t keepalive_pings();
  // Whether the server logged `text` (at `level`, if given): in `log`, this
  // process's capture, or in the remote server's output.
  bool Logged(const LogCapture& log, std::string_view text,
              std::optional<spdlog::level::level_enum> level = std::nullopt);
  bool remote() const { return remote_ != nullptr; }

  TestService service;
  std::vector<std::unique_ptr<rpc::Service>> hosted;  // As `hosts` says.
  rpc::Server server;
  std::string uri;

 private:
  struct Remote;
  std::unique_ptr<Remote> remote_;
};
// True when TestServers run on the other host (RDMARPC_TEST_PEER).
bool RemoteServers();
// The ServerOptions a remote TestServer passes to tests/test_server, each
// as `--NAME VALUE`: one list, read by both sides.
struct ServerOptionFlag {
  const char* name;
  long long (*get)(const rpc::ServerOptions&);
  void (*set)(rpc::ServerOptions&, long long);
};
std::span<const ServerOptionFlag> ServerOptionFlags();
// The environment variable's value; throws std::runtime_error naming it if
// it is unset or empty.
std::string RequireEnv(const char* name);

// Polls `condition` until true or `timeout`; returns its last value.
template <typename F>
bool WaitFor(F condition, std::chrono::milliseconds timeout = 10s) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return condition();
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

}  // namespace rdmarpc::testing

#endif  // RDMARPC_TESTS_TEST_SUPPORT_H_
