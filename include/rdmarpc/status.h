// Status: the outcome of an operation, with the gRPC canonical codes;
// StatusOr<T>: a value, or the non-OK Status that explains its absence.
//
// Errors on the hot path travel as values, never as exceptions. An OK status
// carries no message and costs no allocation.
#ifndef RDMARPC_STATUS_H_
#define RDMARPC_STATUS_H_

#include <cassert>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace rdmarpc {

// Numerically identical to grpc::StatusCode, so codes mean the same on the
// wire.
enum class StatusCode : int32_t {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// "OK", "CANCELLED", ... as gRPC spells them.
std::string_view StatusCodeName(StatusCode code);

// The code for a number received from a peer; nullopt for an unknown number.
std::optional<StatusCode> StatusCodeFromInt(int64_t value);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK.
  Status(StatusCode code, std::string message)
      : code_(code),
        message_(message.empty()
                     ? nullptr
                     : std::make_unique<std::string>(std::move(message))) {}
  Status(const Status& other)
      : code_(other.code_), message_(CopyMessage(other)) {}
  Status& operator=(const Status& other) {
    if (this != &other) {
      code_ = other.code_;
      message_ = CopyMessage(other);
    }
    return *this;
  }
  // A moved-from status keeps its code; its message is empty.
  Status(Status&& other) noexcept = default;
  Status& operator=(Status&& other) noexcept = default;

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const {
    return message_ ? *message_ : EmptyMessage();
  }

  std::string ToString() const;

  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message() == b.message();
  }

 private:
  static const std::string& EmptyMessage();
  static std::unique_ptr<std::string> CopyMessage(const Status& other) {
    return other.message_ ? std::make_unique<std::string>(*other.message_)
                          : nullptr;
  }

  // Sixteen bytes, the message on the heap: every call makes, moves and
  // destroys several OK statuses, and an OK status is a code and a null
  // pointer, where a std::string member cost a few stores to make and a
  // compare to destroy each time.
  StatusCode code_ = StatusCode::kOk;
  std::unique_ptr<std::string> message_;
};

std::ostream& operator<<(std::ostream& os, const Status& status);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  // Implicit, so a function can `return value;` or `return status;`.
  StatusOr(T value) : state_(std::move(value)) {}        // NOLINT
  StatusOr(Status status) : state_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(state_).ok() && "StatusOr needs an error status");
  }

  bool ok() const { return std::holds_alternative<T>(state_); }
  Status status() const { return ok() ? Status() : std::get<Status>(state_); }

  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<Status, T> state_;
};

}  // namespace rdmarpc

#endif  // RDMARPC_STATUS_H_
