// The client side of rdmarpc.
//
//   rdmarpc::rpc::Channel          a virtual connection to one server URI:
//                                  connects on the first call, multiplexes
//                                  calls, reconnects (with backoff) after a
//                                  lost connection. Generated stubs take a
//                                  std::shared_ptr<Channel>.
//   rdmarpc::rpc::ChannelOptions   transport options, request size limit,
//                                  where callbacks run (callback_threads).
//   rdmarpc::rpc::CallOptions      a deadline (CallOptions::WithTimeout), a
//                                  CallCancellation to cancel the call, and
//                                  its metadata (request headers; where the
//                                  response's headers and trailers go).
//   rdmarpc::rpc::Metadata         headers or trailers: (key, value) pairs.
//   rdmarpc::rpc::ClientInterceptor, TokenClientInterceptor
//                                  code that sees every call before it is
//                                  sent and at its end
//                                  (rpc/common/interceptor.h).
//   rdmarpc::rpc::MethodRef        names a method ("pkg.Service", "Method")
//                                  by a 64-bit id computed at compile time;
//                                  generated classes have one per method.
//   rdmarpc::rpc::Payload          a message and its attachment: bulk bytes
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

#include "rdmarpc/buffer.h"           // IWYU pragma: export
#include "rdmarpc/status.h"           // IWYU pragma: export
#include "rpc/channel.h"              // IWYU pragma: export
#include "rpc/common/call_options.h"  // IWYU pragma: export
#include "rpc/common/executor.h"      // IWYU pragma: export
#include "rpc/common/interceptor.h"   // IWYU pragma: export
#include "rpc/common/metadata.h"      // IWYU pragma: export
#include "rpc/common/method_ref.h"    // IWYU pragma: export
#include "rpc/common/payload.h"       // IWYU pragma: export

#endif  // RDMARPC_CHANNEL_H_
