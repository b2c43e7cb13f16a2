// Payload: what a request or a response carries, a serialized message and,
// beside it, an optional attachment.
//
// An attachment is bytes the application moves with a call but outside its
// protobuf message, as brpc's attachments: protobuf copies every `bytes`
// field into a std::string when it parses, an attachment is never parsed or
// copied. On the wire it follows the message in the frame's payload
// (CallHeader.attachment_size says how much of it), so it travels the way a
// payload does:
//  - sent: a Buffer from MemoryRegistration::Slice (rdmarpc/memory.h) is
//    written over RDMA from where it is, with no copy and no registration;
//    other memory through the sending loop's registered bounce blocks; over
//    TCP it is gathered into the socket write (sendmsg) from where it is.
//  - received: it is a window on the block the frame landed in (an RDMA
//    grant, or the block a TCP read filled), handed over uncopied; its
//    memory goes back to the transport when the Buffer is destroyed.
#ifndef RDMARPC_PAYLOAD_H_
#define RDMARPC_PAYLOAD_H_

#include <cstdint>
#include <utility>

#include "rdmarpc/buffer.h"
#include "rdmarpc/status.h"
#include "rdmarpc/unique_function.h"

namespace rdmarpc {

struct Payload {
  Buffer message;
  Buffer attachment;

  Payload() = default;
  // A message alone: lets every API that takes a Payload take a Buffer.
  Payload(Buffer message)  // NOLINT(google-explicit-constructor)
      : message(std::move(message)) {}
  Payload(Buffer message, Buffer attachment)
      : message(std::move(message)), attachment(std::move(attachment)) {}

  // The message alone, for a callback written as (Status, Buffer): the
  // attachment, if the peer sent one, is released.
  operator Buffer() && {  // NOLINT(google-explicit-constructor)
    return std::move(message);
  }

  uint64_t size() const { return message.size() + attachment.size(); }
};

// A received frame's payload cut into its message and its `attachment_size`
// final bytes (at most payload.size()), without copying. Always inlined: it
// is on every call's path, and GCC's unit-growth budget otherwise decides
// by how much else a translation unit holds (out of line it cost a server
// 25 instructions a call).
[[gnu::always_inline]] inline Payload SplitPayload(Buffer payload,
                                                   uint64_t attachment_size) {
  if (attachment_size == 0) return Payload(std::move(payload));
  Buffer message = payload.Split(payload.size() - attachment_size);
  return Payload(std::move(message), std::move(payload));
}

// What a unary call (or a stream's end) completes with: its status and the
// response. Move-only, so an Asio completion handler can be wrapped without a
// copy. A callable taking (const Status&, Buffer) fits too: it gets the
// message, and the attachment is released.
using ResponseCallback = UniqueFunction<void(const Status&, Payload response)>;

// Deprecated: the name this had before it moved to rdmarpc::; it goes in
// the next release.
namespace rpc {
using rdmarpc::Payload;
using rdmarpc::ResponseCallback;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_PAYLOAD_H_
