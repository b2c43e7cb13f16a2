// Generated services and stubs (tests/proto/multi.proto), end to end, in all
// three completion styles. The server is a TestServer: the two-host suite
// runs these cases against one on the other host.
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <catch2/catch_test_macros.hpp>
#include <future>

#include "rpc/awaitable.h"
#include "tests/proto/multi.rdmarpc.h"
#include "tests/test_support.h"

namespace rdmarpc::test {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// The services (typed_services.h) on a TestServer: in this process, or on
// the other host in the two-host suite.
struct Fixture {
  testing::TestServer server{
      {}, "", testing::kHostCalculator | testing::kHostClock};
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
