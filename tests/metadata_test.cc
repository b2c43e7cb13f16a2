// Call metadata (include/rdmarpc/metadata.h): request headers, response headers
// and trailers, text and binary, on unary and streaming calls, generic and
// typed; the limits at both ends. Over tcp:// natively; over rdma:// in the
// VM suite (RDMARPC_TEST_TRANSPORT). Raw frames a Channel would never send
// (a malformed block) are in rpc_semantics_test, "metadata: ...".
#include <boost/asio/use_future.hpp>
#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "rdmarpc/channel.h"
#include "rdmarpc/server.h"
#include "rdmarpc/tunables.h"
#include "rdmarpc/typed_stream.h"
#include "tests/proto/multi.rdmarpc.h"
#include "tests/proto/stream.rdmarpc.h"
#include "tests/support/test_support.h"

namespace rdmarpc::testing {
namespace {

using namespace std::chrono_literals;
using rpc::Metadata;
using rpc::Payload;
using rpc::ServerCall;
using rpc::StreamKind;

constexpr rpc::MethodRef kReflect("test.Meta", "Reflect");
constexpr rpc::MethodRef kTrailer("test.Meta", "Trailer");
constexpr rpc::MethodRef kBadKey("test.Meta", "BadKey");
constexpr rpc::MethodRef kFail("test.Meta", "Fail");
constexpr rpc::MethodRef kCount("test.Meta", "Count");

const std::string kBinary("\x00\xff\x01\n", 4);

// Reflect: the request's headers back as response headers, in order, and
// their number as the trailer "count".
// Trailer: a trailer "big" of as many bytes as the request says.
// BadKey: a response header whose key breaks the rules.
// Fail: FAILED_PRECONDITION, with a trailer "why" beside it.
// Count: server-streaming, the request's number of messages; header "h"
// before the first, trailer "t" at the end.
struct MetaService : rpc::Service {
  MetaService() : rpc::Service("test.Meta") {
    AddMethod("Reflect", [](std::shared_ptr<ServerCall> call) {
      for (const auto& [key, value] : call->request_metadata()) {
        call->response_headers().Add(key, value);
      }
      call->response_trailers().Add(
          "count", std::to_string(call->request_metadata().size()));
      call->Finish(Status(), Buffer::CopyOf(std::string_view("ok")));
    });
    AddMethod("Trailer", [](std::shared_ptr<ServerCall> call) {
      const size_t size = std::stoul(std::string(call->request().view()));
      call->response_trailers().Add("big", std::string(size, 'b'));
      call->Finish(Status(), Buffer());
    });
    AddMethod("BadKey", [](std::shared_ptr<ServerCall> call) {
      call->response_headers().Add("Not A Key", "v");
      call->Finish(Status(), Buffer());
    });
    AddMethod("Fail", [](std::shared_ptr<ServerCall> call) {
      call->response_trailers().Add("why", "no room");
      call->Finish(Status(StatusCode::kFailedPrecondition, "full"));
    });
    AddStreamingMethod("Count", StreamKind::kServerStreaming,
                       [](std::shared_ptr<ServerCall> call) {
                         call->response_headers().Add("h", "1");
                         const int n =
                             std::stoi(std::string(call->request().view()));
                         WriteFrom(std::move(call), 0, n);
                       });
  }
  static void WriteFrom(std::shared_ptr<ServerCall> call, int next, int n) {
    if (next == n) {
      call->response_trailers().Add("t", "done");
      return call->Finish(Status());
    }
    call->Write(Payload(Buffer::CopyOf(std::string_view(std::to_string(next)))),
                [call, next, n](const Status& status) mutable {
                  if (status.ok()) WriteFrom(std::move(call), next + 1, n);
                });
  }
};

struct Fixture {
  MetaService service;
  rpc::Server server;
  std::unique_ptr<rpc::Channel> channel;
  explicit Fixture(rpc::ServerOptions options = {},
                   rpc::ChannelOptions channel_options = {})
      : server(options) {
    server.RegisterService(&service);
    auto bound = server.Listen(ListenUri());
    REQUIRE(bound.ok());
    channel = std::make_unique<rpc::Channel>(*bound, channel_options);
  }
  // One call with `metadata`; the response's metadata in `*response`.
  CallResult Call(const rpc::MethodRef& method, std::string request,
                  Metadata metadata = {},
                  rpc::ResponseMetadata* response = nullptr) {
    rpc::CallOptions options = rpc::CallOptions::WithTimeout(30s);
    options.metadata = std::move(metadata);
    options.response_metadata = std::make_shared<rpc::ResponseMetadata>();
    CallResult result = CallSync(*channel, method, std::move(request), options);
    if (response != nullptr) *response = *options.response_metadata;
    return result;
  }
};

TEST_CASE("metadata: request headers, response headers and trailers") {
  Fixture f;
  Metadata sent;
  sent.Add("tenant", "blue");
  sent.Add("trace-bin", kBinary);
  sent.Add("tenant", "green");  // Keys repeat, in order.
  rpc::ResponseMetadata back;
  const CallResult result = f.Call(kReflect, "", sent, &back);
  REQUIRE(result.status.ok());
  CHECK(result.response == "ok");
  CHECK(back.headers == sent);
  CHECK(back.headers.GetAll("tenant") ==
        std::vector<std::string_view>{"blue", "green"});
  CHECK(back.headers.Get("trace-bin") == kBinary);
  CHECK(back.trailers.Get("count") == "3");
  CHECK(back.trailers.size() == 1);

  // Without metadata: none comes back but the count.
  const CallResult plain = f.Call(kReflect, "", {}, &back);
  REQUIRE(plain.status.ok());
  CHECK(back.headers.empty());
  CHECK(back.trailers.Get("count") == "0");
}

TEST_CASE("metadata: an error carries its trailers") {
  Fixture f;
  rpc::ResponseMetadata back;
  const CallResult result = f.Call(kFail, "", {}, &back);
  CHECK(result.status.code() == StatusCode::kFailedPrecondition);
  CHECK(back.trailers.Get("why") == "no room");
}

TEST_CASE("metadata: a stream's headers come with its first message") {
  Fixture f;
  rpc::CallOptions options = rpc::CallOptions::WithTimeout(30s);
  options.metadata.Add("tenant", "blue");
  auto stream =
      f.channel->OpenStream(kCount, StreamKind::kServerStreaming, options,
                            Payload(Buffer::CopyOf(std::string_view("3"))));
  std::vector<std::string> read;
  for (;;) {
    std::promise<std::optional<Payload>> next;
    stream->Read([&](const Status&, std::optional<Payload> message) {
      next.set_value(std::move(message));
    });
    std::optional<Payload> message = next.get_future().get();
    if (!message) break;
    if (read.empty()) {
      // Delivered with the first message. (The trailers may be arriving
      // meanwhile: they are read once the call has ended.)
      CHECK(stream->response_headers().Get("h") == "1");
    }
    read.emplace_back(message->message.view());
  }
  CHECK(read == std::vector<std::string>{"0", "1", "2"});
  std::promise<Status> finished;
  stream->Finish(
      [&](const Status& status, Payload) { finished.set_value(status); });
  REQUIRE(finished.get_future().get().ok());
  CHECK(stream->response_headers().size() == 1);
  CHECK(stream->response_trailers().Get("t") == "done");
}

TEST_CASE(
    "metadata: a stream that sends no message has its headers at the "
    "end") {
  Fixture f;
  auto stream = f.channel->OpenStream(
      kCount, StreamKind::kServerStreaming, rpc::CallOptions::WithTimeout(30s),
      Payload(Buffer::CopyOf(std::string_view("0"))));
  std::promise<Status> finished;
  stream->Finish(
      [&](const Status& status, Payload) { finished.set_value(status); });
  REQUIRE(finished.get_future().get().ok());
  CHECK(stream->response_headers().Get("h") == "1");
  CHECK(stream->response_trailers().Get("t") == "done");
}

TEST_CASE("metadata: the sender refuses a bad key, value or size") {
  Fixture f;
  Metadata bad_key;
  bad_key.Add("Tenant", "blue");
  CallResult result = f.Call(kReflect, "", bad_key);
  CHECK(result.status.code() == StatusCode::kInvalidArgument);
  CHECK(result.status.message().find("key 'Tenant'") != std::string::npos);

  Metadata bad_value;
  bad_value.Add("trace", kBinary);  // Binary under a text key.
  result = f.Call(kReflect, "", bad_value);
  CHECK(result.status.code() == StatusCode::kInvalidArgument);
  CHECK(result.status.message().find("-bin") != std::string::npos);

  Metadata huge;
  huge.Add("blob-bin", std::string(tunables::kMaxMetadataSize, 'x'));
  result = f.Call(kReflect, "", huge);
  CHECK(result.status.code() == StatusCode::kResourceExhausted);
  CHECK(result.status.message().find("a call may send") != std::string::npos);

  // None of them reached the server; the channel works.
  CHECK(f.server.stats().calls_started == 0);
  CHECK(f.Call(kReflect, "").status.ok());
  CHECK(f.channel->stats().connects == 1);
}

TEST_CASE(
    "metadata: above the server's limit, RESOURCE_EXHAUSTED; the "
    "connection goes on") {
  rpc::ServerOptions options;
  options.max_metadata_size = 1024;
  Fixture f(options);
  Metadata big;
  big.Add("note", std::string(1000, 'n'));  // 4 + 1000 + 32 > 1024.
  CallResult result = f.Call(kReflect, "", big);
  CHECK(result.status.code() == StatusCode::kResourceExhausted);
  CHECK(result.status.message() ==
        "request metadata of 1036 bytes exceeds the server's limit of 1024");
  Metadata fits;
  fits.Add("note", std::string(988, 'n'));  // Exactly 1024.
  CHECK(f.Call(kReflect, "", fits).status.ok());
  CHECK(f.channel->stats().connects == 1);
  CHECK(f.server.stats().protocol_errors == 0);
}

TEST_CASE(
    "metadata: response metadata the channel refuses fails that call "
    "only") {
  rpc::ChannelOptions channel_options;
  channel_options.max_metadata_size = 2048;
  Fixture f({}, channel_options);
  // Over the channel's limit: refused at the client.
  CallResult result = f.Call(kTrailer, "3000");
  CHECK(result.status.code() == StatusCode::kResourceExhausted);
  CHECK(result.status.message() ==
        "response trailers of 3035 bytes exceeds the channel's limit of 2048");
  // Over what any call may send: refused at the server, INTERNAL.
  result = f.Call(kTrailer, std::to_string(tunables::kMaxMetadataSize));
  CHECK(result.status.code() == StatusCode::kInternal);
  CHECK(result.status.message().find("the server's response trailers") !=
        std::string::npos);
  // A key the rules refuse: INTERNAL too.
  result = f.Call(kBadKey, "");
  CHECK(result.status.code() == StatusCode::kInternal);
  CHECK(result.status.message().find("'Not A Key'") != std::string::npos);
  // Under the limit: delivered. Same connection throughout.
  rpc::ResponseMetadata back;
  result = f.Call(kTrailer, "1000", {}, &back);
  CHECK(result.status.ok());
  CHECK(back.trailers.Get("big")->size() == 1000);
  CHECK(f.channel->stats().connects == 1);
}

// ------------------------------------------------------ typed (generated) --

namespace asio = boost::asio;

// Add: a + b, with the request's "tenant" header as the trailer "tenant"
// and a response header "served-by".
class Calculator final : public test::Calculator::Service {
  void Add(
      std::shared_ptr<rpc::TypedCall<test::Pair, test::Number>> call) override {
    call->response_headers().Add("served-by", "calculator");
    if (auto tenant = call->request_metadata().Get("tenant")) {
      call->response_trailers().Add("tenant", std::string(*tenant));
    }
    call->response().set_value(call->request().a() + call->request().b());
    call->Finish();
  }
};

// Range: 0..n-1, with the request's "tenant" header back as a header.
class Numbers final : public test::stream::Numbers::Service {
  using Stream =
      rpc::TypedServerStream<test::stream::Count, test::stream::Number>;
  void Range(std::shared_ptr<Stream> stream) override {
    stream->response_headers().Add(
        "tenant",
        std::string(stream->request_metadata().Get("tenant").value_or("")));
    RangeFrom(std::move(stream), 0);
  }
  static void RangeFrom(std::shared_ptr<Stream> stream, int64_t next) {
    if (next == stream->request().n()) {
      stream->response_trailers().Add("sent", std::to_string(next));
      return stream->Finish(Status());
    }
    test::stream::Number number;
    number.set_value(next);
    stream->async_Write(number, [stream, next](const Status& status) {
      if (status.ok()) RangeFrom(stream, next + 1);
    });
  }
};

TEST_CASE("metadata: typed calls carry it through a ClientContext") {
  Calculator calculator;
  Numbers numbers;
  rpc::Server server;
  server.RegisterService(&calculator);
  server.RegisterService(&numbers);
  auto bound = server.Listen(ListenUri());
  REQUIRE(bound.ok());
  auto channel = std::make_shared<rpc::Channel>(*bound);

  test::Calculator::Stub calc(channel);
  rpc::ClientContext context(rpc::CallOptions::WithTimeout(30s));
  context.AddMetadata("tenant", "blue");
  test::Pair pair;
  pair.set_a(2);
  pair.set_b(3);
  auto [status, sum] = calc.async_Add(context, pair, asio::use_future).get();
  REQUIRE(status.ok());
  CHECK(sum.value() == 5);
  CHECK(context.response_headers().Get("served-by") == "calculator");
  CHECK(context.response_trailers().Get("tenant") == "blue");
  // The context is reused: its request headers stay, what came back is the
  // new call's.
  auto [again, _] = calc.async_Add(context, pair, asio::use_future).get();
  REQUIRE(again.ok());
  CHECK(context.response_trailers().size() == 1);

  test::stream::Numbers::Stub stub(channel);
  rpc::CallOptions options = rpc::CallOptions::WithTimeout(30s);
  options.metadata.Add("tenant", "green");
  test::stream::Count count;
  count.set_n(2);
  auto stream = stub.OpenRange(count, options);
  auto [first_status, first] = stream->async_Read(asio::use_future).get();
  REQUIRE(first.has_value());
  CHECK(stream->response_headers().Get("tenant") == "green");
  auto [second_status, second] = stream->async_Read(asio::use_future).get();
  REQUIRE(second.has_value());
  auto [end_status, end] = stream->async_Read(asio::use_future).get();
  CHECK_FALSE(end.has_value());
  CHECK(end_status.ok());
  CHECK(stream->response_trailers().Get("sent") == "2");
}

}  // namespace
}  // namespace rdmarpc::testing
