#include "rdmarpc/typed.h"

#include <limits>

#include "base/buffer_pool.h"

namespace rdmarpc {

Buffer SerializeMessage(const google::protobuf::MessageLite& message) {
  // From the per-thread pools, as the frames' own buffers: no heap
  // allocation for a message of up to 32 KiB in steady state.
  Buffer out = PooledBuffer(message.ByteSizeLong());
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

Status NameMethodInError(const MethodRef& method, Status status) {
  if (status.code() != StatusCode::kUnimplemented) return status;
  std::string name(method.service());
  name += '/';
  name += method.method();
  if (status.message().find(name) != std::string::npos) return status;
  return Status(StatusCode::kUnimplemented, name + ": " + status.message());
}

namespace internal {

void* AllocatePerCall(size_t size) { return PoolAllocate(size); }
void FreePerCall(void* block, size_t size) noexcept { PoolFree(block, size); }

}  // namespace internal

}  // namespace rdmarpc
