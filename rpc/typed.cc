#include "rpc/typed.h"

#include <limits>

namespace rdmarpc::rpc {

Buffer SerializeMessage(const google::protobuf::MessageLite& message) {
  Buffer out = Buffer::Allocate(message.ByteSizeLong());
  message.SerializeWithCachedSizesToArray(
      reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

Status ParseMessage(const Buffer& bytes,
                    google::protobuf::MessageLite& message) {
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return Status(StatusCode::kResourceExhausted,
                  "payload of " + std::to_string(bytes.size()) +
                      " bytes exceeds what protobuf parses (2 GiB)");
  }
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Status(StatusCode::kInvalidArgument,
                  "payload of " + std::to_string(bytes.size()) +
                      " bytes does not parse as " + message.GetTypeName());
  }
  return Status();
}

}  // namespace rdmarpc::rpc
