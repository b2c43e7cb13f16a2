// The client side of rdmarpc.
//
//   rdmarpc::Channel          a virtual connection to one server URI:
//                                  connects on the first call, multiplexes
//                                  calls, reconnects (with backoff) after a
//                                  lost connection. Generated stubs take a
//                                  std::shared_ptr<Channel>.
//   rdmarpc::ChannelOptions   transport options, request size limit,
//                                  where callbacks run (callback_threads).
//   rdmarpc::CallOptions      a deadline (CallOptions::WithTimeout), a
//                                  CallCancellation to cancel the call, and
//                                  its metadata (request headers; where the
//                                  response's headers and trailers go).
//   rdmarpc::Metadata         headers or trailers: (key, value) pairs.
//   rdmarpc::ClientInterceptor, TokenClientInterceptor
//                                  code that sees every call before it is
//                                  sent and at its end
//                                  (include/rdmarpc/interceptor.h).
//   rdmarpc::MethodRef        names a method ("pkg.Service", "Method")
//                                  by a 64-bit id computed at compile time;
//                                  generated classes have one per method.
//   rdmarpc::Payload          a message and its attachment: bulk bytes
//                                  sent beside it, never copied into it.
//
//   using namespace rdmarpc;
//   auto channel = std::make_shared<rpc::Channel>("rdma://10.0.0.2:7000");
//   Foo::Stub stub(channel);
//   stub.async_Bar(request, rpc::CallOptions::WithTimeout(100ms),
//                  [](Status status, BarReply reply) { ... });
//
// Every completion runs exactly once: on the channel's event-loop thread (or
// its callback pool or executor, ChannelOptions::callback_threads), or, for a
// call still outstanding when the channel is destroyed (CANCELLED), on the
// destroying thread. Channels own no thread: a process's channels share a few
// event loops (rpc/client/client_loops.h), so a callback that blocks on the
// loop holds up the other channels of that loop; give such callbacks a pool.
#ifndef RDMARPC_CHANNEL_H_
#define RDMARPC_CHANNEL_H_

#include "rdmarpc/buffer.h"        // IWYU pragma: export
#include "rdmarpc/call_options.h"  // IWYU pragma: export
#include "rdmarpc/executor.h"      // IWYU pragma: export
#include "rdmarpc/interceptor.h"   // IWYU pragma: export
#include "rdmarpc/metadata.h"      // IWYU pragma: export
#include "rdmarpc/method_ref.h"    // IWYU pragma: export
#include "rdmarpc/payload.h"       // IWYU pragma: export
#include "rdmarpc/status.h"        // IWYU pragma: export
#include "rpc/channel.h"           // IWYU pragma: export

// One namespace for what an application names: rdmarpc::X is the same
// entity as the rdmarpc::rpc::X or rdmarpc::transport::X the implementation
// declares (either spelling compiles; write rdmarpc::X).
namespace rdmarpc {
using rpc::Channel;
}  // namespace rdmarpc

#endif  // RDMARPC_CHANNEL_H_
