// Everything a user of rdmarpc includes, in one header. Each header below is
// also usable alone, and opens with what it offers.
//
//   rdmarpc/status.h          Status, StatusCode, StatusOr
//   rdmarpc/buffer.h          Buffer
//   rdmarpc/server.h          Server, ServerOptions, Service, ServerCall
//   rdmarpc/channel.h         Channel, ChannelOptions, CallOptions, MethodRef
//   rdmarpc/typed.h           what generated stubs build on (TypedCall)
//   rdmarpc/awaitable.h       C++20 coroutines
//   rdmarpc/memory.h          MemoryRegistration (zero-copy RDMA sends)
//   rdmarpc/introspection.h   EnableIntrospection (tools/rpc)
//   rdmarpc/admin.h           EnableAdmin, ClientAdmin (metrics, status page)
//
// Bazel: depend on @rdmarpc//:rdmarpc. Anything not reachable through these
// headers is internal and may change.
#ifndef RDMARPC_RDMARPC_H_
#define RDMARPC_RDMARPC_H_

#include "rdmarpc/admin.h"          // IWYU pragma: export
#include "rdmarpc/authorization.h"  // IWYU pragma: export
#include "rdmarpc/buffer.h"         // IWYU pragma: export
#include "rdmarpc/channel.h"        // IWYU pragma: export
#include "rdmarpc/health.h"         // IWYU pragma: export
#include "rdmarpc/introspection.h"  // IWYU pragma: export
#include "rdmarpc/memory.h"         // IWYU pragma: export
#include "rdmarpc/server.h"         // IWYU pragma: export
#include "rdmarpc/status.h"         // IWYU pragma: export
#include "rdmarpc/typed.h"          // IWYU pragma: export

#endif  // RDMARPC_RDMARPC_H_
