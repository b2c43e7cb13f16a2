#include "rdmarpc/status.h"

#include <catch2/catch_test_macros.hpp>

namespace rdmarpc {
namespace {

TEST_CASE("Status: default is OK and prints as OK") {
  Status status;
  CHECK(status.ok());
  CHECK(status.code() == StatusCode::kOk);
  CHECK(status.ToString() == "OK");
}

TEST_CASE("Status: carries code and message") {
  Status status(StatusCode::kDeadlineExceeded, "call timed out after 10 ms");
  CHECK_FALSE(status.ok());
  CHECK(status.ToString() == "DEADLINE_EXCEEDED: call timed out after 10 ms");
}

TEST_CASE("Status: copies are deep, moves keep the code") {
  Status error(StatusCode::kUnavailable, "peer went away");
  Status copy = error;
  CHECK(copy == error);
  CHECK(copy.message() == "peer went away");
  CHECK(&copy.message() != &error.message());  // Its own message.
  Status assigned;
  assigned = copy;
  CHECK(assigned == error);
  const Status& same = assigned;
  assigned = same;  // Assigned itself, it keeps its message.
  CHECK(assigned.message() == "peer went away");

  Status moved = std::move(copy);
  CHECK(moved == error);
  // A moved-from status keeps its code, as it did when the message was a
  // std::string member; only the message goes.
  CHECK(copy.code() ==
        StatusCode::kUnavailable);  // NOLINT(bugprone-use-after-move)
  CHECK(copy.message().empty());

  // An error without a message, and OK, print and compare by code alone.
  const Status bare(StatusCode::kCancelled, "");
  CHECK(bare.message().empty());
  CHECK(bare.ToString() == "CANCELLED");
  CHECK(bare == Status(StatusCode::kCancelled, ""));
  CHECK_FALSE(bare == Status());
  CHECK(sizeof(Status) <= 16);  // A code and a pointer.
}

TEST_CASE("Status: codes are the gRPC canonical numbers") {
  CHECK(static_cast<int>(StatusCode::kCancelled) == 1);
  CHECK(static_cast<int>(StatusCode::kResourceExhausted) == 8);
  CHECK(static_cast<int>(StatusCode::kUnimplemented) == 12);
  CHECK(static_cast<int>(StatusCode::kUnavailable) == 14);
  CHECK(static_cast<int>(StatusCode::kUnauthenticated) == 16);
  CHECK(StatusCodeName(StatusCode::kUnavailable) == "UNAVAILABLE");
}

TEST_CASE("Status: numbers from a peer are validated") {
  CHECK(StatusCodeFromInt(14) == StatusCode::kUnavailable);
  CHECK(StatusCodeFromInt(0) == StatusCode::kOk);
  CHECK_FALSE(StatusCodeFromInt(17).has_value());
  CHECK_FALSE(StatusCodeFromInt(-1).has_value());
}

TEST_CASE("StatusOr: holds a value or an error") {
  StatusOr<int> value = 42;
  REQUIRE(value.ok());
  CHECK(*value == 42);
  StatusOr<int> error = Status(StatusCode::kNotFound, "no such key");
  CHECK_FALSE(error.ok());
  CHECK(error.status().code() == StatusCode::kNotFound);
}

}  // namespace
}  // namespace rdmarpc
