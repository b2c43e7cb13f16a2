// What rpc_semantics_test's files share beyond tests/support/test_support.h.
#ifndef RDMARPC_TESTS_RPC_SEMANTICS_H_
#define RDMARPC_TESTS_RPC_SEMANTICS_H_

#include <catch2/catch_test_macros.hpp>
#include <future>

#include "tests/support/test_support.h"

namespace rdmarpc::testing {

// Starts a WaitCancel call, the server's `nth` call, and cancels it once its
// handler runs: the client gets CANCELLED, and the handler observes it.
inline void CancelWaitingCall(rpc::Channel& channel, TestServer& server,
                              int nth) {
  const int cancels = server.cancels_observed();
  std::promise<Status> done;
  const rpc::Channel::CallId id = channel.Call(
      "test.Test", "WaitCancel", Buffer(), rpc::CallOptions{},
      [&](const Status& status, Buffer) { done.set_value(status); });
  REQUIRE(WaitFor([&] { return server.calls_started() == nth; }));
  channel.Cancel(id);
  CHECK(done.get_future().get().code() == StatusCode::kCancelled);
  REQUIRE(WaitFor([&] { return server.cancels_observed() == cancels + 1; }));
}

}  // namespace rdmarpc::testing

#endif  // RDMARPC_TESTS_RPC_SEMANTICS_H_
