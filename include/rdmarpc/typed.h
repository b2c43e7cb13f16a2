// Protobuf-typed calls: what generated services and stubs (foo.rdmarpc.h,
// from rdmarpc_cc_proto_library) are built on. You rarely include this
// yourself: the generated header does.
//
//   rdmarpc::TypedCall<Request, Response>   a typed ServerCall: request(),
//                                                response(), Finish(), and
//                                                the attachments.
//   rdmarpc::ClientContext                  a call's options, headers
//                                                and attachments, client
//                                                side, unary or streaming.
//   Stub::async_Method([context,] request, [options,] token) takes an Asio
//   completion token with the signature void(rdmarpc::Status, Response): a
//   callback, boost::asio::use_future, or boost::asio::use_awaitable (include
//   rdmarpc/awaitable.h); Stub::Method([context,] request, &response)
//   blocks and returns the Status.
//   rdmarpc::TypedServerStream, TypedClientStream   streaming methods
//                                                (typed_stream.h): a stub's
//                                                Open<Method>([context or
//                                                options,] [request]).
//   A handler written as a coroutine: rdmarpc::SpawnHandler (awaitable.h).
#ifndef RDMARPC_TYPED_H_
#define RDMARPC_TYPED_H_

#include "rdmarpc/channel.h"         // IWYU pragma: export
#include "rdmarpc/client_context.h"  // IWYU pragma: export
#include "rdmarpc/server.h"          // IWYU pragma: export
#include "rdmarpc/typed_call.h"      // IWYU pragma: export
#include "rdmarpc/typed_stream.h"    // IWYU pragma: export

#endif  // RDMARPC_TYPED_H_
