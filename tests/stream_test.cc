// Streaming calls on the generic layer (ServerCall::Read/Write,
// Channel::OpenStream): every kind, flow control, early ends, cancellation
// and deadlines. Over tcp:// natively; over rdma:// in the VM suite
// (RDMARPC_TEST_TRANSPORT).
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "proto/introspection.rdmarpc.h"
#include "rdmarpc/awaitable.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/introspection.h"
#include "rdmarpc/server.h"
#include "tests/proto/stream.rdmarpc.h"
#include "tests/support/test_support.h"

namespace rdmarpc::testing {
namespace {

using namespace std::chrono_literals;
using rpc::ClientStream;
using rpc::Payload;
using rpc::ServerCall;
using rpc::StreamKind;

constexpr rpc::MethodRef kCount("test.Stream", "Count");
constexpr rpc::MethodRef kSum("test.Stream", "Sum");
constexpr rpc::MethodRef kEcho("test.Stream", "Echo");
constexpr rpc::MethodRef kAbort("test.Stream", "Abort");
constexpr rpc::MethodRef kGated("test.Stream", "Gated");

Payload Text(const std::string& text) {
  return Payload(Buffer::CopyOf(std::string_view(text)));
}

// Writes `n` messages "0".."n-1" one after another, then finishes OK.
void WriteFrom(std::shared_ptr<ServerCall> call, int next, int n,
               std::atomic<int>* written) {
  if (next == n) return call->Finish(Status());
  call->Write(Text(std::to_string(next)),
              [call, next, n, written](const Status& status) mutable {
                if (!status.ok()) return;  // The call has ended.
                (*written)++;
                WriteFrom(std::move(call), next + 1, n, written);
              });
}

// Reads numbers until the end, then answers their sum.
void SumFrom(std::shared_ptr<ServerCall> call, long long sum) {
  call->Read([call, sum](const Status& status,
                         std::optional<Payload> message) mutable {
    if (!message) {
      return call->Finish(
          status, Buffer::CopyOf(std::string_view(std::to_string(sum))));
    }
    SumFrom(std::move(call),
            sum + std::stoll(std::string(message->message.view())));
  });
}

// Sends back each message it reads, then finishes when the client does.
void EchoFrom(std::shared_ptr<ServerCall> call) {
  call->Read(
      [call](const Status& status, std::optional<Payload> message) mutable {
        if (!message) return call->Finish(status);
        call->Write(std::move(*message), [call](const Status& written) mutable {
          if (written.ok()) EchoFrom(std::move(call));
        });
      });
}

// Reads to the end, then answers the bytes it read in all.
void CountBytesFrom(std::shared_ptr<ServerCall> call, uint64_t bytes) {
  call->Read([call, bytes](const Status& status,
                           std::optional<Payload> message) mutable {
    if (!message) {
      return call->Finish(
          status, Buffer::CopyOf(std::string_view(std::to_string(bytes))));
    }
    CountBytesFrom(std::move(call), bytes + message->size());
  });
}

struct StreamService : rpc::Service {
  std::atomic<int> written{0};
  std::atomic<int> cancelled{0};
  // Gated: the call, once its first message has been read.
  std::mutex mu;
  std::shared_ptr<ServerCall> gated;
  uint64_t gated_bytes = 0;
  // Gated reads the rest.
  void Resume() {
    std::lock_guard lock(mu);
    CountBytesFrom(std::move(gated), gated_bytes);
  }
  StreamService() : rpc::Service("test.Stream") {
    // Reads the first message as soon as it comes, then nothing until the
    // test calls Resume().
    AddStreamingMethod(
        "Gated", StreamKind::kClientStreaming,
        [this](std::shared_ptr<ServerCall> call) {
          call->Read([this, call](const Status&,
                                  std::optional<Payload> message) mutable {
            std::lock_guard lock(mu);
            gated_bytes = message ? message->size() : 0;
            gated = std::move(call);
          });
        });
    AddStreamingMethod("Count", StreamKind::kServerStreaming,
                       [this](std::shared_ptr<ServerCall> call) {
                         call->OnCancel([this] { cancelled++; });
                         const int n =
                             std::stoi(std::string(call->request().view()));
                         WriteFrom(std::move(call), 0, n, &written);
                       });
    AddStreamingMethod(
        "Sum", StreamKind::kClientStreaming,
        [](std::shared_ptr<ServerCall> call) { SumFrom(std::move(call), 0); });
    AddStreamingMethod(
        "Echo", StreamKind::kBidiStreaming,
        [](std::shared_ptr<ServerCall> call) { EchoFrom(std::move(call)); });
    // Ends the call at once, whatever the client still sends.
    AddStreamingMethod("Abort", StreamKind::kClientStreaming,
                       [](std::shared_ptr<ServerCall> call) {
                         call->Finish(Status(StatusCode::kAborted, "enough"));
                       });
  }
};

struct Fixture {
  StreamService service;
  rpc::Server server;
  std::string uri;
  std::unique_ptr<rpc::Channel> channel;
  explicit Fixture(rpc::ServerOptions options = {}) : server(options) {
    server.RegisterService(&service);
    auto bound = server.Listen(ListenUri());
    REQUIRE(bound.ok());
    uri = *bound;
    channel = std::make_unique<rpc::Channel>(uri);
  }
  // A server-streaming Count of `n` messages.
  std::unique_ptr<ClientStream> Count(int n,
                                      std::chrono::milliseconds timeout = 30s) {
    return channel->OpenStream(kCount, StreamKind::kServerStreaming,
                               rpc::CallOptions::WithTimeout(timeout),
                               Text(std::to_string(n)));
  }
};

// Reads to the end: the messages' texts, then the end's status.
std::pair<std::vector<std::string>, Status> ReadAll(ClientStream& stream) {
  std::vector<std::string> texts;
  for (;;) {
    std::promise<std::pair<Status, std::optional<Payload>>> next;
    stream.Read([&](const Status& status, std::optional<Payload> message) {
      next.set_value({status, std::move(message)});
    });
    auto [status, message] = next.get_future().get();
    if (!message) return {texts, status};
    texts.emplace_back(message->message.view());
  }
}

Status WriteSync(ClientStream& stream, const std::string& text) {
  std::promise<Status> done;
  stream.Write(Text(text),
               [&](const Status& status) { done.set_value(status); });
  return done.get_future().get();
}

std::pair<Status, std::string> FinishSync(ClientStream& stream) {
  std::promise<std::pair<Status, std::string>> done;
  stream.Finish([&](const Status& status, Payload response) {
    done.set_value({status, std::string(response.message.view())});
  });
  return done.get_future().get();
}

TEST_CASE("stream: server-streaming delivers every message in order") {
  Fixture f;
  // 100 messages: past the initial window of 16, so the reader's WINDOWs
  // keep the writer going.
  auto stream = f.Count(100);
  auto [texts, end] = ReadAll(*stream);
  CHECK(end.ok());
  REQUIRE(texts.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(texts[i] == std::to_string(i));
  CHECK(FinishSync(*stream).first.ok());
}

TEST_CASE("stream: client-streaming sums what the client sends") {
  Fixture f;
  auto stream = f.channel->OpenStream(kSum, StreamKind::kClientStreaming,
                                      rpc::CallOptions::WithTimeout(30s));
  long long expected = 0;
  for (int i = 1; i <= 50; ++i) {
    REQUIRE(WriteSync(*stream, std::to_string(i)).ok());
    expected += i;
  }
  stream->WritesDone();
  auto [status, sum] = FinishSync(*stream);
  CHECK(status.ok());
  CHECK(sum == std::to_string(expected));
}

TEST_CASE("stream: bidi echoes each message, then ends with the client") {
  Fixture f;
  auto stream = f.channel->OpenStream(kEcho, StreamKind::kBidiStreaming,
                                      rpc::CallOptions::WithTimeout(30s));
  for (int i = 0; i < 40; ++i) {
    REQUIRE(WriteSync(*stream, "m" + std::to_string(i)).ok());
    std::promise<std::string> echoed;
    stream->Read([&](const Status& status, std::optional<Payload> message) {
      echoed.set_value(message ? std::string(message->message.view())
                               : status.ToString());
    });
    CHECK(echoed.get_future().get() == "m" + std::to_string(i));
  }
  stream->WritesDone();
  auto [texts, end] = ReadAll(*stream);
  CHECK(texts.empty());
  CHECK(end.ok());
}

// A writer that outruns its reader waits: with nobody reading, the server
// gets exactly the initial window's messages out, no more.
TEST_CASE("stream: flow control holds a writer to the reader's window") {
  Fixture f;
  auto stream = f.Count(1000);
  const auto window = static_cast<int>(tunables::kInitialStreamWindowMessages);
  REQUIRE(WaitFor([&] { return f.service.written == window; }));
  std::this_thread::sleep_for(200ms);
  CHECK(f.service.written == window);    // Still: no room for more.
  auto [texts, end] = ReadAll(*stream);  // Reading makes room.
  CHECK(end.ok());
  CHECK(texts.size() == 1000);
  CHECK(f.service.written == 1000);
}

TEST_CASE("stream: a server that ends early fails the client's writes") {
  Fixture f;
  auto stream = f.channel->OpenStream(kAbort, StreamKind::kClientStreaming,
                                      rpc::CallOptions::WithTimeout(30s));
  auto [status, response] = FinishSync(*stream);
  CHECK(status.code() == StatusCode::kAborted);
  CHECK(status.message() == "enough");
  const Status late = WriteSync(*stream, "1");
  CHECK(late.code() == StatusCode::kAborted);
}

TEST_CASE("stream: cancel and deadline end the whole stream on both sides") {
  // Count's handler just returns once a write fails (WriteFrom), as a gRPC
  // handler does: no Finish, and no warning for it.
  LogCapture log;
  Fixture f;
  SECTION("cancel") {
    auto stream = f.Count(1000000);
    REQUIRE(WaitFor([&] { return f.service.written > 0; }));
    stream->Cancel();
    auto [texts, end] = ReadAll(*stream);
    CHECK(end.code() == StatusCode::kCancelled);
    CHECK(WaitFor([&] { return f.service.cancelled == 1; }));
  }
  SECTION("deadline") {
    auto stream = f.Count(1000000, 300ms);
    auto [status, response] = FinishSync(*stream);
    CHECK(status.code() == StatusCode::kDeadlineExceeded);
    CHECK(WaitFor([&] { return f.service.cancelled == 1; }));
  }
  REQUIRE(WaitFor([&] { return f.server.stats().live_calls == 0; }));
  CHECK_FALSE(log.Contains("without finishing"));
}

TEST_CASE("stream: a kind other than the method's is INVALID_ARGUMENT") {
  Fixture f;
  auto stream =
      f.channel->OpenStream(kSum, StreamKind::kServerStreaming,
                            rpc::CallOptions::WithTimeout(30s), Text("x"));
  auto [texts, end] = ReadAll(*stream);
  CHECK(texts.empty());
  CHECK(end.code() == StatusCode::kInvalidArgument);
  CHECK(end.message() ==
        "test.Stream/Sum is a client-streaming method; the call is "
        "server-streaming");
}

// Many streams on one connection: one stalled at its window holds up no
// other call.
TEST_CASE("stream: a stalled stream does not block other calls") {
  Fixture f;
  auto stalled = f.Count(1000);
  REQUIRE(WaitFor([&] {
    return f.service.written ==
           static_cast<int>(tunables::kInitialStreamWindowMessages);
  }));
  auto other = f.Count(50);
  auto [texts, end] = ReadAll(*other);
  CHECK(end.ok());
  CHECK(texts.size() == 50);
}

// Writes `sizes` one after another, each once the one before has gone.
struct Writer {
  Writer(ClientStream& to, std::vector<size_t> message_sizes)
      : stream(to), sizes(std::move(message_sizes)) {}
  ClientStream& stream;
  const std::vector<size_t> sizes;
  std::atomic<size_t> done{0};
  std::promise<Status> all;
  void Next(size_t i) {
    if (i == sizes.size()) return all.set_value(Status());
    stream.Write(Payload(Buffer::Allocate(sizes[i])),
                 [this, i](const Status& status) {
                   if (!status.ok()) return all.set_value(status);
                   done++;
                   Next(i + 1);
                 });
  }
};

// Both ends keep exact byte balances: a WINDOW that crosses messages in
// flight counts the same at both ends. (With balances stopped at zero, the
// writer came to think it had room the reader had not given, and this call
// failed "stream window exceeded".)
TEST_CASE("stream: windows agree when a WINDOW crosses messages in flight") {
  Fixture f;
  auto stream = f.channel->OpenStream(kGated, StreamKind::kClientStreaming,
                                      rpc::CallOptions::WithTimeout(60s));
  constexpr size_t kMiB = 1 << 20;
  Writer writer(*stream, {3 * kMiB, 3 * kMiB, 2 * kMiB, 1024, 1024});
  writer.Next(0);
  REQUIRE(WaitFor([&] {
    std::lock_guard lock(f.service.mu);
    return f.service.gated != nullptr;
  }));
  std::this_thread::sleep_for(300ms);  // Whatever room there is, taken.
  f.service.Resume();
  CHECK(writer.all.get_future().get().ok());
  stream->WritesDone();
  auto [status, bytes] = FinishSync(*stream);
  CHECK(status.ok());
  CHECK(bytes == std::to_string(8 * kMiB + 2048));
}

// A client writer that outruns its reader waits: with the server not
// reading, the initial window's messages go and the next Write waits.
TEST_CASE("stream: a client's Write waits for the server's window") {
  Fixture f;
  auto stream = f.channel->OpenStream(kGated, StreamKind::kClientStreaming,
                                      rpc::CallOptions::WithTimeout(60s));
  Writer writer(*stream, std::vector<size_t>(40, 100));
  writer.Next(0);
  const auto window = tunables::kInitialStreamWindowMessages;
  REQUIRE(WaitFor([&] { return writer.done == window; }));
  std::this_thread::sleep_for(300ms);
  CHECK(writer.done == window);  // Still: no room for more.
  f.service.Resume();
  CHECK(writer.all.get_future().get().ok());
  CHECK(writer.done == 40);
  stream->WritesDone();
  auto [status, bytes] = FinishSync(*stream);
  CHECK(status.ok());
  CHECK(bytes == "4000");
}

// Large messages with attachments stream as any other: on RDMA they go by
// rendezvous, each through the window like a small one.
TEST_CASE("stream: large messages with attachments stream both ways") {
  Fixture f;
  auto stream = f.channel->OpenStream(kEcho, StreamKind::kBidiStreaming,
                                      rpc::CallOptions::WithTimeout(60s));
  constexpr size_t kSize = 768 * 1024;
  for (int i = 0; i < 6; ++i) {
    Buffer bulk = Buffer::Allocate(kSize);
    for (size_t j = 0; j < kSize; ++j) {
      bulk.data()[j] = std::byte(static_cast<uint8_t>(i * 31 + j * 7));
    }
    std::promise<Status> written;
    stream->Write(Payload(Buffer::CopyOf(std::to_string(i)), std::move(bulk)),
                  [&](const Status& status) { written.set_value(status); });
    REQUIRE(written.get_future().get().ok());
    std::promise<std::optional<Payload>> echoed;
    stream->Read([&](const Status&, std::optional<Payload> message) {
      echoed.set_value(std::move(message));
    });
    std::optional<Payload> back = echoed.get_future().get();
    REQUIRE(back.has_value());
    CHECK(back->message.view() == std::to_string(i));
    REQUIRE(back->attachment.size() == kSize);
    bool same = true;
    for (size_t j = 0; j < kSize && same; ++j) {
      same = back->attachment.data()[j] ==
             std::byte(static_cast<uint8_t>(i * 31 + j * 7));
    }
    CHECK(same);
  }
  stream->WritesDone();
  CHECK(FinishSync(*stream).first.ok());
}

// Introspection's metrics (rdmarpc.Introspection/GetMetrics) count a
// streaming method's messages each way and its streams open.
TEST_CASE("stream: metrics count messages and open streams") {
  StreamService service;
  rpc::Server server;
  server.RegisterService(&service);
  rpc::EnableIntrospection(server);
  auto bound = server.Listen(ListenUri());
  REQUIRE(bound.ok());
  auto channel = std::make_shared<rpc::Channel>(*bound);
  const auto method_metrics = [&](const std::string& method) {
    ::rdmarpc::Introspection::Stub stub(channel);
    auto [status, metrics] =
        stub.async_GetMetrics({}, boost::asio::use_future).get();
    REQUIRE(status.ok());
    for (const auto& m : metrics.methods()) {
      if (m.service() == "test.Stream" && m.method() == method) return m;
    }
    FAIL("no metrics for " << method);
    return ::rdmarpc::MethodMetrics();
  };

  // Gated holds its stream open after reading one message.
  auto gated = channel->OpenStream(kGated, StreamKind::kClientStreaming,
                                   rpc::CallOptions::WithTimeout(30s));
  REQUIRE(WriteSync(*gated, "first").ok());
  REQUIRE(WaitFor([&] {
    std::lock_guard lock(service.mu);
    return service.gated != nullptr;
  }));
  CHECK(method_metrics("Gated").streams_open() == 1);
  CHECK(method_metrics("Gated").messages_received() == 1);
  service.Resume();
  gated->WritesDone();
  REQUIRE(FinishSync(*gated).first.ok());
  CHECK(WaitFor([&] { return method_metrics("Gated").streams_open() == 0; }));

  // Echo: three in, three out.
  auto echo = channel->OpenStream(kEcho, StreamKind::kBidiStreaming,
                                  rpc::CallOptions::WithTimeout(30s));
  for (const char* text : {"a", "b", "c"}) {
    REQUIRE(WriteSync(*echo, text).ok());
  }
  echo->WritesDone();
  const auto [echoed, end] = ReadAll(*echo);
  REQUIRE(end.ok());
  CHECK(echoed.size() == 3);
  REQUIRE(FinishSync(*echo).first.ok());
  CHECK(WaitFor([&] {
    const auto m = method_metrics("Echo");
    return m.streams_open() == 0 && m.messages_received() == 3 &&
           m.messages_sent() == 3 && m.started() == 1;
  }));
}

// ------------------------------------------------------ typed (generated) --

namespace pb = ::rdmarpc::test::stream;
namespace asio = boost::asio;

pb::Number MakeNumber(int64_t value) {
  pb::Number number;
  number.set_value(value);
  return number;
}

// The generated service, its streams driven by callbacks.
class Numbers final : public pb::Numbers::Service {
  using Stream = rpc::TypedServerStream<pb::Count, pb::Number>;
  using InStream = rpc::TypedServerStream<pb::Number, pb::Number>;

  // 0..n-1; the request's attachment goes back with the first number, its
  // header "echo" as a response header, and the count as a trailer.
  void Range(std::shared_ptr<Stream> stream) override {
    if (auto echo = stream->request_metadata().Get("echo")) {
      stream->response_headers().Add("echo", std::string(*echo));
    }
    stream->response_trailers().Add("count",
                                    std::to_string(stream->request().n()));
    RangeFrom(stream, 0, stream->TakeRequestAttachment());
  }
  static void RangeFrom(std::shared_ptr<Stream> stream, int64_t next,
                        Buffer attachment = Buffer()) {
    if (next == stream->request().n()) return stream->Finish(Status());
    stream->async_Write(MakeNumber(next), std::move(attachment),
                        [stream, next](const Status& status) {
                          if (status.ok()) RangeFrom(stream, next + 1);
                        });
  }
  // A coroutine handler (SpawnHandler): the sum, with the last attachment
  // sent back beside it; a negative number throws.
  void Sum(std::shared_ptr<InStream> stream) override {
    rpc::SpawnHandler(
        stream,
        [](std::shared_ptr<InStream> stream) -> asio::awaitable<Status> {
          int64_t sum = 0;
          Buffer last;
          for (;;) {
            auto [status, number, attachment] =
                co_await stream->async_ReadWithAttachment(asio::use_awaitable);
            if (!number) {
              if (!status.ok()) co_return status;
              break;
            }
            if (number->value() < 0) throw std::runtime_error("negative");
            sum += number->value();
            if (attachment.size() > 0) last = std::move(attachment);
          }
          stream->response() = MakeNumber(sum);
          stream->set_response_attachment(std::move(last));
          co_return Status();
        });
  }
  // Each number doubled, with the attachment it came with sent back.
  void Double(std::shared_ptr<InStream> stream) override {
    stream->async_ReadWithAttachment(
        [this, stream](const Status& status, std::optional<pb::Number> number,
                       Buffer attachment) {
          if (!number) return stream->Finish(status);
          stream->async_Write(MakeNumber(2 * number->value()),
                              std::move(attachment),
                              [this, stream](const Status& written) {
                                if (written.ok()) Double(stream);
                              });
        });
  }
};

struct TypedFixture {
  Numbers service;
  rpc::Server server;
  std::shared_ptr<rpc::Channel> channel;
  pb::Numbers::Stub stub{nullptr};
  TypedFixture() {
    server.RegisterService(&service);
    auto bound = server.Listen(ListenUri());
    REQUIRE(bound.ok());
    channel = std::make_shared<rpc::Channel>(*bound);
    stub = pb::Numbers::Stub(channel);
  }
};

TEST_CASE("typed stream: server-streaming with use_future") {
  TypedFixture f;
  pb::Count count;
  count.set_n(40);
  auto stream = f.stub.OpenRange(count, rpc::CallOptions::WithTimeout(30s));
  for (int64_t i = 0; i < 40; ++i) {
    auto [status, number] = stream->async_Read(asio::use_future).get();
    REQUIRE(status.ok());
    REQUIRE(number.has_value());
    CHECK(number->value() == i);
  }
  auto [status, end] = stream->async_Read(asio::use_future).get();
  CHECK(status.ok());
  CHECK_FALSE(end.has_value());
  CHECK(std::get<0>(stream->async_Finish(asio::use_future).get()).ok());
}

TEST_CASE("typed stream: attachments beside messages, both ways") {
  TypedFixture f;
  auto stream = f.stub.OpenDouble(rpc::CallOptions::WithTimeout(30s));
  for (const size_t size : {size_t{0}, size_t{100}, size_t{300} << 10}) {
    std::vector<std::byte> bytes(size);
    for (size_t i = 0; i < size; ++i) bytes[i] = std::byte(i * 7 + size);
    REQUIRE(stream
                ->async_Write(MakeNumber(static_cast<int64_t>(size)),
                              Buffer::CopyOf(bytes), asio::use_future)
                .get()
                .ok());
    auto [status, number, attachment] =
        stream->async_ReadWithAttachment(asio::use_future).get();
    REQUIRE(status.ok());
    REQUIRE(number.has_value());
    CHECK(number->value() == 2 * static_cast<int64_t>(size));
    REQUIRE(attachment.size() == size);
    CHECK(std::equal(bytes.begin(), bytes.end(), attachment.data()));
  }
  // async_Read still reads a message that came with an attachment.
  REQUIRE(stream
              ->async_Write(MakeNumber(4),
                            Buffer::CopyOf(std::vector<std::byte>(64)),
                            asio::use_future)
              .get()
              .ok());
  auto [status, number] = stream->async_Read(asio::use_future).get();
  REQUIRE(status.ok());
  CHECK(number->value() == 8);
  stream->WritesDone();
  CHECK(std::get<0>(stream->async_Finish(asio::use_future).get()).ok());
}

TEST_CASE("typed stream: client-streaming and bidi in a coroutine") {
  TypedFixture f;
  asio::io_context io;
  int64_t sum = -1;
  std::vector<int64_t> doubled;
  Status sum_status, double_status;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto in = f.stub.OpenSum(rpc::CallOptions::WithTimeout(30s));
        for (int64_t i = 1; i <= 10; ++i) {
          const Status written =
              co_await in->async_Write(MakeNumber(i), asio::use_awaitable);
          if (!written.ok()) co_return;
        }
        in->WritesDone();
        auto [status, total] = co_await in->async_Finish(asio::use_awaitable);
        sum_status = status;
        sum = total.value();

        auto both = f.stub.OpenDouble(rpc::CallOptions::WithTimeout(30s));
        for (int64_t i = 0; i < 5; ++i) {
          const Status sent =
              co_await both->async_Write(MakeNumber(i), asio::use_awaitable);
          if (!sent.ok()) co_return;
          auto [read, number] = co_await both->async_Read(asio::use_awaitable);
          if (number) doubled.push_back(number->value());
        }
        both->WritesDone();
        auto [end, none] = co_await both->async_Read(asio::use_awaitable);
        double_status = end;
      },
      asio::detached);
  io.run();
  CHECK(sum_status.ok());
  CHECK(sum == 55);
  CHECK(double_status.ok());
  CHECK(doubled == std::vector<int64_t>{0, 2, 4, 6, 8});
}

// A ClientContext serves a stream as it serves a unary call: its options and
// headers go out, the request's attachment with a server-streaming call's
// request, and the response's headers, trailers and attachment land in it.
TEST_CASE("typed stream: a ClientContext, server-streaming") {
  TypedFixture f;
  rpc::ClientContext context(rpc::CallOptions::WithTimeout(30s));
  context.AddMetadata("echo", "blue");
  context.set_request_attachment(Buffer::CopyOf(std::string_view("bulk")));
  pb::Count count;
  count.set_n(3);
  auto stream = f.stub.OpenRange(context, count);
  auto [status, first, attachment] =
      stream->async_ReadWithAttachment(asio::use_future).get();
  REQUIRE(status.ok());
  CHECK(first->value() == 0);
  CHECK(attachment.view() == "bulk");
  CHECK(context.response_headers().Get("echo") == "blue");
  int64_t read = 1;
  while (std::get<1>(stream->async_Read(asio::use_future).get())) ++read;
  CHECK(read == 3);
  CHECK(std::get<0>(stream->async_Finish(asio::use_future).get()).ok());
  CHECK(context.response_trailers().Get("count") == "3");
}

TEST_CASE("typed stream: a ClientContext, client-streaming to a coroutine") {
  TypedFixture f;
  rpc::ClientContext context(rpc::CallOptions::WithTimeout(30s));
  auto stream = f.stub.OpenSum(context);
  for (int64_t i = 1; i <= 4; ++i) {
    Buffer attachment =
        i == 3 ? Buffer::CopyOf(std::string_view("third")) : Buffer();
    REQUIRE(stream
                ->async_Write(MakeNumber(i), std::move(attachment),
                              asio::use_future)
                .get()
                .ok());
  }
  stream->WritesDone();
  auto [status, sum] = stream->async_Finish(asio::use_future).get();
  REQUIRE(status.ok());
  CHECK(sum.value() == 10);
  CHECK(context.response_attachment().view() == "third");

  // A coroutine handler that throws finishes its call INTERNAL.
  auto bad = f.stub.OpenSum(context);
  REQUIRE(bad->async_Write(MakeNumber(-1), asio::use_future).get().ok());
  bad->WritesDone();
  auto [thrown, unused] = bad->async_Finish(asio::use_future).get();
  CHECK(thrown.code() == StatusCode::kInternal);
  CHECK(thrown.message().find("the handler threw: negative") !=
        std::string::npos);
  CHECK(context.response_attachment().size() == 0);
}

TEST_CASE("typed stream: an unimplemented streaming method is UNIMPLEMENTED") {
  TypedFixture f;
  pb::Count count;
  auto stream = f.stub.OpenMissing(count, rpc::CallOptions::WithTimeout(30s));
  auto [status, number] = stream->async_Read(asio::use_future).get();
  CHECK(status.code() == StatusCode::kUnimplemented);
  CHECK(status.message().find("rdmarpc.test.stream.Numbers/Missing") !=
        std::string::npos);
  CHECK_FALSE(number.has_value());
}

}  // namespace
}  // namespace rdmarpc::testing
