// Generated services and stubs (tests/proto/multi.proto), end to end, in all
// three completion styles. The server is a TestServer: the two-host suite
// runs these cases against one on the other host.
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_future.hpp>
#include <catch2/catch_test_macros.hpp>
#include <cstdint>
#include <cstring>
#include <future>
#include <span>
#include <stdexcept>
#include <thread>

#include "rdmarpc/awaitable.h"
#include "rdmarpc/server.h"
#include "tests/proto/multi.rdmarpc.h"
#include "tests/support/test_support.h"

namespace rdmarpc::test {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// The services (typed_services.h) on a TestServer: in this process, or on
// the other host in the two-host suite.
struct Fixture {
  testing::TestServer server{
      {},
      "",
      testing::kHostCalculator | testing::kHostClock | testing::kHostBlob};
  std::shared_ptr<rpc::Channel> channel =
      std::make_shared<rpc::Channel>(server.uri);
};

Pair MakePair(int64_t a, int64_t b) {
  Pair pair;
  pair.set_a(a);
  pair.set_b(b);
  return pair;
}

TEST_CASE("typed: callback completion") {
  Fixture f;
  Calculator::Stub stub(f.channel);
  std::promise<std::pair<Status, int64_t>> result;
  stub.async_Add(MakePair(40, 2), [&](Status status, Number sum) {
    result.set_value({status, sum.value()});
  });
  auto [status, sum] = result.get_future().get();
  REQUIRE(status.ok());
  CHECK(sum == 42);
}

// With ChannelOptions::callback_threads, a typed callback runs on the
// channel's pool: never on the event loop that received the response.
TEST_CASE("typed: a callback runs on the channel's callback pool") {
  testing::TestServer server{{}, "", testing::kHostCalculator};
  rpc::ChannelOptions options;
  options.callback_threads = 1;
  auto channel = std::make_shared<rpc::Channel>(server.uri, options);
  Calculator::Stub stub(channel);
  std::promise<std::thread::id> loop_thread;
  asio::post(channel->executor(),
             [&] { loop_thread.set_value(std::this_thread::get_id()); });
  const std::thread::id loop = loop_thread.get_future().get();
  for (int i = 0; i < 3; ++i) {
    std::promise<std::pair<int64_t, bool>> result;
    stub.async_Add(MakePair(i, 1), [&](Status status, Number sum) {
      result.set_value(
          {status.ok() ? sum.value() : -1, std::this_thread::get_id() == loop});
    });
    auto [sum, on_loop] = result.get_future().get();
    CHECK(sum == i + 1);
    CHECK_FALSE(on_loop);
  }
}

TEST_CASE("typed: use_future completion") {
  Fixture f;
  Calculator::Stub stub(f.channel);
  Number seven;
  seven.set_value(7);
  std::future<std::tuple<Status, Number>> future =
      stub.async_Negate(seven, asio::use_future);
  auto [status, negated] = future.get();
  REQUIRE(status.ok());
  CHECK(negated.value() == -7);
}

TEST_CASE("typed: use_awaitable completion in a C++20 coroutine") {
  Fixture f;
  Calculator::Stub calculator(f.channel);
  Clock::Stub clock(f.channel);
  asio::io_context io;
  std::optional<int64_t> total;
  std::string label;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto [s1, sum] =
            co_await calculator.async_Add(MakePair(1, 2), asio::use_awaitable);
        auto [s2, negated] =
            co_await calculator.async_Negate(sum, asio::use_awaitable);
        Stamp stamp;
        stamp.set_label("now");
        stamp.mutable_at()->set_seconds(1700000000);
        auto [s3, echoed] = co_await clock.async_Echo(
            stamp, rpc::CallOptions::WithTimeout(10s), asio::use_awaitable);
        if (s1.ok() && s2.ok() && s3.ok()) {
          total = negated.value();
          label = echoed.label() + "@" + std::to_string(echoed.at().seconds());
        }
        // The coroutine resumes on its own io_context's thread.
        CHECK(io.get_executor().running_in_this_thread());
      },
      asio::detached);
  io.run();  // Returns once the coroutine is done: the calls kept it busy.
  REQUIRE(total.has_value());
  CHECK(*total == -3);
  CHECK(label == "now (seen)@1700000000");
}

// use_awaitable initiates at the co_await, after the statement that made the
// awaitable: the call must run with the options given then (async_initiate
// keeps a copy), though the caller's were a temporary, long gone.
TEST_CASE("typed: use_awaitable starts later, with the options it was given") {
  Fixture f;
  Clock::Stub clock(f.channel);
  asio::io_context io;
  StatusCode late = StatusCode::kOk;
  StatusCode in_time = StatusCode::kUnknown;
  std::string label;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        Stamp stamp;
        stamp.set_label("later");
        auto expired = clock.async_Echo(
            stamp, rpc::CallOptions::WithTimeout(1us), asio::use_awaitable);
        auto roomy = clock.async_Echo(stamp, rpc::CallOptions::WithTimeout(10s),
                                      asio::use_awaitable);
        asio::steady_timer timer(io, 20ms);
        co_await timer.async_wait(asio::use_awaitable);
        auto [s1, unused] = co_await std::move(expired);
        auto [s2, echoed] = co_await std::move(roomy);
        late = s1.code();
        in_time = s2.code();
        label = echoed.label();
      },
      asio::detached);
  io.run();
  CHECK(late == StatusCode::kDeadlineExceeded);
  CHECK(in_time == StatusCode::kOk);
  CHECK(label == "later (seen)");
}

// Bytes that differ at every offset, so a shifted or torn copy shows.
Buffer Pattern(size_t size) {
  Buffer buffer = Buffer::Allocate(size);
  for (size_t i = 0; i < size; ++i) {
    buffer.data()[i] = std::byte(static_cast<uint8_t>(i * 131 + i / 251));
  }
  return buffer;
}

uint64_t Fnv1a(std::span<const std::byte> bytes) {
  uint64_t hash = 14695981039346656037u;
  for (const std::byte b : bytes) {
    hash = (hash ^ static_cast<uint8_t>(b)) * 1099511628211u;
  }
  return hash;
}

BlobInfo Labelled(const std::string& label) {
  BlobInfo info;
  info.set_label(label);
  return info;
}

TEST_CASE("typed: attachments go both ways beside the messages, uncopied") {
  Fixture f;
  Blob::Stub stub(f.channel);
  // Inline, a send slot, a grant, several grant blocks or segments.
  for (const size_t size : {size_t{1}, size_t{200}, size_t{4096},
                            size_t{(1 << 20) + 3}, size_t{6 << 20}}) {
    CAPTURE(size);
    const Buffer sent = Pattern(size);
    rpc::ClientContext context(rpc::CallOptions::WithTimeout(60s));
    context.set_request_attachment(Buffer::Borrow(sent.span()));
    auto [status, seen] =
        stub.async_Bounce(context, Labelled("blob"), asio::use_future).get();
    REQUIRE(status.ok());
    CHECK(seen.label() == "blob");
    CHECK(seen.attachment_size() == size);
    CHECK(seen.checksum() == Fnv1a(sent.span()));
    // The handler's attachment is a window on the block the request landed
    // in, right after the message: not a copy.
    CHECK(seen.contiguous());
    const Buffer& back = context.response_attachment();
    REQUIRE(back.size() == size);
    CHECK(std::memcmp(back.data(), sent.data(), size) == 0);
  }
}

TEST_CASE("typed: a message alone, and an error, carry no attachment") {
  Fixture f;
  Blob::Stub stub(f.channel);
  rpc::ClientContext context;
  auto [plain, seen] =
      stub.async_Bounce(context, Labelled("none"), asio::use_future).get();
  REQUIRE(plain.ok());
  CHECK(seen.attachment_size() == 0);
  CHECK(context.response_attachment().empty());

  // The handler set a response attachment, then failed the call.
  const Buffer sent = Pattern(5000);
  context.set_request_attachment(Buffer::Borrow(sent.span()));
  auto [failed, ignored] =
      stub.async_Bounce(context, Labelled("fail"), asio::use_future).get();
  CHECK(failed.code() == StatusCode::kFailedPrecondition);
  CHECK(context.response_attachment().empty());

  // A context's options apply: a deadline already past.
  rpc::ClientContext late(rpc::CallOptions::WithDeadline(rpc::Clock::now()));
  auto [expired, nothing] =
      stub.async_Bounce(late, Labelled("late"), asio::use_future).get();
  CHECK(expired.code() == StatusCode::kDeadlineExceeded);
}

TEST_CASE("typed: attachments in a coroutine") {
  Fixture f;
  Blob::Stub stub(f.channel);
  asio::io_context io;
  std::string result;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        rpc::ClientContext context;
        context.set_request_attachment(Buffer::CopyOf(std::string_view("xy")));
        auto [status, seen] = co_await stub.async_Bounce(
            context, Labelled("co"), asio::use_awaitable);
        if (status.ok()) {
          result = seen.label() + ":" +
                   std::string(context.TakeResponseAttachment().view());
        }
      },
      asio::detached);
  io.run();
  CHECK(result == "co:xy");
}

// Through the generic Channel: a Payload callback sees the attachment, a
// (Status, Buffer) one the message alone.
TEST_CASE("generic: a Payload carries an attachment; a Buffer callback") {
  Fixture f;
  const std::string message = Labelled("raw").SerializeAsString();
  std::promise<std::pair<std::string, std::string>> both;
  f.channel->Call(Blob::kBounceMethod,
                  rpc::Payload(Buffer::CopyOf(message), Buffer::CopyOf("tail")),
                  {}, [&](const Status& status, rpc::Payload response) {
                    REQUIRE(status.ok());
                    both.set_value({std::string(response.message.view()),
                                    std::string(response.attachment.view())});
                  });
  auto [reply, attachment] = both.get_future().get();
  BlobInfo seen;
  REQUIRE(seen.ParseFromString(reply));
  CHECK(seen.attachment_size() == 4);
  CHECK(attachment == "tail");

  std::promise<std::string> alone;
  f.channel->Call(Blob::kBounceMethod,
                  rpc::Payload(Buffer::CopyOf(message), Buffer::CopyOf("tail")),
                  {}, [&](const Status& status, Buffer response) {
                    REQUIRE(status.ok());
                    alone.set_value(std::string(response.view()));
                  });
  CHECK(alone.get_future().get() == reply);
}

TEST_CASE("typed: an unimplemented method answers UNIMPLEMENTED") {
  Fixture f;
  Calculator::Stub stub(f.channel);
  auto [status, ignored] =
      stub.async_Divide(MakePair(1, 0), asio::use_future).get();
  CHECK(status.code() == StatusCode::kUnimplemented);
  CHECK(status.message().find("rdmarpc.test.Calculator/Divide") !=
        std::string::npos);
}

// Stubs call by method id, so the server's answer for a service it does
// not have names only the id; the stub puts the method's names in front.
TEST_CASE("typed: a service the server lacks is UNIMPLEMENTED, named") {
  testing::TestServer server({}, "", testing::kHostClock);
  Calculator::Stub stub(std::make_shared<rpc::Channel>(server.uri));
  auto [status, ignored] =
      stub.async_Add(MakePair(1, 2), asio::use_future).get();
  CHECK(status.code() == StatusCode::kUnimplemented);
  CHECK(status.message() ==
        fmt::format("rdmarpc.test.Calculator/Add: unknown method id {:#018x}: "
                    "no method of this server has it",
                    Calculator::kAddMethod.id()));
  CHECK(server.stats().unknown_method_calls == 1);
}

TEST_CASE("typed: a handler's error and a nested message type") {
  Fixture f;
  Clock::Stub stub(f.channel);
  Pair_Note note;
  auto [empty_status, unused] =
      stub.async_Describe(note, asio::use_future).get();
  CHECK(empty_status.code() == StatusCode::kInvalidArgument);
  CHECK(empty_status.message() == "note text is empty");
  note.set_text("hello");
  auto [status, described] = stub.async_Describe(note, asio::use_future).get();
  REQUIRE(status.ok());
  CHECK(described.text() == "note: hello");
}

TEST_CASE("typed: the blocking form of a unary method") {
  Fixture f;
  Calculator::Stub calculator(f.channel);
  Number sum;
  REQUIRE(calculator.Add(MakePair(40, 2), &sum).ok());
  CHECK(sum.value() == 42);

  // With a context: its options, and an error leaves the response alone.
  Clock::Stub clock(f.channel);
  rpc::ClientContext context(rpc::CallOptions::WithTimeout(10s));
  Pair_Note note;
  Pair_Note described;
  described.set_text("untouched");
  const Status empty = clock.Describe(context, note, &described);
  CHECK(empty.code() == StatusCode::kInvalidArgument);
  CHECK(described.text() == "untouched");
  note.set_text("hello");
  REQUIRE(clock.Describe(context, note, &described).ok());
  CHECK(described.text() == "note: hello");
}

// Handlers written as coroutines (SpawnHandler): Add waits on a timer of its
// loop before it answers; Divide throws on zero, else fails.
class CoroutineCalculator final : public Calculator::Service {
  void Add(std::shared_ptr<rpc::TypedCall<Pair, Number>> call) override {
    rpc::SpawnHandler(call, [](auto call) -> asio::awaitable<Status> {
      asio::steady_timer timer(co_await asio::this_coro::executor, 1ms);
      co_await timer.async_wait(asio::use_awaitable);
      call->response().set_value(call->request().a() + call->request().b());
      co_return Status();
    });
  }
  void Divide(std::shared_ptr<rpc::TypedCall<Pair, Number>> call) override {
    rpc::SpawnHandler(call, [](auto call) -> asio::awaitable<Status> {
      if (call->request().b() == 0) throw std::invalid_argument("zero");
      co_return Status(StatusCode::kFailedPrecondition, "not today");
    });
  }
};

TEST_CASE("typed: a handler written as a coroutine") {
  CoroutineCalculator service;
  rpc::Server server;
  server.RegisterService(&service);
  auto uri = server.Listen(testing::ListenUri());
  REQUIRE(uri.ok());
  Calculator::Stub stub(std::make_shared<rpc::Channel>(*uri));
  Number sum;
  REQUIRE(stub.Add(MakePair(40, 2), &sum).ok());
  CHECK(sum.value() == 42);
  Number quotient;
  const Status thrown = stub.Divide(MakePair(1, 0), &quotient);
  CHECK(thrown.code() == StatusCode::kInternal);
  CHECK(thrown.message().find("the handler threw: zero") != std::string::npos);
  CHECK(stub.Divide(MakePair(1, 1), &quotient).code() ==
        StatusCode::kFailedPrecondition);
}

TEST_CASE("typed: a request that does not parse gets INVALID_ARGUMENT") {
  Fixture f;
  const testing::CallResult result =
      testing::CallSync(*f.channel, "Add", std::string("\xff\xff\xff", 3), {},
                        "rdmarpc.test.Calculator");
  CHECK(result.status.code() == StatusCode::kInvalidArgument);
  CHECK(result.status.message().find("rdmarpc.test.Pair") != std::string::npos);
}

TEST_CASE("typed: CallCancellation cancels a typed call") {
  Fixture f;
  Calculator::Stub stub(f.channel);
  rpc::CallOptions options;
  options.cancellation = std::make_shared<rpc::CallCancellation>();
  options.cancellation->Cancel();  // Before the call: cancels it at once.
  Number n;
  auto [status, unused] = stub.async_Negate(n, options, asio::use_future).get();
  CHECK(status.code() == StatusCode::kCancelled);
}

TEST_CASE("typed: deadlines apply to typed calls") {
  Fixture f;
  Calculator::Stub stub(f.channel);
  Number n;
  // Negate takes about 5 ms; 1 us cannot be met.
  auto [status, unused] =
      stub.async_Negate(n, rpc::CallOptions::WithTimeout(1us), asio::use_future)
          .get();
  CHECK(status.code() == StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace rdmarpc::test
