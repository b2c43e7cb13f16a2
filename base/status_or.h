// StatusOr<T>: either a value or the non-OK Status that explains its absence.
#ifndef RDMARPC_BASE_STATUS_OR_H_
#define RDMARPC_BASE_STATUS_OR_H_

#include <cassert>
#include <utility>
#include <variant>

#include "base/status.h"

namespace rdmarpc {

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

#endif  // RDMARPC_BASE_STATUS_OR_H_
