// What both ends of a streaming call share (docs/protocol.md, "Streams"):
// its kind and the callbacks of reading and writing its messages.
#ifndef RDMARPC_RPC_STREAM_H_
#define RDMARPC_RPC_STREAM_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "base/status.h"
#include "base/tunables.h"
#include "base/unique_function.h"
#include "rpc/payload.h"

namespace rdmarpc::rpc {

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

// One direction of a stream's flow control, as its writer sees it: how many
// more messages and bytes the reader has made room for. A window counts
// down and stops at 0: a message may take more bytes than are left, so a
// message is never split (docs/protocol.md, "Streams").
class SendWindow {
 public:
  // Over the initial window both ends start from.
  explicit SendWindow(uint64_t extra_messages = 0, uint64_t extra_bytes = 0)
      : messages_(Add(tunables::kInitialStreamWindowMessages, extra_messages)),
        bytes_(Add(tunables::kInitialStreamWindowBytes, extra_bytes)) {}
  bool HasRoom() const { return messages_ > 0 && bytes_ > 0; }
  // A message of `size` bytes goes; HasRoom() must be true.
  void Take(uint64_t size) {
    messages_--;
    bytes_ = bytes_ > size ? bytes_ - size : 0;
  }
  // The reader's WINDOW.
  void Open(uint64_t messages, uint64_t bytes) {
    messages_ = Add(messages_, messages);
    bytes_ = Add(bytes_, bytes);
  }

 private:
  static uint64_t Add(uint64_t a, uint64_t b) {
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
  }
  uint64_t messages_;
  uint64_t bytes_;
};

// The same direction as its reader sees it: admits what arrives within the
// room it made, and makes room again as messages are read, in WINDOWs that
// each cover half the initial window or more. It never grants beyond the
// initial window in all, so a reader holds at most that window plus one
// message.
class ReceiveWindow {
 public:
  // False: a message beyond the room made for it (the writer broke the
  // protocol).
  bool Admit(uint64_t size) {
    if (messages_ == 0 || bytes_ == 0) return false;
    messages_--;
    bytes_ = bytes_ > size ? bytes_ - size : 0;
    return true;
  }
  // A message of `size` bytes was read: the WINDOW to send (messages,
  // bytes), when one is due.
  std::optional<std::pair<uint64_t, uint64_t>> Consume(uint64_t size) {
    consumed_messages_++;
    consumed_bytes_ += size;
    if (consumed_messages_ * 2 < tunables::kInitialStreamWindowMessages &&
        consumed_bytes_ * 2 < tunables::kInitialStreamWindowBytes) {
      return std::nullopt;
    }
    const uint64_t messages = std::min(
        consumed_messages_, tunables::kInitialStreamWindowMessages - messages_);
    const uint64_t bytes =
        std::min(consumed_bytes_, tunables::kInitialStreamWindowBytes - bytes_);
    consumed_messages_ = consumed_bytes_ = 0;
    if (messages == 0 && bytes == 0) return std::nullopt;
    messages_ += messages;
    bytes_ += bytes;
    return std::make_pair(messages, bytes);
  }

 private:
  uint64_t messages_ = tunables::kInitialStreamWindowMessages;
  uint64_t bytes_ = tunables::kInitialStreamWindowBytes;
  uint64_t consumed_messages_ = 0;
  uint64_t consumed_bytes_ = 0;
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_STREAM_H_
