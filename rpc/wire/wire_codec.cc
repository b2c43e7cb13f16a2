#include "rpc/wire/wire_codec.h"

#include <cstring>
#include <string>

#include "base/buffer_pool.h"
#include "rdmarpc/tunables.h"

namespace rdmarpc::rpc {
namespace {

// Inlined into each maker: one call fewer per frame.
[[gnu::always_inline]] inline transport::OutgoingFrame Frame(
    const CallHeader& header, Payload&& payload) {
  transport::OutgoingFrame frame;
  std::byte* out = frame.header.Prepare(header.MaxEncodedSize());
  frame.header.Commit(header.Encode(out) - out);
  frame.AddPayload(std::move(payload.message));
  frame.AddPayload(std::move(payload.attachment));
  return frame;
}

// A frame whose header is the fixed block alone (no extension field set).
[[gnu::always_inline]] inline transport::OutgoingFrame FixedFrame(
    CallHeader::Kind kind, int32_t status_code, uint64_t call_id,
    uint64_t method_id, uint64_t timeout_us, Payload&& payload) {
  transport::OutgoingFrame frame;
  CallHeader::EncodeFixed(frame.header.CommitInline<CallHeader::kFixedSize>(),
                          kind, status_code, call_id, method_id, timeout_us,
                          payload.size(), payload.attachment.size());
  frame.AddPayload(std::move(payload.message));
  frame.AddPayload(std::move(payload.attachment));
  return frame;
}

Status ProtocolError(const std::string& why) {
  return Status(StatusCode::kInternal, "protocol error: " + why);
}

}  // namespace

transport::OutgoingFrame MakeRequestFrame(
    uint64_t call_id, std::string_view service, std::string_view method,
    uint64_t method_id, uint64_t timeout_us, Payload&& request,
    std::string_view metadata) {
  if (service.empty() && method.empty() && metadata.empty()) [[likely]] {
    return FixedFrame(CallHeader::kRequest, 0, call_id, method_id, timeout_us,
                      std::move(request));
  }
  CallHeader header;
  header.set_kind(CallHeader::kRequest);
  header.set_call_id(call_id);
  header.set_service(service);
  header.set_method(method);
  header.set_method_id(method_id);
  header.set_timeout_us(timeout_us);
  header.set_payload_size(request.size());
  header.set_attachment_size(request.attachment.size());
  header.set_metadata(metadata);
  return Frame(header, std::move(request));
}

transport::OutgoingFrame MakeResponseFrame(uint64_t call_id,
                                           const Status& status,
                                           Payload&& response,
                                           std::string_view headers,
                                           std::string_view trailers) {
  if (status.ok() && status.message().empty() && headers.empty() &&
      trailers.empty()) [[likely]] {
    return FixedFrame(CallHeader::kResponse, 0, call_id, 0, 0,
                      std::move(response));
  }
  CallHeader header;
  header.set_kind(CallHeader::kResponse);
  header.set_call_id(call_id);
  header.set_status_code(static_cast<int32_t>(status.code()));
  const std::string& message = status.message();
  std::string truncated;
  if (message.size() > tunables::kMaxStatusMessageSize) {
    truncated = message.substr(0, tunables::kMaxStatusMessageSize) + "...";
    header.set_status_message(truncated);
  } else {
    header.set_status_message(message);
  }
  if (!status.ok()) response = Payload();  // An error carries no payload.
  header.set_payload_size(response.size());
  header.set_attachment_size(response.attachment.size());
  header.set_metadata(headers);
  header.set_trailers(trailers);
  return Frame(header, std::move(response));
}

// A frame that is its kind and call id alone.
transport::OutgoingFrame BareFrame(CallHeader::Kind kind, uint64_t call_id) {
  CallHeader header;
  header.set_kind(kind);
  header.set_call_id(call_id);
  return Frame(header, Payload());
}

transport::OutgoingFrame MakeCancelFrame(uint64_t call_id) {
  return BareFrame(CallHeader::kCancel, call_id);
}

transport::OutgoingFrame MakeStreamRequestFrame(
    uint64_t call_id, uint64_t method_id, uint64_t timeout_us,
    CallHeader::StreamKind kind, uint64_t window_messages,
    uint64_t window_bytes, Payload&& request, std::string_view metadata) {
  CallHeader header;
  header.set_kind(CallHeader::kRequest);
  header.set_call_id(call_id);
  header.set_method_id(method_id);
  header.set_timeout_us(timeout_us);
  header.set_payload_size(request.size());
  header.set_attachment_size(request.attachment.size());
  header.set_stream(kind);
  header.set_window(window_messages, window_bytes);
  header.set_metadata(metadata);
  return Frame(header, std::move(request));
}

transport::OutgoingFrame MakeMessageFrame(uint64_t call_id, Payload&& message,
                                          std::string_view headers) {
  CallHeader header;
  header.set_kind(CallHeader::kMessage);
  header.set_call_id(call_id);
  header.set_payload_size(message.size());
  header.set_attachment_size(message.attachment.size());
  header.set_metadata(headers);
  return Frame(header, std::move(message));
}

transport::OutgoingFrame MakeHalfCloseFrame(uint64_t call_id) {
  return BareFrame(CallHeader::kHalfClose, call_id);
}

transport::OutgoingFrame MakeWindowFrame(uint64_t call_id, uint64_t messages,
                                         uint64_t bytes) {
  CallHeader header;
  header.set_kind(CallHeader::kWindow);
  header.set_call_id(call_id);
  header.set_window(messages, bytes);
  return Frame(header, Payload());
}

transport::OutgoingFrame MakeGoAwayFrame() {
  return BareFrame(CallHeader::kGoAway, 0);
}

Status DecodeCallHeader(const transport::ReceivedFrame& frame,
                        CallHeader& header) {
  if (!CallHeader::DecodeInto(frame.header(), header)) {
    return ProtocolError("call header does not parse");
  }
  switch (header.kind()) {
    case CallHeader::kRequest:
      if (header.method_id() != 0) {
        if (!header.service().empty() || !header.method().empty()) {
          return ProtocolError(
              "request names its method both by id and by name");
        }
      } else if (header.service().empty() || header.method().empty()) {
        return ProtocolError("request without service or method");
      }
      if (header.stream() < CallHeader::kUnary ||
          header.stream() > CallHeader::kBidiStreaming) {
        return ProtocolError("unknown stream kind " +
                             std::to_string(header.stream()));
      }
      break;
    case CallHeader::kResponse:
    case CallHeader::kCancel:
    case CallHeader::kMessage:
      break;
    case CallHeader::kHalfClose:
      if (header.payload_size() != 0) {
        return ProtocolError("HALF_CLOSE with a payload");
      }
      break;
    case CallHeader::kWindow:
      if (header.payload_size() != 0) {
        return ProtocolError("WINDOW with a payload");
      }
      if (header.window_messages() == 0 && header.window_bytes() == 0) {
        return ProtocolError("WINDOW that opens nothing");
      }
      break;
    case CallHeader::kGoAway:
      if (header.payload_size() != 0 || header.call_id() != 0) {
        return ProtocolError("GOAWAY with a call id or a payload");
      }
      break;
    default:
      return ProtocolError("unknown call kind " +
                           std::to_string(header.kind()));
  }
  if (!header.trailers().empty() || !header.metadata().empty()) [[unlikely]] {
    if (!header.trailers().empty() && header.kind() != CallHeader::kResponse) {
      return ProtocolError("trailers on a frame other than a RESPONSE");
    }
    if (!header.metadata().empty() && header.kind() != CallHeader::kRequest &&
        header.kind() != CallHeader::kResponse &&
        header.kind() != CallHeader::kMessage) {
      return ProtocolError(
          "metadata on a CANCEL, HALF_CLOSE, WINDOW or GOAWAY");
    }
  }
  const uint64_t carried = frame.dropped_payload_size() > 0
                               ? frame.dropped_payload_size()
                               : frame.payload_size();
  if (header.out_of_band_count() == 0 && header.payload_size() != carried) {
    return ProtocolError(
        "header says " + std::to_string(header.payload_size()) +
        " payload bytes, frame carries " + std::to_string(carried));
  }
  if (header.attachment_size() > header.payload_size()) {
    return ProtocolError("header says the attachment is " +
                         std::to_string(header.attachment_size()) +
                         " of the payload's " +
                         std::to_string(header.payload_size()) + " bytes");
  }
  return Status();
}

StatusOr<std::string> EncodeOutgoingMetadata(const Metadata& metadata,
                                             std::string_view what) {
  if (metadata.empty()) return std::string();
  if (Status valid = ValidateMetadata(metadata, what); !valid.ok()) {
    return valid;
  }
  if (const size_t size = metadata.AccountedSize();
      size > tunables::kMaxMetadataSize) {
    return Status(StatusCode::kResourceExhausted,
                  std::string(what) + " of " + std::to_string(size) +
                      " bytes exceeds the " +
                      std::to_string(tunables::kMaxMetadataSize) +
                      " a call may send");
  }
  return EncodeMetadata(metadata);
}

void AppendToHeader(transport::OutgoingFrame& frame, std::string_view fields) {
  const size_t before = frame.header.size();
  transport::HeaderBytes header;
  std::byte* out = header.Prepare(before + fields.size());
  std::memcpy(out, frame.header.data(), before);
  std::memcpy(out + before, fields.data(), fields.size());
  header.Commit(before + fields.size());
  frame.header = std::move(header);
}

Status ReadBulk(std::string_view field, std::vector<BulkDescriptor>& out,
                std::optional<BulkDescriptor>& destination) {
  const auto* bytes = reinterpret_cast<const std::byte*>(field.data());
  for (size_t at = 0, index = 0; at < field.size(); ++index) {
    const std::span<const std::byte> rest(bytes + at, field.size() - at);
    const size_t size = BulkDescriptor::EncodedSizeAt(rest);
    std::optional<BulkDescriptor> descriptor;
    if (size != 0 && size <= rest.size() &&
        index < tunables::kMaxBulkLoansPerCall) {
      descriptor = BulkDescriptor::Decode(rest.first(size));
    }
    if (!descriptor || (descriptor->response_destination &&
                        (destination || !descriptor->writable()))) {
      out.clear();
      destination.reset();
      return Status(StatusCode::kInvalidArgument,
                    index >= tunables::kMaxBulkLoansPerCall
                        ? "malformed bulk field: more than " +
                              std::to_string(tunables::kMaxBulkLoansPerCall) +
                              " descriptors"
                        : "malformed bulk descriptor " + std::to_string(index));
    }
    if (descriptor->response_destination) {
      destination = *descriptor;
    } else {
      out.push_back(*descriptor);
    }
    at += size;
  }
  return Status();
}

Status ReadMetadata(std::string_view block, size_t limit, std::string_view what,
                    std::string_view receiver, StatusCode malformed,
                    Metadata* out) {
  if (block.empty()) return Status();
  Metadata decoded;
  if (!DecodeMetadata(block, decoded)) {
    return Status(malformed, std::string(what) + " does not parse");
  }
  if (const size_t size = decoded.AccountedSize(); size > limit) {
    return Status(StatusCode::kResourceExhausted,
                  std::string(what) + " of " + std::to_string(size) +
                      " bytes exceeds the " + std::string(receiver) +
                      "'s limit of " + std::to_string(limit));
  }
  if (Status valid = ValidateMetadata(decoded, what); !valid.ok()) {
    return Status(malformed, valid.message());
  }
  if (out != nullptr) *out = std::move(decoded);
  return Status();
}

Status DroppedPayloadStatus(const transport::ReceivedFrame& frame,
                            std::string_view what, std::string_view receiver,
                            std::string_view detail) {
  std::string message = std::string(what) + " of " +
                        std::to_string(frame.dropped_payload_size()) +
                        " bytes ";
  if (frame.drop_reason() == transport::DropReason::kMemoryLimit) {
    message += "refused: the " + std::string(receiver) +
               "'s registered-memory limit is reached";
  } else if (frame.drop_reason() == transport::DropReason::kPeerMemory) {
    message += "refused: the " + std::string(receiver) +
               " holds all the memory its peers may make it hold "
               "(rdmarpc::SetPeerMemoryLimit)";
  } else {
    message += "exceeds the " + std::string(receiver) + "'s maximum" +
               std::string(detail);
  }
  return Status(StatusCode::kResourceExhausted, std::move(message));
}

Status ErrorStatusFromHeader(const CallHeader& header) {
  const auto code = StatusCodeFromInt(header.status_code());
  if (!code) {
    return Status(StatusCode::kUnknown,
                  "peer sent unknown status code " +
                      std::to_string(header.status_code()) + ": " +
                      std::string(header.status_message()));
  }
  return Status(*code, std::string(header.status_message()));
}

}  // namespace rdmarpc::rpc
