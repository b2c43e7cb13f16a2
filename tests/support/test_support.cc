#include "tests/support/test_support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <spdlog/sinks/base_sink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdlib>
#include <fstream>
#include <future>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/log.h"
#include "base/log_throttle.h"
#include "rdmarpc/interceptor.h"
#include "rdmarpc/introspection.h"
#include "rdmarpc/metadata.h"
#include "rpc/wire/wire_codec.h"
#include "tests/support/typed_services.h"
#include "transport/connection.h"
#include "transport/rdma/cm_channel.h"
#include "transport/rdma/verbs.h"

namespace rdmarpc::testing {
namespace {

class CaptureSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  void Clear() {
    std::lock_guard lock(mutex_);
    lines_.clear();
  }
  size_t Count(std::string_view text) {
    std::lock_guard lock(mutex_);
    size_t n = 0;
    for (const auto& [at, line] : lines_) {
      n += line.find(text) != std::string::npos ? 1 : 0;
    }
    return n;
  }
  bool Contains(std::optional<spdlog::level::level_enum> level,
                std::string_view text) {
    std::lock_guard lock(mutex_);
    for (const auto& [at, line] : lines_) {
      if ((!level || at == *level) && line.find(text) != std::string::npos) {
        return true;
      }
    }
    return false;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    lines_.emplace_back(msg.level,
                        std::string(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override {}

 private:
  // Guarded by base_sink's mutex_.
  std::vector<std::pair<spdlog::level::level_enum, std::string>> lines_;
};

CaptureSink& Captured() {
  static const auto sink = [] {
    auto s = std::make_shared<CaptureSink>();
    Log().sinks().push_back(s);
    return s;
  }();
  return *sink;
}
[[maybe_unused]] const bool kCaptureInstalled = (Captured(), true);

}  // namespace

LogCapture::LogCapture() { Captured().Clear(); }
bool LogCapture::Contains(std::string_view text) const {
  return Captured().Contains(std::nullopt, text);
}
size_t LogCapture::Count(std::string_view text) const {
  return Captured().Count(text);
}
bool LogCapture::Contains(spdlog::level::level_enum level,
                          std::string_view text) const {
  return Captured().Contains(level, text);
}

LoopbackListener::LoopbackListener() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (fd_ < 0 ||
      bind(fd_, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      listen(fd_, 8) != 0 ||
      getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    if (fd_ >= 0) close(fd_);
    throw std::runtime_error("cannot listen on 127.0.0.1");
  }
  port_ = ntohs(address.sin_port);
}

LoopbackListener::~LoopbackListener() { close(fd_); }

std::string LoopbackListener::uri() const {
  return "tcp://127.0.0.1:" + std::to_string(port_);
}

int LoopbackListener::Accept() const { return accept(fd_, nullptr, nullptr); }

uint64_t RegisteredBytes() { return transport::rdma::LiveRegisteredBytes(); }
uint64_t ParkedCmIds() { return transport::rdma::CmChannel::ParkedIds(); }

bool OverRdma() {
  const char* transport = std::getenv("RDMARPC_TEST_TRANSPORT");
  return transport != nullptr && std::string(transport) == "rdma";
}

std::string ListenUri() {
  const char* transport = std::getenv("RDMARPC_TEST_TRANSPORT");
  if (transport == nullptr || std::string(transport) == "tcp") {
    return "tcp://127.0.0.1:0";
  }
  const char* ip = std::getenv("RXE_IP");
  if (ip == nullptr) {
    throw std::runtime_error(
        "RDMARPC_TEST_TRANSPORT=" + std::string(transport) +
        " needs RXE_IP (run under tools/softroce/run)");
  }
  return std::string(transport) + "://" + ip + ":0";
}

namespace {

// The answer of Bytes and GatedBytes: as many bytes as the request's decimal
// number says, in a pattern.
Buffer BytesAsked(const rpc::ServerCall& call) {
  const size_t n = std::stoull(std::string(call.request().view()));
  Buffer out = Buffer::Allocate(n);
  for (size_t i = 0; i < n; ++i) out.data()[i] = std::byte(i * 7);
  return out;
}

}  // namespace

TestService::TestService() : rpc::Service("test.Test") {
  using rpc::ServerCall;
  auto count = [this] { calls_started++; };
  AddMethod("Echo", [count](std::shared_ptr<ServerCall> call) {
    count();
    call->Finish(Status(), Buffer::CopyOf(call->request().span()));
  });
  AddMethod("Fail", [count](std::shared_ptr<ServerCall> call) {
    count();
    const std::string text(call->request().view());
    const size_t colon = text.find(':');
    const int code = std::stoi(text.substr(0, colon));
    call->Finish(Status(static_cast<StatusCode>(code), text.substr(colon + 1)));
  });
  AddMethod("BlockMs", [count](std::shared_ptr<ServerCall> call) {
    count();
    // Holds the worker thread: its connections are not read meanwhile.
    const int ms = std::stoi(std::string(call->request().view()));
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    call->Finish(Status(), Buffer::CopyOf(std::string_view("blocked")));
  });
  AddMethod("SleepMs", [this, count](std::shared_ptr<ServerCall> call) {
    count();
    const int ms = std::stoi(std::string(call->request().view()));
    auto timer = std::make_shared<boost::asio::steady_timer>(
        timers_.context(), std::chrono::milliseconds(ms));
    timer->async_wait([timer, call](const boost::system::error_code&) {
      call->Finish(Status(), Buffer::CopyOf(std::string_view("slept")));
    });
  });
  AddMethod("Deadline", [count](std::shared_ptr<ServerCall> call) {
    count();
    std::string answer = "none";
    if (call->deadline()) {
      answer =
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                             *call->deadline() - rpc::Clock::now())
                             .count());
    }
    call->Finish(Status(), Buffer::CopyOf(answer));
  });
  // A client stream it never reads: open until cancelled.
  AddStreamingMethod(
      "Hold", rpc::StreamKind::kClientStreaming,
      [count](std::shared_ptr<ServerCall> call) {
        count();
        call->OnCancel([call] {
          call->Finish(Status(StatusCode::kCancelled, "observed cancel"));
        });
      });
  AddMethod("WaitCancel", [this, count](std::shared_ptr<ServerCall> call) {
    count();
    // The callback holds the call: it stays open until cancelled.
    call->OnCancel([this, call] {
      cancels_observed++;
      call->Finish(Status(StatusCode::kCancelled, "observed cancel"));
    });
  });
  AddMethod("Bytes", [count](std::shared_ptr<ServerCall> call) {
    count();
    call->Finish(Status(), BytesAsked(*call));
  });
  AddMethod("GatedBytes", [this, count](std::shared_ptr<ServerCall> call) {
    count();
    std::lock_guard lock(gate_mutex_);
    gated_.push_back(std::move(call));
  });
  AddMethod("Drop", [count](std::shared_ptr<ServerCall>) { count(); });
}

TestService::~TestService() { timers_.Stop(); }

size_t TestService::gated_calls() {
  std::lock_guard lock(gate_mutex_);
  return gated_.size();
}

void TestService::OpenGate() {
  std::vector<std::shared_ptr<rpc::ServerCall>> calls;
  {
    std::lock_guard lock(gate_mutex_);
    calls.swap(gated_);
  }
  for (auto& call : calls) call->Finish(Status(), BytesAsked(*call));
}

LoopHold::LoopHold(rpc::Channel& channel, std::chrono::milliseconds limit) {
  channel.Call("test.Test", "Echo", Buffer::CopyOf(std::string_view("hold")),
               rpc::CallOptions{},
               [state = state_, limit](const Status&, Buffer) {
                 state->holding = true;
                 WaitFor([&] { return state->released.load(); }, limit);
               });
}

bool LoopHold::WaitHeld() {
  return WaitFor([&] { return state_->holding.load(); });
}

void LoopHold::Release() { state_->released = true; }

CallResult CallSync(rpc::Channel& channel, std::string_view method,
                    std::string request, rpc::CallOptions options,
                    std::string_view service) {
  std::promise<CallResult> result;
  channel.Call(service, method, Buffer::CopyOf(request), options,
               [&result](const Status& status, Buffer response) {
                 result.set_value({status, std::string(response.view())});
               });
  return result.get_future().get();
}

CallResult CallSync(rpc::Channel& channel, const rpc::MethodRef& method,
                    std::string request, rpc::CallOptions options) {
  std::promise<CallResult> result;
  channel.Call(method, Buffer::CopyOf(request), options,
               [&result](const Status& status, Buffer response) {
                 result.set_value({status, std::string(response.view())});
               });
  return result.get_future().get();
}

bool RemoteServers() { return std::getenv("RDMARPC_TEST_PEER") != nullptr; }

std::span<const ServerOptionFlag> ServerOptionFlags() {
  using rpc::ServerOptions;
  using std::chrono::milliseconds;
  static constexpr ServerOptionFlag kFlags[] = {
      {"workers", [](const ServerOptions& o) -> long long { return o.workers; },
       [](ServerOptions& o, long long v) { o.workers = static_cast<int>(v); }},
      {"max-concurrency",
       [](const ServerOptions& o) -> long long { return o.max_concurrency; },
       [](ServerOptions& o, long long v) {
         o.max_concurrency = static_cast<uint32_t>(v);
       }},
      {"handler-threads",
       [](const ServerOptions& o) -> long long { return o.handler_threads; },
       [](ServerOptions& o, long long v) {
         o.handler_threads = static_cast<int>(v);
       }},
      {"max-payload",
       [](const ServerOptions& o) -> long long {
         return o.transport.max_payload_size;
       },
       [](ServerOptions& o, long long v) { o.transport.max_payload_size = v; }},
      {"max-grant-bytes",
       [](const ServerOptions& o) -> long long {
         return o.transport.max_grant_bytes;
       },
       [](ServerOptions& o, long long v) { o.transport.max_grant_bytes = v; }},
      {"pooled-grants",
       [](const ServerOptions& o) -> long long {
         return o.transport.rdma_pooled_grants ? 1 : 0;
       },
       [](ServerOptions& o, long long v) {
         o.transport.rdma_pooled_grants = v != 0;
       }},
      {"max-queued-bytes",
       [](const ServerOptions& o) -> long long {
         return o.transport.max_queued_bytes;
       },
       [](ServerOptions& o, long long v) { o.transport.max_queued_bytes = v; }},
      {"max-response",
       [](const ServerOptions& o) -> long long { return o.max_response_size; },
       [](ServerOptions& o, long long v) { o.max_response_size = v; }},
      {"max-calls",
       [](const ServerOptions& o) -> long long {
         return o.max_calls_per_connection;
       },
       [](ServerOptions& o, long long v) {
         o.max_calls_per_connection = static_cast<uint32_t>(v);
       }},
      {"max-connections",
       [](const ServerOptions& o) -> long long { return o.max_connections; },
       [](ServerOptions& o, long long v) {
         o.max_connections = static_cast<uint32_t>(v);
       }},
      {"poll-mode",
       [](const ServerOptions& o) -> long long {
         return static_cast<long long>(o.transport.poll_mode);
       },
       [](ServerOptions& o, long long v) {
         o.transport.poll_mode = static_cast<transport::PollMode>(v);
       }},
      {"keepalive-ms",
       [](const ServerOptions& o) -> long long {
         return o.transport.keepalive_interval.count();
       },
       [](ServerOptions& o, long long v) {
         o.transport.keepalive_interval = milliseconds(v);
       }},
      {"keepalive-timeout-ms",
       [](const ServerOptions& o) -> long long {
         return o.transport.keepalive_timeout.count();
       },
       [](ServerOptions& o, long long v) {
         o.transport.keepalive_timeout = milliseconds(v);
       }},
      {"max-conns-per-peer",
       [](const ServerOptions& o) -> long long {
         return o.max_connections_per_peer;
       },
       [](ServerOptions& o, long long v) {
         o.max_connections_per_peer = static_cast<uint32_t>(v);
       }},
      {"min-ping-ms",
       [](const ServerOptions& o) -> long long {
         return o.transport.min_ping_interval.count();
       },
       [](ServerOptions& o, long long v) {
         o.transport.min_ping_interval = milliseconds(v);
       }},
      {"max-connection-idle-ms",
       [](const ServerOptions& o) -> long long {
         return o.max_connection_idle.count();
       },
       [](ServerOptions& o, long long v) {
         o.max_connection_idle = milliseconds(v);
       }},
      {"max-connection-age-ms",
       [](const ServerOptions& o) -> long long {
         return o.max_connection_age.count();
       },
       [](ServerOptions& o, long long v) {
         o.max_connection_age = milliseconds(v);
       }},
      {"max-connection-age-grace-ms",
       [](const ServerOptions& o) -> long long {
         return o.max_connection_age_grace.count();
       },
       [](ServerOptions& o, long long v) {
         o.max_connection_age_grace = milliseconds(v);
       }},
      {"goaway-answer-ms",
       [](const ServerOptions& o) -> long long {
         return o.goaway_answer_timeout.count();
       },
       [](ServerOptions& o, long long v) {
         o.goaway_answer_timeout = milliseconds(v);
       }},
  };
  return kFlags;
}

std::string TokenMetadata(std::string_view token) {
  if (token.empty()) return {};
  Metadata headers;
  headers.Add(std::string(kAuthorizationKey), "Bearer " + std::string(token));
  return *rpc::EncodeOutgoingMetadata(headers, "headers");
}

std::string RequireEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    throw std::runtime_error(std::string(name) +
                             " is unset: tools/softroce/run (or run2, and the "
                             "two-host suite for RDMARPC_TEST_*) sets it");
  }
  return value;
}

namespace {

// `text` quoted for bash.
std::string Quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace

// A tests/test_server process on the other host.
struct TestServer::Remote {
  std::string peerctl;  // "PEERCTL DIR", for `peerctl ACTION DIR ...`.
  std::string name;     // Its peerctl name.
  std::unique_ptr<rpc::Channel> control;

  std::string Peerctl(const std::string& action) const {
    const auto space = peerctl.find(' ');
    return peerctl.substr(0, space) + " " + action + " " +
           peerctl.substr(space + 1);
  }
  CallResult Control(std::string_view method, std::string request = "") {
    return CallSync(*control, method, std::move(request),
                    rpc::CallOptions::WithTimeout(30s), "test.Control");
  }
  std::vector<long long> Stats() {
    const CallResult result = Control("Stats");
    if (!result.status.ok()) {
      throw std::runtime_error("the test server's Stats: " +
                               result.status.ToString());
    }
    std::vector<long long> values;
    std::istringstream in(result.response);
    for (long long v; in >> v;) values.push_back(v);
    values.resize(14);  // As many as the test server sends.
    return values;
  }
};

void HostServices(rpc::Server& server, TestService& service, unsigned hosts,
                  std::vector<std::unique_ptr<rpc::Service>>& keep) {
  server.RegisterService(&service);
  if (hosts & kHostCalculator) keep.push_back(MakeCalculator());
  if (hosts & kHostClock) keep.push_back(MakeClock());
  if (hosts & kHostBlob) keep.push_back(MakeBlob());
  for (const auto& hosted : keep) server.RegisterService(hosted.get());
  if (hosts & kHostIntrospection) rpc::EnableIntrospection(server);
}

TestServer::TestServer(rpc::ServerOptions options, std::string listen,
                       unsigned hosts)
    : server(RemoteServers() ? rpc::ServerOptions{} : options) {
  // A test's server logs as a fresh process's would: nothing held back
  // for what an earlier test's server logged (base/log_throttle.h).
  ForgetThrottledLogs();
  if (!RemoteServers()) {
    HostServices(server, service, hosts, hosted);
    auto bound = server.Listen(listen.empty() ? ListenUri() : listen);
    if (!bound.ok()) {
      throw std::runtime_error("listen failed: " + bound.status().ToString());
    }
    uri = *bound;
    return;
  }
  static std::atomic<int> count{0};
  remote_ = std::make_unique<Remote>();
  const std::string dir = RequireEnv("RDMARPC_TEST_PEER");
  const std::string peer_ip = RequireEnv("PEER_IP");
  remote_->peerctl = RequireEnv("RDMARPC_TEST_PEERCTL") + " " + dir;
  remote_->name =
      "test_server_" + std::to_string(getpid()) + "_" + std::to_string(count++);
  std::string command =
      "RDMARPC_LOG=info " + RequireEnv("RDMARPC_TEST_SERVER_BIN") + " --uri " +
      (listen.empty() ? (OverRdma() ? "rdma://" : "tcp://") + peer_ip + ":0"
                      : listen) +
      " --control tcp://" + peer_ip + ":0 --hosts " + std::to_string(hosts);
  for (const ServerOptionFlag& flag : ServerOptionFlags()) {
    command += std::string(" --") + flag.name + " " +
               std::to_string(flag.get(options));
  }
  const std::string start =
      remote_->Peerctl("start") + " " + remote_->name + " " + Quote(command);
  if (std::system(start.c_str()) != 0) {
    throw std::runtime_error("cannot start the test server: " + start);
  }
  std::string control_uri;
  const auto until = std::chrono::steady_clock::now() + 60s;
  while ((uri.empty() || control_uri.empty()) &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(50ms);
    std::ifstream log(dir + "/" + remote_->name + ".log");
    for (std::string line; std::getline(log, line);) {
      if (line.rfind("uri ", 0) == 0) uri = line.substr(4);
      if (line.rfind("control ", 0) == 0) control_uri = line.substr(8);
    }
  }
  if (uri.empty() || control_uri.empty()) {
    throw std::runtime_error(
        "the test server on the other host did not "
        "start; see " +
        dir + "/" + remote_->name + ".log");
  }
  remote_->control = std::make_unique<rpc::Channel>(control_uri);
}

TestServer::~TestServer() {
  if (!remote_) return;
  // Stopped as the in-process server would be (no grace), then gone; if the
  // control is lost, killed.
  if (!remote_->Control("Exit").status.ok()) {
    [[maybe_unused]] int rc = std::system(
        (remote_->Peerctl("signal") + " " + remote_->name + " KILL").c_str());
  }
}

int TestServer::calls_started() {
  return remote_ ? static_cast<int>(remote_->Stats()[0])
                 : service.calls_started.load();
}

int TestServer::cancels_observed() {
  return remote_ ? static_cast<int>(remote_->Stats()[1])
                 : service.cancels_observed.load();
}

rpc::ServerStats TestServer::stats() {
  if (!remote_) return server.stats();
  const std::vector<long long> v = remote_->Stats();
  rpc::ServerStats stats;
  stats.connections = v[2];
  stats.live_calls = v[3];
  stats.responses_dropped = v[4];
  stats.protocol_errors = v[5];
  stats.unknown_method_calls = v[6];
  stats.calls_started = v[7];
  stats.calls_over_limit = v[8];
  stats.connections_refused = v[9];
  stats.peers_timed_out = v[10];
  stats.calls_shed = v[12];
  stats.connections_recycled = v[13];
  return stats;
}

uint64_t TestServer::keepalive_pings() {
  if (remote_) return remote_->Stats()[11];
  uint64_t pings = 0;
  server.ForEachConnection([&](const transport::Connection& c) {
    pings += c.stats().keepalive_pings;
  });
  return pings;
}

bool TestServer::Logged(const LogCapture& log, std::string_view text,
                        std::optional<spdlog::level::level_enum> level) {
  if (!remote_) return level ? log.Contains(*level, text) : log.Contains(text);
  const std::string dir = RequireEnv("RDMARPC_TEST_PEER");
  std::ifstream in(dir + "/" + remote_->name + ".log");
  const std::string tag =
      level ? "[" +
                  std::string(spdlog::level::to_string_view(*level).data(),
                              spdlog::level::to_string_view(*level).size()) +
                  "]"
            : "";
  for (std::string line; std::getline(in, line);) {
    if (line.find(text) != std::string::npos &&
        line.find(tag) != std::string::npos) {
      return true;
    }
  }
  return false;
}

void TestServer::Shutdown(std::chrono::milliseconds grace) {
  if (!remote_) return server.Shutdown(grace);
  const CallResult result =
      remote_->Control("Shutdown", std::to_string(grace.count()));
  if (!result.status.ok()) {
    throw std::runtime_error("the test server's Shutdown: " +
                             result.status.ToString());
  }
}

}  // namespace rdmarpc::testing
