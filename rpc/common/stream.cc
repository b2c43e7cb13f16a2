#include "rdmarpc/stream.h"

namespace rdmarpc {

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

}  // namespace rdmarpc
