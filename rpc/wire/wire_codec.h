// Building and reading the frames of the RPC protocol (proto/wire.proto).
#ifndef RDMARPC_RPC_WIRE_WIRE_CODEC_H_
#define RDMARPC_RPC_WIRE_WIRE_CODEC_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "rdmarpc/buffer.h"
#include "rdmarpc/bulk.h"
#include "rdmarpc/payload.h"
#include "rdmarpc/status.h"
#include "rpc/wire/call_header.h"
#include "transport/connection.h"

namespace rdmarpc::rpc {

// A request names its method by `method_id` (include/rdmarpc/method_ref.h;
// service and method empty) or, with `method_id` 0, by service and method. The
// header carries what is set: empty names and a 0 id are not encoded. The
// frame's payload is the message, then the attachment.
// `metadata` is an encoded block (EncodeOutgoingMetadata), empty for none.
transport::OutgoingFrame MakeRequestFrame(
    uint64_t call_id, std::string_view service, std::string_view method,
    uint64_t method_id, uint64_t timeout_us, Payload&& request,
    std::string_view metadata = {});
// `headers` and `trailers` are encoded blocks, empty for none.
transport::OutgoingFrame MakeResponseFrame(uint64_t call_id,
                                           const Status& status,
                                           Payload&& response,
                                           std::string_view headers = {},
                                           std::string_view trailers = {});
transport::OutgoingFrame MakeCancelFrame(uint64_t call_id);
// Connection-wide: the server's "going away", or the client's answer.
transport::OutgoingFrame MakeGoAwayFrame();

// Streams (docs/protocol.md, "Streams"). A streaming call's REQUEST names its
// kind and may widen the client's window for the server's messages beyond
// the initial one; its payload is the request message of a server-streaming
// call, else empty.
transport::OutgoingFrame MakeStreamRequestFrame(
    uint64_t call_id, uint64_t method_id, uint64_t timeout_us,
    CallHeader::StreamKind kind, uint64_t window_messages,
    uint64_t window_bytes, Payload&& request, std::string_view metadata = {});
// `headers`: a server's response headers, on its first MESSAGE of the call.
transport::OutgoingFrame MakeMessageFrame(uint64_t call_id, Payload&& message,
                                          std::string_view headers = {});
transport::OutgoingFrame MakeHalfCloseFrame(uint64_t call_id);
// `messages` or `bytes` must be more than 0.
transport::OutgoingFrame MakeWindowFrame(uint64_t call_id, uint64_t messages,
                                         uint64_t bytes);

// Metadata to send (include/rdmarpc/metadata.h): the encoded block, empty for
// none; INVALID_ARGUMENT for a key or value the rules refuse,
// RESOURCE_EXHAUSTED above tunables::kMaxMetadataSize. `what` names it in the
// error ("request metadata").
StatusOr<std::string> EncodeOutgoingMetadata(const Metadata& metadata,
                                             std::string_view what);
// A received metadata block, checked and, unless `out` is null, decoded
// into it: RESOURCE_EXHAUSTED above `limit` ("<what> of N bytes exceeds
// the <receiver>'s limit of M"), `malformed` for one that does not parse
// or breaks the rules. OK for an empty block.
Status ReadMetadata(std::string_view block, size_t limit, std::string_view what,
                    std::string_view receiver, StatusCode malformed,
                    Metadata* out);

// Appends encoded fields (EncodeBulkField, EncodePlacedSizeField) to
// `frame`'s header: protobuf reads fields in any order.
void AppendToHeader(transport::OutgoingFrame& frame, std::string_view fields);

// A REQUEST's bulk field (CallHeader::bulk) into `out`, but for the
// response's destination (response_destination), into `destination`:
// INVALID_ARGUMENT when it is not whole descriptors, one does not decode,
// there are more than kMaxBulkLoansPerCall, or more than one destination,
// or one not writable.
Status ReadBulk(std::string_view field, std::vector<BulkDescriptor>& out,
                std::optional<BulkDescriptor>& destination);

// Parses and validates a received frame's header into `header`, which must
// be default-constructed; its strings are views into `frame`. An error means
// the peer broke the protocol: the connection should be closed with it.
// Which side may send which kind is the caller's to check.
Status DecodeCallHeader(const transport::ReceivedFrame& frame,
                        CallHeader& header);

// RESOURCE_EXHAUSTED for a frame whose payload the transport dropped, naming
// the limit: "<what> of N bytes exceeds the <receiver>'s maximum<detail>"
// or "... refused: the <receiver>'s registered-memory limit is reached".
Status DroppedPayloadStatus(const transport::ReceivedFrame& frame,
                            std::string_view what, std::string_view receiver,
                            std::string_view detail = {});

// The status a RESPONSE carries; an unknown code reads as UNKNOWN. Inline
// for the common OK; the rest out of line.
Status ErrorStatusFromHeader(const CallHeader& header);
inline Status StatusFromHeader(const CallHeader& header) {
  if (header.status_code() == 0 && header.status_message().empty()) {
    return Status();
  }
  return ErrorStatusFromHeader(header);
}

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_WIRE_WIRE_CODEC_H_
