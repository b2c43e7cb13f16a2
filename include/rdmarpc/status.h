// rdmarpc's errors: every fallible call returns a Status or a StatusOr<T>.
//
//   rdmarpc::Status          OK, or a gRPC canonical code and a message:
//                            ok(), code(), message(), ToString().
//   rdmarpc::StatusCode      kOk, kCancelled, kDeadlineExceeded, kNotFound,
//                            kResourceExhausted, kUnimplemented,
//                            kUnavailable, ... (the same numbers as gRPC).
//   rdmarpc::StatusOr<T>     a T, or the Status saying why there is none.
//
// A call's status is what the server's handler finished it with, or one the
// library chose: DEADLINE_EXCEEDED past the deadline, CANCELLED, UNAVAILABLE
// when the connection was lost, UNIMPLEMENTED for an unknown method,
// RESOURCE_EXHAUSTED for a limit (docs/security.md lists them).
#ifndef RDMARPC_STATUS_H_
#define RDMARPC_STATUS_H_

#include "base/status.h"     // IWYU pragma: export
#include "base/status_or.h"  // IWYU pragma: export

#endif  // RDMARPC_STATUS_H_
