// A stream's flow control: the windows each end keeps (docs/protocol.md,
// "Streams").
#ifndef RDMARPC_RPC_COMMON_STREAM_WINDOW_H_
#define RDMARPC_RPC_COMMON_STREAM_WINDOW_H_

#include <algorithm>
#include <cstdint>
#include <utility>

#include "rdmarpc/tunables.h"

namespace rdmarpc::rpc {

// One direction of a stream's flow control, as its writer sees it: how many
// more messages and bytes the reader has made room for. A message goes while
// at least one message and one byte of room are left, whatever its size: a
// message is never split, and the byte balance may go below zero, to be made
// up by the reader's WINDOWs (docs/protocol.md, "Streams"). Both ends keep
// exact balances, so a WINDOW counts the same whether it crossed messages
// in flight or not: the writer's balance is never above the reader's.
class SendWindow {
 public:
  // Over the initial window both ends start from.
  explicit SendWindow(uint64_t extra_messages = 0, uint64_t extra_bytes = 0) {
    Open(extra_messages, extra_bytes);
  }
  bool HasRoom() const { return messages_ > 0 && bytes_ > 0; }
  // A message of `size` bytes goes; HasRoom() must be true.
  void Take(uint64_t size) {
    messages_--;
    // A frame's payload is a u32 (transport/frame.h): bytes_ stays above
    // -2^32, and Open's kLimit - bytes_ within range.
    bytes_ -= static_cast<int64_t>(std::min<uint64_t>(size, uint64_t{1} << 32));
  }
  // The reader's WINDOW. A peer's huge grant saturates.
  void Open(uint64_t messages, uint64_t bytes) {
    constexpr auto kMessageLimit = static_cast<uint64_t>(kLimit);
    messages_ = messages > kMessageLimit - messages_ ? kMessageLimit
                                                     : messages_ + messages;
    const uint64_t room = static_cast<uint64_t>(kLimit - bytes_);  // > 0.
    bytes_ = bytes >= room ? kLimit : bytes_ + static_cast<int64_t>(bytes);
  }

 private:
  // Far beyond any window; keeps the arithmetic clear of overflow.
  static constexpr int64_t kLimit = int64_t{1} << 62;
  uint64_t messages_ = tunables::kInitialStreamWindowMessages;
  int64_t bytes_ = static_cast<int64_t>(tunables::kInitialStreamWindowBytes);
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
    if (messages_ == 0 || bytes_ <= 0) return false;
    messages_--;
    bytes_ -= static_cast<int64_t>(std::min<uint64_t>(size, kMaxSize));
    return true;
  }
  // A message of `size` bytes was read: the WINDOW to send (messages,
  // bytes), when one is due.
  std::optional<std::pair<uint64_t, uint64_t>> Consume(uint64_t size) {
    consumed_messages_++;
    consumed_bytes_ += std::min<uint64_t>(size, kMaxSize);
    if (consumed_messages_ * 2 < tunables::kInitialStreamWindowMessages &&
        consumed_bytes_ * 2 < tunables::kInitialStreamWindowBytes) {
      return std::nullopt;
    }
    const uint64_t messages = std::min(
        consumed_messages_, tunables::kInitialStreamWindowMessages - messages_);
    const uint64_t bytes = std::min<uint64_t>(
        consumed_bytes_,
        static_cast<uint64_t>(kInitialBytes - std::min(bytes_, kInitialBytes)));
    consumed_messages_ = consumed_bytes_ = 0;
    if (messages == 0 && bytes == 0) return std::nullopt;
    messages_ += messages;
    bytes_ += static_cast<int64_t>(bytes);
    return std::make_pair(messages, bytes);
  }

 private:
  static constexpr int64_t kInitialBytes =
      static_cast<int64_t>(tunables::kInitialStreamWindowBytes);
  // A frame's payload is a u32 (transport/frame.h).
  static constexpr uint64_t kMaxSize = uint64_t{1} << 32;
  uint64_t messages_ = tunables::kInitialStreamWindowMessages;
  int64_t bytes_ = kInitialBytes;
  uint64_t consumed_messages_ = 0;
  uint64_t consumed_bytes_ = 0;
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_COMMON_STREAM_WINDOW_H_
