// The state behind a ClientStream (include/rdmarpc/channel.h), shared by the
// stream and its Channel, which routes the stream's frames to it. Internal to
// the rpc layer.
#ifndef RDMARPC_RPC_CLIENT_CLIENT_STREAM_STATE_H_
#define RDMARPC_RPC_CLIENT_CLIENT_STREAM_STATE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "rdmarpc/client_stream.h"
#include "rdmarpc/status.h"
#include "rdmarpc/stream.h"
#include "rdmarpc/unique_function.h"
#include "rpc/client/callback_runner.h"
#include "rpc/common/stream_window.h"
#include "transport/connection.h"

namespace rdmarpc::rpc {

// What a ClientStream's state needs of its channel; the channel may be gone
// before the stream (the state holds it weakly).
class StreamHost {
 public:
  virtual ~StreamHost() = default;
  // Sends a frame of call `id` after its REQUEST; false once the call has
  // ended.
  virtual bool SendStreamFrame(uint64_t id, transport::OutgoingFrame frame) = 0;
  // Ends call `id` with `why` and tells the server.
  virtual void EndCall(uint64_t id, const Status& why) = 0;
  // Runs a user callback where the channel runs them.
  virtual void PostCallback(UniqueFunction<void()> task) = 0;
  virtual void ForgetStream(uint64_t id) = 0;
};

struct ClientStreamState {
  ClientStreamState(std::weak_ptr<StreamHost> channel, StreamKind stream_kind)
      : host(std::move(channel)), kind(stream_kind) {}

  const std::weak_ptr<StreamHost> host;
  const StreamKind kind;
  uint64_t id = 0;  // Set once the call has started.
  // Where the server's response headers go (CallOptions::response_metadata);
  // written on the channel's loop before the message they came with is
  // delivered.
  std::shared_ptr<ResponseMetadata> response_metadata;

  std::mutex mu;
  // The server's messages not yet read, and a Read waiting for one.
  std::deque<Payload> inbox;
  StreamReadCallback reader;
  ReceiveWindow receive;
  // Our messages: the server's room for them, and a Write waiting for it.
  SendWindow send;
  std::optional<Payload> pending;
  StreamWriteCallback writer;
  bool writes_done = false;  // WritesDone called.
  bool half_closed = false;  // HALF_CLOSE sent.
  // The call's end.
  bool ended = false;
  Status status;
  Payload response;
  ResponseCallback finisher;
  bool finished = false;  // Finish called.

  void Post(UniqueFunction<void()> task) {
    auto guarded = [task = std::move(task)]() mutable { InvokeGuarded(task); };
    if (auto channel = host.lock()) {
      return channel->PostCallback(std::move(guarded));
    }
    guarded();  // The channel is gone: nothing else runs them.
  }
  bool Send(transport::OutgoingFrame frame) {
    auto channel = host.lock();
    return channel && channel->SendStreamFrame(id, std::move(frame));
  }

  // The channel's side, on its loop thread.
  void OnMessage(Payload message);
  void OnWindow(uint64_t messages, uint64_t bytes);
  // The call's end (its completion callback, where the channel runs them).
  void OnEnd(const Status& end, Payload final_response);
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_CLIENT_CLIENT_STREAM_STATE_H_
