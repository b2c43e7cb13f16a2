// C++20 coroutines: `co_await stub.async_Method(request,
// boost::asio::use_awaitable)` inside a boost::asio::awaitable<T>, and
// handlers written as coroutines (SpawnHandler).
// Include this rather than Boost's headers directly: it also supplies an
// include that Boost 1.74's coroutine support is missing.
#ifndef RDMARPC_AWAITABLE_H_
#define RDMARPC_AWAITABLE_H_

// clang-format off
#include <utility>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
// clang-format on
#include <exception>
#include <memory>
#include <string>

#include "rdmarpc/status.h"

namespace rdmarpc {

// Runs `handler(call)`, a coroutine returning boost::asio::awaitable<Status>,
// on the call's connection loop (ServerCall::executor), and finishes the
// call with the status it returns: a TypedCall sends its response() when
// that is OK, a client-streaming TypedServerStream its response() if set.
// A handler that throws finishes the call INTERNAL. The coroutine must not
// block: it shares the loop with the connection's other calls.
//
//   void Get(std::shared_ptr<TypedCall<GetRequest, Row>> call) override {
//     SpawnHandler(call, [this](auto call) -> asio::awaitable<Status> {
//       auto [status, row] = co_await store_.async_Read(
//           call->request().key(), asio::use_awaitable);
//       if (status.ok()) call->response() = std::move(row);
//       co_return status;
//     });
//   }
template <typename Call, typename Handler>
void SpawnHandler(std::shared_ptr<Call> call, Handler handler) {
  auto executor = call->server_call().executor();
  boost::asio::co_spawn(
      executor,
      [call, handler = std::move(handler)]() mutable
      -> boost::asio::awaitable<Status> { co_return co_await handler(call); },
      [call](const std::exception_ptr& error, Status status) {
        if (error) {
          try {
            std::rethrow_exception(error);
          } catch (const std::exception& e) {
            status = Status(StatusCode::kInternal,
                            std::string("the handler threw: ") + e.what());
          } catch (...) {
            status = Status(StatusCode::kInternal, "the handler threw");
          }
        }
        call->Finish(status);
      });
}

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace rpc {
using rdmarpc::SpawnHandler;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_AWAITABLE_H_
