#include "rdmarpc/status.h"

#include <array>

namespace rdmarpc {
namespace {

constexpr std::array<std::string_view, 17> kNames = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

}  // namespace

std::string_view StatusCodeName(StatusCode code) {
  const auto index = static_cast<size_t>(code);
  return index < kNames.size() ? kNames[index] : "UNKNOWN_CODE";
}

std::optional<StatusCode> StatusCodeFromInt(int64_t value) {
  if (value < 0 || value >= static_cast<int64_t>(kNames.size())) {
    return std::nullopt;
  }
  return static_cast<StatusCode>(value);
}

const std::string& Status::EmptyMessage() {
  static const std::string empty;
  return empty;
}

std::string Status::ToString() const {
  std::string out(StatusCodeName(code_));
  if (message_) {
    out += ": ";
    out += *message_;
  }
  return out;
}

std::ostream& operator<<(std::ostream& os, const Status& status) {
  return os << status.ToString();
}

}  // namespace rdmarpc
