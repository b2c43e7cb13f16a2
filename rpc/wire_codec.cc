#include "rpc/wire_codec.h"

#include <string>

#include "base/tunables.h"

namespace rdmarpc::rpc {
namespace {

Buffer Serialize(const wire::CallHeader& header) {
  Buffer out = Buffer::Allocate(header.ByteSizeLong());
  header.SerializeWithCachedSizesToArray(
      reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

transport::OutgoingFrame Frame(const wire::CallHeader& header, Buffer payload) {
  transport::OutgoingFrame frame;
  frame.header = Serialize(header);
  frame.AddPayload(std::move(payload));
  return frame;
}

Status ProtocolError(const std::string& why) {
  return Status(StatusCode::kInternal, "protocol error: " + why);
}

}  // namespace

transport::OutgoingFrame MakeRequestFrame(uint64_t call_id,
                                          std::string_view service,
                                          std::string_view method,
                                          uint64_t timeout_us, Buffer request) {
  wire::CallHeader header;
  header.set_kind(wire::CallHeader::REQUEST);
  header.set_call_id(call_id);
  header.set_service(service.data(), service.size());
  header.set_method(method.data(), method.size());
  header.set_timeout_us(timeout_us);
  header.set_payload_size(request.size());
  return Frame(header, std::move(request));
}

transport::OutgoingFrame MakeResponseFrame(uint64_t call_id,
                                           const Status& status,
                                           Buffer response) {
  wire::CallHeader header;
  header.set_kind(wire::CallHeader::RESPONSE);
  header.set_call_id(call_id);
  header.set_status_code(static_cast<int32_t>(status.code()));
  const std::string& message = status.message();
  if (message.size() > tunables::kMaxStatusMessageSize) {
    header.set_status_message(
        message.substr(0, tunables::kMaxStatusMessageSize) + "...");
  } else {
    header.set_status_message(message);
  }
  if (!status.ok()) response.Reset();  // An error carries no payload.
  header.set_payload_size(response.size());
  return Frame(header, std::move(response));
}

transport::OutgoingFrame MakeCancelFrame(uint64_t call_id) {
  wire::CallHeader header;
  header.set_kind(wire::CallHeader::CANCEL);
  header.set_call_id(call_id);
  return Frame(header, Buffer());
}

StatusOr<wire::CallHeader> DecodeCallHeader(
    const transport::ReceivedFrame& frame) {
  wire::CallHeader header;
  const auto bytes = frame.header();
  if (!header.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return ProtocolError("call header does not parse");
  }
  switch (header.kind()) {
    case wire::CallHeader::REQUEST:
      if (header.service().empty() || header.method().empty()) {
        return ProtocolError("request without service or method");
      }
      break;
    case wire::CallHeader::RESPONSE:
    case wire::CallHeader::CANCEL:
      break;
    default:
      return ProtocolError("unknown call kind " +
                           std::to_string(header.kind()));
  }
  const uint64_t carried = frame.dropped_payload_size() > 0
                               ? frame.dropped_payload_size()
                               : frame.payload_size();
  if (header.out_of_band_size() == 0 && header.payload_size() != carried) {
    return ProtocolError(
        "header says " + std::to_string(header.payload_size()) +
        " payload bytes, frame carries " + std::to_string(carried));
  }
  return header;
}

Status StatusFromHeader(const wire::CallHeader& header) {
  const auto code = StatusCodeFromInt(header.status_code());
  if (!code) {
    return Status(StatusCode::kUnknown,
                  "peer sent unknown status code " +
                      std::to_string(header.status_code()) + ": " +
                      header.status_message());
  }
  return Status(*code, header.status_message());
}

}  // namespace rdmarpc::rpc
