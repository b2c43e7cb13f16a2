// Subchannel (rpc/client/subchannel.h): the frames that come back, on the
// connection's event loop: responses, a stream's messages, windows and
// half-closes (a GOAWAY goes to OnGoAway). rpc/client/subchannel.cc has the
// call path.
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/latency_trace.h"
#include "base/log.h"
#include "rpc/client/bulk_loans.h"
#include "rpc/client/subchannel.h"
#include "rpc/wire/wire_codec.h"

namespace rdmarpc::rpc {

using transport::Connection;
using transport::ReceivedFrame;

void Subchannel::OnFrame(ReceivedFrame&& frame) {
  RDMARPC_TRACE(0, "channel_on_frame");
  CallHeader header;
  Status decoded = DecodeCallHeader(frame, header);
  if (decoded.ok()) [[likely]] {
    if (header.kind() == CallHeader::kResponse) [[likely]] {
      return OnResponse(header, frame);
    }
    if (header.kind() == CallHeader::kMessage ||
        header.kind() == CallHeader::kWindow) {
      return OnStreamFrame(header, frame);
    }
    if (header.kind() == CallHeader::kGoAway) return OnGoAway();
    decoded = Status(StatusCode::kInternal,
                     "protocol error: server sent a frame of kind " +
                         std::to_string(header.kind()) +
                         ", which only a client sends");
  }
  Log().warn("{}: closing connection: {}", target_, decoded.message());
  std::lock_guard lock(mu_);
  if (connection_) connection_->Close(decoded);
}

Status Subchannel::ReadResponseMetadata(const CallHeader& header,
                                        ResponseMetadata* sink) const {
  Status read =
      ReadMetadata(header.metadata(), options_.max_metadata_size,
                   "response headers", "channel", StatusCode::kInternal,
                   sink != nullptr ? &sink->headers : nullptr);
  if (!read.ok()) return read;
  return ReadMetadata(header.trailers(), options_.max_metadata_size,
                      "response trailers", "channel", StatusCode::kInternal,
                      sink != nullptr ? &sink->trailers : nullptr);
}

void Subchannel::OnStreamFrame(const CallHeader& header, ReceivedFrame& frame) {
  std::shared_ptr<ClientStreamState> stream;
  {
    std::lock_guard lock(mu_);
    if (const auto it = streams_.find(header.call_id());
        it != streams_.end() && calls_.Contains(header.call_id())) {
      stream = it->second;
    } else {
      // The call has ended (its frames may cross its end) or never
      // streamed. Dropped; the connection goes on.
      ++stats_.stream_frames_dropped;
      return;
    }
  }
  if (header.kind() == CallHeader::kWindow) {
    return stream->OnWindow(header.window_messages(), header.window_bytes());
  }
  if (!header.metadata().empty()) [[unlikely]] {
    // The server's response headers, with its first message.
    ResponseMetadata* sink = stream->response_metadata.get();
    const Status read =
        ReadMetadata(header.metadata(), options_.max_metadata_size,
                     "response headers", "channel", StatusCode::kInternal,
                     sink != nullptr ? &sink->headers : nullptr);
    if (!read.ok()) return EndCall(header.call_id(), read);
  }
  if (frame.dropped_payload_size() > 0) {
    return EndCall(
        header.call_id(),
        DroppedPayloadStatus(
            frame, "stream message", "channel",
            " of " + std::to_string(options_.transport.max_payload_size)));
  }
  return stream->OnMessage(
      SplitPayload(std::move(frame).TakePayload(), header.attachment_size()));
}

// Inlined into its one caller, on the call path: split out for reading only.
[[gnu::always_inline]] inline void Subchannel::OnResponse(
    const CallHeader& header, ReceivedFrame& frame) {
  ResponseCallback done;
  std::shared_ptr<ResponseMetadata> sink;
  bool found;
  // Requests the window held, sent once this response frees room. An
  // optional: an empty vector's destructor was an out-of-line call (23
  // instructions) on every response.
  std::optional<std::vector<Waiting>> released;
  std::shared_ptr<Connection> connection;
  bool misplaced = false;
  std::shared_ptr<BulkLoans> release;  // Null on the call path.
  {
    std::lock_guard lock(mu_);
    // The server wrote the attachment into the call's destination: Land
    // (bulk_loans.h) makes that the response's attachment.
    if (header.placed_size() != 0) [[unlikely]] {
      BulkLoans* loans = calls_.LoansOf(header.call_id());
      misplaced = loans == nullptr || !loans->SetPlaced(header.placed_size());
    }
    found = calls_.Take(header.call_id(), &done, &sink);
    if (!found) [[unlikely]] {
      // The answer a call the client ended waits for (bulk_loans.h), or a
      // response that came too late.
      release = awaiting_release_.empty()
                    ? nullptr
                    : TakeAwaitingLocked(header.call_id(), false);
      if (!release) ++stats_.late_responses_dropped;
    }
    if (!held_.empty()) [[unlikely]]
      connection = ReleaseHeld(&released.emplace());
  }
  // The next requests leave before this call's callback runs.
  if (released && !released->empty()) SendReleased(connection, *released);
  if (!found) [[unlikely]] {
    if (release) return release->Released();
    Log().debug("{}: dropped late response to call {}", target_,
                header.call_id());
    return;
  }
  Status status = StatusFromHeader(header);
  if (frame.dropped_payload_size() > 0) {
    status = DroppedPayloadStatus(
        frame, "response", "channel",
        " of " + std::to_string(options_.transport.max_payload_size));
  }
  if (!header.metadata().empty() || !header.trailers().empty()) [[unlikely]] {
    Status read = ReadResponseMetadata(header, sink.get());
    // The server's own error says more than what came with it.
    if (!read.ok() && status.ok()) status = std::move(read);
  }
  if (misplaced) [[unlikely]] {
    status = Status(StatusCode::kInternal,
                    "the server wrote " + std::to_string(header.placed_size()) +
                        " bytes into a response destination the call did not "
                        "give, or one too small");
  }
  RDMARPC_TRACE(0, "callback");
  Deliver(done, status,
          status.ok() ? SplitPayload(std::move(frame).TakePayload(),
                                     header.attachment_size())
                      : Payload());
}

}  // namespace rdmarpc::rpc
