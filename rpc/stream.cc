#include "rpc/stream.h"

#include "rpc/call_header.h"

namespace rdmarpc::rpc {

static_assert(static_cast<int>(StreamKind::kClientStreaming) ==
                  CallHeader::kClientStreaming &&
              static_cast<int>(StreamKind::kServerStreaming) ==
                  CallHeader::kServerStreaming &&
              static_cast<int>(StreamKind::kBidiStreaming) ==
                  CallHeader::kBidiStreaming);

const char* StreamKindName(StreamKind kind) {
  switch (kind) {
    case StreamKind::kUnary:
      return "unary";
    case StreamKind::kClientStreaming:
      return "client-streaming";
    case StreamKind::kServerStreaming:
      return "server-streaming";
    case StreamKind::kBidiStreaming:
      return "bidi-streaming";
  }
  return "unknown";
}

}  // namespace rdmarpc::rpc
