// C++20 coroutine support for rdmarpc stubs: include this rather than the
// Boost.Asio coroutine headers directly.
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

#endif  // RDMARPC_RPC_TYPED_AWAITABLE_H_
