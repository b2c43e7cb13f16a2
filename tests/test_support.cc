#include "tests/test_support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <spdlog/sinks/base_sink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdlib>
#include <future>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/log.h"
#include "transport/rdma/verbs.h"

namespace rdmarpc::testing {
namespace {

class CaptureSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  void Clear() {
    std::lock_guard lock(mutex_);
    lines_.clear();
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
    const size_t n = std::stoull(std::string(call->request().view()));
    Buffer out = Buffer::Allocate(n);
    for (size_t i = 0; i < n; ++i) out.data()[i] = std::byte(i * 7);
    call->Finish(Status(), std::move(out));
  });
  AddMethod("Drop", [count](std::shared_ptr<ServerCall>) { count(); });
}

TestService::~TestService() { timers_.Stop(); }

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

TestServer::TestServer(rpc::ServerOptions options)
    : server(std::move(options)) {
  server.RegisterService(&service);
  auto bound = server.Listen(ListenUri());
  if (!bound.ok()) {
    throw std::runtime_error("listen failed: " + bound.status().ToString());
  }
  uri = *bound;
}

}  // namespace rdmarpc::testing
