// Interceptors (include/rdmarpc/interceptor.h): chains on both sides that see
// each call and stream with its metadata, reject it, rewrite its metadata and
// observe its end; the token check and the logging interceptor rdmarpc ships.
// Over tcp:// natively; over rdma:// in the VM suite (RDMARPC_TEST_TRANSPORT).
#include "rdmarpc/interceptor.h"

#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/log.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/server.h"
#include "tests/support/test_support.h"

namespace rdmarpc::testing {
namespace {

using namespace std::chrono_literals;
using rpc::ClientCallInfo;
using rpc::Payload;
using rpc::ServerCall;
using rpc::StreamKind;

constexpr rpc::MethodRef kHeaders("test.Icpt", "Headers");
constexpr rpc::MethodRef kFail("test.Icpt", "Fail");
constexpr rpc::MethodRef kCount("test.Icpt", "Count");

// Headers: the request headers it sees, "key=value;" each, as its response.
// Fail: NOT_FOUND. Count: server-streaming, two messages.
struct IcptService : rpc::Service {
  std::atomic<int> handled{0};
  IcptService() : rpc::Service("test.Icpt") {
    AddMethod("Headers", [this](std::shared_ptr<ServerCall> call) {
      handled++;
      std::string seen;
      for (const auto& [key, value] : call->request_metadata()) {
        seen += key + "=" + value + ";";
      }
      call->Finish(Status(), Buffer::CopyOf(std::string_view(seen)));
    });
    AddMethod("Fail", [this](std::shared_ptr<ServerCall> call) {
      handled++;
      call->Finish(Status(StatusCode::kNotFound, "no such thing"));
    });
    AddStreamingMethod(
        "Count", StreamKind::kServerStreaming,
        [this](std::shared_ptr<ServerCall> call) {
          handled++;
          call->Write(Payload(Buffer::CopyOf(std::string_view("0"))),
                      [call](const Status&) {
                        call->Write(
                            Payload(Buffer::CopyOf(std::string_view("1"))),
                            [call](const Status&) { call->Finish(Status()); });
                      });
        });
  }
};

// What a recording interceptor saw, in order: "<name> call <method>",
// "<name> end <method> <CODE>".
struct Journal {
  std::mutex mu;
  std::vector<std::string> lines;
  void Add(std::string line) {
    std::lock_guard lock(mu);
    lines.push_back(std::move(line));
  }
  size_t size() {
    std::lock_guard lock(mu);
    return lines.size();
  }
  std::vector<std::string> Take() {
    std::lock_guard lock(mu);
    return std::exchange(lines, {});
  }
};

// Server side: records; stamps "seen-by-<name>" into the response
// trailers; refuses calls whose "refuse" header names it; rewrites
// "trace-id" to its value + "0".
struct RecordingServer : rpc::ServerInterceptor {
  RecordingServer(std::string interceptor_name, Journal* to)
      : name(std::move(interceptor_name)), journal(to) {}
  Status OnCall(ServerCall& call) override {
    journal->Add(name + " call " + call.method());
    if (call.request_metadata().Get("refuse") == name) {
      return Status(StatusCode::kPermissionDenied, name + " says no");
    }
    rpc::Metadata& headers = call.mutable_request_metadata();
    if (auto trace = headers.Get("trace-id")) {
      std::string rewritten = std::string(*trace) + "0";
      headers.Remove("trace-id");
      headers.Add("trace-id", rewritten);
    }
    call.response_trailers().Add("seen-by-" + name, "yes");
    return Status();
  }
  void OnEnd(const ServerCall& call, const Status& status,
             std::chrono::nanoseconds) override {
    journal->Add(name + " end " + call.method() + " " +
                 std::string(StatusCodeName(status.code())));
  }
  std::string name;
  Journal* journal;
};

// Client side: records; adds "trace-id: 7" unless it is there; refuses a
// call when told to.
struct RecordingClient : rpc::ClientInterceptor {
  RecordingClient(std::string interceptor_name, Journal* to)
      : name(std::move(interceptor_name)), journal(to) {}
  Status OnCall(const ClientCallInfo& call,
                rpc::CallOptions& options) override {
    journal->Add(name + " call " + std::string(call.method));
    if (refuse)
      return Status(StatusCode::kFailedPrecondition, name + " refuses");
    if (!options.metadata.Get("trace-id"))
      options.metadata.Add("trace-id", "7");
    return Status();
  }
  void OnEnd(const ClientCallInfo& call, const Status& status,
             std::chrono::nanoseconds) override {
    journal->Add(name + " end " + std::string(call.method) + " " +
                 std::string(StatusCodeName(status.code())));
  }
  std::string name;
  Journal* journal;
  std::atomic<bool> refuse{false};
};

// The lines of one side's interceptors ('c' or 's'), in order.
std::vector<std::string> Side(const std::vector<std::string>& lines,
                              char side) {
  std::vector<std::string> out;
  for (const std::string& line : lines) {
    if (line.front() == side) out.push_back(line);
  }
  return out;
}

struct Fixture {
  IcptService service;
  rpc::Server server;
  std::unique_ptr<rpc::Channel> channel;
  Fixture(rpc::ServerOptions options, rpc::ChannelOptions channel_options)
      : server(std::move(options)) {
    server.RegisterService(&service);
    auto bound = server.Listen(ListenUri());
    REQUIRE(bound.ok());
    channel =
        std::make_unique<rpc::Channel>(*bound, std::move(channel_options));
  }
  CallResult Call(const rpc::MethodRef& method, rpc::Metadata metadata = {},
                  rpc::ResponseMetadata* back = nullptr) {
    rpc::CallOptions options = rpc::CallOptions::WithTimeout(30s);
    options.metadata = std::move(metadata);
    options.response_metadata = std::make_shared<rpc::ResponseMetadata>();
    CallResult result = CallSync(*channel, method, "", options);
    if (back != nullptr) *back = *options.response_metadata;
    return result;
  }
};

TEST_CASE("interceptors: a token check refuses calls without the token") {
  auto check = std::make_shared<rpc::TokenServerInterceptor>("s3cret");
  rpc::ServerOptions options;
  options.interceptors.push_back(check);
  Fixture f(options, {});
  CallResult result = f.Call(kHeaders);
  CHECK(result.status.code() == StatusCode::kUnauthenticated);
  CHECK(result.status.message() == "the call carries no authorization token");

  rpc::Metadata wrong;
  wrong.Add("authorization", "Bearer guess");
  result = f.Call(kHeaders, wrong);
  CHECK(result.status.code() == StatusCode::kUnauthenticated);
  CHECK(result.status.message() == "the call's authorization token is wrong");
  CHECK(f.service.handled == 0);
  CHECK(check->refused() == 2);

  // A channel with the token: through, and the handler never sees it.
  rpc::ChannelOptions channel_options;
  channel_options.interceptors.push_back(
      std::make_shared<rpc::TokenClientInterceptor>("s3cret"));
  rpc::Channel authorized(f.channel->target(), channel_options);
  rpc::CallOptions call_options = rpc::CallOptions::WithTimeout(30s);
  call_options.metadata.Add("tenant", "blue");
  result = CallSync(authorized, kHeaders, "", call_options);
  REQUIRE(result.status.ok());
  CHECK(result.response == "tenant=blue;");
  CHECK(f.service.handled == 1);
  // Streams are checked too.
  auto stream = f.channel->OpenStream(kCount, StreamKind::kServerStreaming,
                                      rpc::CallOptions::WithTimeout(30s));
  std::promise<Status> ended;
  stream->Finish(
      [&](const Status& status, Payload) { ended.set_value(status); });
  CHECK(ended.get_future().get().code() == StatusCode::kUnauthenticated);
  CHECK(check->refused() == 3);
}

TEST_CASE("interceptors: chains run in order, rewrite metadata, see the end") {
  Journal journal;
  rpc::ServerOptions options;
  options.interceptors.push_back(
      std::make_shared<RecordingServer>("s1", &journal));
  options.interceptors.push_back(
      std::make_shared<RecordingServer>("s2", &journal));
  rpc::ChannelOptions channel_options;
  auto c1 = std::make_shared<RecordingClient>("c1", &journal);
  channel_options.interceptors.push_back(c1);
  Fixture f(options, channel_options);

  rpc::ResponseMetadata back;
  CallResult result = f.Call(kHeaders, {}, &back);
  REQUIRE(result.status.ok());
  // c1 added trace-id 7; s1 and s2 each appended a 0.
  CHECK(result.response == "trace-id=700;");
  CHECK(back.trailers.Get("seen-by-s1") == "yes");
  CHECK(back.trailers.Get("seen-by-s2") == "yes");
  // Each side's chain in order. (The server's OnEnds run once the response
  // has left, so they may come after the client's.)
  CHECK(WaitFor([&] { return journal.size() == 6; }));
  std::vector<std::string> lines = journal.Take();
  CHECK(Side(lines, 's') ==
        std::vector<std::string>{"s1 call Headers", "s2 call Headers",
                                 "s1 end Headers OK", "s2 end Headers OK"});
  CHECK(Side(lines, 'c') ==
        std::vector<std::string>{"c1 call Headers", "c1 end Headers OK"});

  // A handler's error reaches every OnEnd.
  result = f.Call(kFail);
  CHECK(result.status.code() == StatusCode::kNotFound);
  CHECK(WaitFor([&] { return journal.size() == 6; }));
  lines = journal.Take();
  CHECK(Side(lines, 'c').back() == "c1 end Fail NOT_FOUND");
  CHECK(Side(lines, 's').back() == "s2 end Fail NOT_FOUND");

  // s1 refuses: s2 and the handler never see the call, and no server
  // interceptor's OnEnd runs (none let it through).
  const int handled = f.service.handled;
  rpc::Metadata refuse;
  refuse.Add("refuse", "s1");
  result = f.Call(kHeaders, refuse);
  CHECK(result.status.code() == StatusCode::kPermissionDenied);
  CHECK(result.status.message() == "s1 says no");
  CHECK(f.service.handled == handled);
  CHECK(WaitFor([&] { return journal.size() == 3; }));
  CHECK(journal.Take() ==
        std::vector<std::string>{"c1 call Headers", "s1 call Headers",
                                 "c1 end Headers PERMISSION_DENIED"});

  // The client's interceptor refuses: the call fails locally.
  c1->refuse = true;
  result = f.Call(kHeaders);
  CHECK(result.status.code() == StatusCode::kFailedPrecondition);
  CHECK(result.status.message() == "c1 refuses");
  CHECK(f.service.handled == handled);
  c1->refuse = false;

  // A stream is seen, with its kind, and its end.
  journal.Take();
  auto stream = f.channel->OpenStream(kCount, StreamKind::kServerStreaming,
                                      rpc::CallOptions::WithTimeout(30s));
  for (int i = 0; i < 3; ++i) {
    std::promise<bool> read;
    stream->Read([&](const Status&, std::optional<Payload> message) {
      read.set_value(message.has_value());
    });
    CHECK(read.get_future().get() == (i < 2));
  }
  std::promise<Status> ended;
  stream->Finish(
      [&](const Status& status, Payload) { ended.set_value(status); });
  CHECK(ended.get_future().get().ok());
  CHECK(stream->response_trailers().Get("seen-by-s2") == "yes");
  CHECK(WaitFor([&] { return journal.size() == 6; }));
  lines = journal.Take();
  CHECK(Side(lines, 'c') ==
        std::vector<std::string>{"c1 call Count", "c1 end Count OK"});
  CHECK(Side(lines, 's').back() == "s2 end Count OK");
}

TEST_CASE("interceptors: the logging interceptor logs each call's end") {
  rpc::ServerOptions options;
  options.interceptors.push_back(
      std::make_shared<rpc::LoggingServerInterceptor>());
  Fixture f(options, {});
  // Info, whatever RDMARPC_LOG says (the VM suite runs at warn).
  const auto level = Log().level();
  Log().set_level(spdlog::level::info);
  LogCapture log;
  CHECK(f.Call(kHeaders).status.ok());
  CHECK(f.Call(kFail).status.code() == StatusCode::kNotFound);
  CHECK(WaitFor([&] {
    return log.Contains(spdlog::level::info,
                        "test.Icpt/Headers unary -> OK in ") &&
           log.Contains(spdlog::level::info,
                        "test.Icpt/Fail unary -> NOT_FOUND in ");
  }));
  CHECK(log.Contains("(request 0 bytes): no such thing"));
  Log().set_level(level);
}

}  // namespace
}  // namespace rdmarpc::testing
