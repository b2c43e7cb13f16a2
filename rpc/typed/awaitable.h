// C++20 coroutines on both sides: include this rather than the Boost.Asio
// coroutine headers directly.
//
// Client side, any stub method takes boost::asio::use_awaitable:
//   auto [status, reply] = co_await stub.async_Say(request, use_awaitable);
// Server side, SpawnHandler runs a handler written as a coroutine.
//
// Boost 1.74's awaitable.hpp uses std::exchange without including <utility>,
// so <utility> must come first; clang-format would otherwise reorder it.
#ifndef RDMARPC_RPC_TYPED_AWAITABLE_H_
#define RDMARPC_RPC_TYPED_AWAITABLE_H_

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

namespace rdmarpc::rpc {

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

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_TYPED_AWAITABLE_H_
