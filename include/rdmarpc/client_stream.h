// ClientStream: a streaming call as its caller sees it (Channel::OpenStream,
// include/rdmarpc/channel.h). Its state and the frames it sends live in
// rpc/client/.
#ifndef RDMARPC_CLIENT_STREAM_H_
#define RDMARPC_CLIENT_STREAM_H_

#include <memory>

#include "rdmarpc/metadata.h"
#include "rdmarpc/payload.h"
#include "rdmarpc/stream.h"

namespace rdmarpc {

namespace rpc {
struct ClientStreamState;  // rpc/client/client_stream_state.h
}  // namespace rpc

// A streaming call, from Channel::OpenStream (docs/protocol.md, "Streams").
// Write and Read allow one outstanding operation each, from any thread;
// their callbacks run where the channel's callbacks run, never inside Write
// or Read. Flow control is per call and direction: a Write completes once
// the server's window lets the message go, so a writer that outruns its
// reader waits; messages read are given back to the server's window.
// Deadline and cancellation (CallOptions) cover the whole call.
class ClientStream {
 public:
  // Made by Channel::OpenStream.
  explicit ClientStream(std::shared_ptr<rpc::ClientStreamState> state);
  ~ClientStream();  // Cancels the call if it has not ended.
  ClientStream(const ClientStream&) = delete;
  ClientStream& operator=(const ClientStream&) = delete;

  // Client- and bidi-streaming: sends `message` to the server.
  void Write(Payload message, StreamWriteCallback done);
  // Client- and bidi-streaming: no more messages (a half-close).
  void WritesDone();
  // Server- and bidi-streaming: the server's next message, or none at the
  // end with the call's status.
  void Read(StreamReadCallback done);
  // Once: the call's status when it ends, with the response of a
  // client-streaming call (a second Finish gets FAILED_PRECONDITION). It may
  // run before the callbacks of Reads already completed: read to the end
  // first when the order matters.
  void Finish(ResponseCallback done);
  // Ends the call CANCELLED and tells the server.
  void Cancel();
  // The server's response headers, once a Read delivered its first message
  // or the call ended; its trailers once it ended. (They are also in
  // CallOptions::response_metadata, if the call set it.)
  const Metadata& response_headers() const;
  const Metadata& response_trailers() const;

 private:
  std::shared_ptr<rpc::ClientStreamState> state_;
};

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace rpc {
using rdmarpc::ClientStream;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_CLIENT_STREAM_H_
