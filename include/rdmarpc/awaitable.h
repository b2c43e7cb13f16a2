// C++20 coroutines: `co_await stub.async_Method(request,
// boost::asio::use_awaitable)` inside a boost::asio::awaitable<T>, and
// handlers written as coroutines (SpawnHandler).
// Include this rather than Boost's headers directly: it also supplies an
// include that Boost 1.74's coroutine support is missing.
#ifndef RDMARPC_AWAITABLE_H_
#define RDMARPC_AWAITABLE_H_

#include "rpc/typed/awaitable.h"  // IWYU pragma: export

namespace rdmarpc {
using rpc::SpawnHandler;
}  // namespace rdmarpc

#endif  // RDMARPC_AWAITABLE_H_
