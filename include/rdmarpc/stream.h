// What both ends of a streaming call share (docs/protocol.md, "Streams"):
// its kind and the callbacks of reading and writing its messages.
#ifndef RDMARPC_STREAM_H_
#define RDMARPC_STREAM_H_

#include <cstdint>
#include <optional>
#include <utility>

#include "rdmarpc/payload.h"
#include "rdmarpc/status.h"
#include "rdmarpc/unique_function.h"

namespace rdmarpc {

// Which way a call streams; the values are the wire's (CallHeader's
// `stream`).
enum class StreamKind : int32_t {
  kUnary = 0,
  kClientStreaming = 1,  // Messages from the client, one response.
  kServerStreaming = 2,  // One request, messages from the server.
  kBidiStreaming = 3     // Messages both ways.
};

inline bool ClientSends(StreamKind kind) {
  return kind == StreamKind::kClientStreaming ||
         kind == StreamKind::kBidiStreaming;
}
inline bool ServerSends(StreamKind kind) {
  return kind == StreamKind::kServerStreaming ||
         kind == StreamKind::kBidiStreaming;
}
const char* StreamKindName(StreamKind kind);

// The next message of a stream, or none at its end: `status` then says how
// it ended (OK: the writer finished, by a half-close or the call's OK end).
using StreamReadCallback =
    UniqueFunction<void(const Status& status, std::optional<Payload> message)>;
// OK once a written message is handed to the transport, which the reader's
// window may delay; else why the call ended first.
using StreamWriteCallback = UniqueFunction<void(const Status& status)>;

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace rpc {
using rdmarpc::ClientSends;
using rdmarpc::ServerSends;
using rdmarpc::StreamKind;
using rdmarpc::StreamKindName;
using rdmarpc::StreamReadCallback;
using rdmarpc::StreamWriteCallback;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_STREAM_H_
