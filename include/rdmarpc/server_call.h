// ServerCall: one incoming call as its handler sees it.
//
// The handler reads the request, deadline and cancellation, and finishes the
// call exactly once with Finish(), from any thread, now or later. A call
// dropped without Finish() is answered INTERNAL (and logged), so a client
// never waits on a handler that forgot it; once the call is cancelled or past
// its deadline, the handler may just drop it, as in gRPC.
//
// A streaming call (Service::AddStreamingMethod) also reads the client's
// messages with Read and sends its own with Write, one of each outstanding
// at a time, from any thread. Their callbacks run on the connection's event
// loop (or the server's handler executor, ServerOptions::handler_threads),
// never inside Read or Write. Flow control is per call and per direction
// (docs/protocol.md, "Streams"): a Write completes once the client's window
// lets the message go, so a writer that outruns its reader waits; messages
// read are given back to the client's window as they are consumed.
#ifndef RDMARPC_SERVER_CALL_H_
#define RDMARPC_SERVER_CALL_H_

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rdmarpc/buffer.h"
#include "rdmarpc/bulk.h"
#include "rdmarpc/call_options.h"
#include "rdmarpc/metadata.h"
#include "rdmarpc/payload.h"
#include "rdmarpc/peer_identity.h"
#include "rdmarpc/status.h"
#include "rdmarpc/stream.h"
#include "rdmarpc/unique_function.h"

namespace rdmarpc {

// The implementation's.
namespace rpc {
class ServerSession;   // rpc/server/server_session.h
struct MethodMetrics;  // rpc/server/metrics.h
}  // namespace rpc
namespace transport {
struct OutgoingFrame;  // transport/connection.h
}  // namespace transport

class ServerCall {
 public:
  // `service` and `method` live as long as the session (the server's
  // registry of services).
  ServerCall(std::shared_ptr<rpc::ServerSession> session, uint64_t id,
             const std::string& service, const std::string& method,
             Payload&& request, std::optional<Clock::time_point> deadline,
             rpc::MethodMetrics* metrics = nullptr);
  ~ServerCall();
  ServerCall(const ServerCall&) = delete;
  ServerCall& operator=(const ServerCall&) = delete;

  const std::string& service() const { return *service_; }
  const std::string& method() const { return *method_; }
  // The request's message. With an attachment, a window on the same block
  // as it (include/rdmarpc/payload.h).
  const Buffer& request() const { return request_; }
  // The request's attachment; empty if it has none. The handler may take it
  // to keep its bytes beyond the call (into a store, say) without a copy.
  const Buffer& request_attachment() const { return request_attachment_; }
  Buffer TakeRequestAttachment() { return std::move(request_attachment_); }
  // The request's bytes, message and attachment.
  uint64_t request_size() const { return request_size_; }
  // When the client stops waiting, if it set a deadline.
  std::optional<Clock::time_point> deadline() const { return deadline_; }
  // Who the peer proved to be over TLS (rdmarpc/peer_identity.h); not
  // authenticated() on a connection without TLS.
  const PeerIdentity& peer_identity() const;
  // The event loop of the call's connection: where a coroutine handler
  // runs (SpawnHandler, include/rdmarpc/awaitable.h).
  boost::asio::any_io_executor executor() const;

  // Metadata (include/rdmarpc/metadata.h). The client's request headers.
  const Metadata& request_metadata() const {
    return metadata_ ? metadata_->request : EmptyMetadata();
  }
  // For interceptors (include/rdmarpc/interceptor.h): they may rewrite the
  // headers before the handler sees them.
  Metadata& mutable_request_metadata() { return Meta().request; }
  // Response headers go with the call's first frame to the client: a
  // streaming call's first Write, else Finish's. Trailers go with Finish.
  // Set them from the handler before then, not beside a Write on another
  // thread; changes after they went are not sent. Keys or values the rules
  // refuse, or a block above kMaxMetadataSize, end the call INTERNAL.
  Metadata& response_headers() { return Meta().headers; }
  Metadata& response_trailers() { return Meta().trailers; }

  // True once the client cancelled, the connection was lost, or the deadline
  // passed. Work on a cancelled call is wasted: its response is dropped.
  bool IsCancelled() const;

  // Runs `on_cancel` once when the client cancels or the connection is lost
  // (at once if that already happened). Any thread; replaces a previous one.
  void OnCancel(std::function<void()> on_cancel);

  // Sends the response (only when `status` is OK) or the error status. The
  // first call counts; later ones are logged and ignored. A Buffer is a
  // response without an attachment. A server- or bidi-streaming call's
  // response carries no message: its messages went by Write.
  void Finish(const Status& status, Payload&& response = Payload());

  // Bulk (include/rdmarpc/bulk.h). The client's loans to this call, in the
  // order it lent them; empty when it lent none.
  std::span<const BulkDescriptor> bulk() const {
    return metadata_ ? std::span<const BulkDescriptor>(metadata_->bulk)
                     : std::span<const BulkDescriptor>();
  }
  // Copies [offset, offset + destination.size()) of `loan` into
  // `destination`; Push copies `source` into the loan at `offset`. Local
  // memory must lie inside a live MemoryRegistration (INVALID_ARGUMENT
  // otherwise, never a hidden copy) and stay valid until `done` runs, once,
  // where stream callbacks run. Errors: OUT_OF_RANGE or PERMISSION_DENIED
  // (checked before anything moves), CANCELLED (the call was cancelled or
  // past its deadline before the transfer began), UNAVAILABLE (the
  // connection was lost). A loan whose call has ended on the client: over
  // TCP FAILED_PRECONDITION; over RDMA the device refuses the access and
  // the connection fails (UNAVAILABLE). Over RDMA these are one-sided READs
  // and WRITEs the client's CPU takes no part in; over TCP the bytes go
  // over the socket.
  void Pull(const BulkDescriptor& loan, uint64_t offset,
            std::span<std::byte> destination,
            UniqueFunction<void(const Status&)> done);
  void Push(std::span<const std::byte> source, const BulkDescriptor& loan,
            uint64_t offset, UniqueFunction<void(const Status&)> done);

  // Streaming calls only (kind() says which way).
  StreamKind kind() const;
  // The client's next message (client- and bidi-streaming).
  void Read(StreamReadCallback done);
  // Sends `message` to the client (server- and bidi-streaming).
  void Write(Payload message, StreamWriteCallback done);

 private:
  friend class rpc::ServerSession;
  // Called by the session; false if the call was cancelled already.
  bool MarkCancelled();
  // The session ends a streaming call with `why` (a broken window, a frame
  // it could not send): cancelled, and answered `why` once.
  void EndWith(const Status& why);

  // What a streaming call adds (server_call.cc); guarded by mu_.
  struct Stream;
  // Session side, on the connection's thread.
  void StartStream(StreamKind kind, uint64_t window_messages,
                   uint64_t window_bytes);
  // False: the message broke the window we granted.
  bool OnStreamMessage(Payload message);
  void OnHalfClose();
  void OnWindow(uint64_t messages, uint64_t bytes);
  // Fails a waiting Read and Write with `why`; later ones too.
  void EndStream(const Status& why);
  // Runs a stream callback off the caller's stack.
  void Post(UniqueFunction<void()> task);
  // A MESSAGE frame of this call, with the response headers if it is the
  // first; an error if they break the rules. Under mu_.
  StatusOr<transport::OutgoingFrame> MessageFrameLocked(Payload message);

  const std::shared_ptr<rpc::ServerSession> session_;
  const uint64_t id_;
  const std::string* const service_;
  const std::string* const method_;
  const uint64_t request_size_;  // Message and attachment.
  const Buffer request_;
  Buffer request_attachment_;
  const std::optional<Clock::time_point> deadline_;
  // A call's metadata, made on first use: most calls have none, and pay a
  // null pointer for it.
  struct CallMetadata {
    Metadata request;  // Set by the session before the handler runs.
    Metadata headers;
    Metadata trailers;
    std::vector<BulkDescriptor> bulk;  // The client's loans.
    // Where the response's attachment goes (CallOptions::ResponseInto),
    // how much was written there, and the call itself, held while it is.
    std::optional<BulkDescriptor> destination;
    uint64_t placed = 0;
    std::weak_ptr<ServerCall> self;
    // Pulls and Pushes of the loans under way (the library's own into the
    // destination too), and whether the client cancelled meanwhile: its
    // answer waits for them (ReleaseLoans). Guarded by mu_.
    uint32_t bulk_under_way = 0;
    bool release_owed = false;
  };
  // Whether the client lent this call memory (set before the handler runs).
  bool HoldsLoans() const {
    return metadata_ && (!metadata_->bulk.empty() || metadata_->destination);
  }
  // Counts a Pull or Push as under way before the transport moves anything;
  // CANCELLED once the call is cancelled or past its deadline.
  std::optional<Status> BeginBulk();
  // A Pull or Push ended: a cancelled call's answer owed is sent now.
  void EndBulk();
  // The client cancelled this call (or its deadline passed): over RDMA its
  // loans are windows that it invalidates once told the server will touch
  // them no more, so a READ or WRITE already posted never meets a dead key,
  // which would break the connection for every call on it. Answers
  // CANCELLED at once, or when the last Pull or Push under way ends.
  void ReleaseLoans();
  // Finish for an OK response whose attachment goes into the client's
  // destination.
  void FinishIntoDestination(Payload&& response);
  // `done`, run where stream callbacks run (Post) once the transport ends
  // a Pull or Push; after EndBulk if BeginBulk `counted` it.
  UniqueFunction<void(const Status&)> BulkDone(
      UniqueFunction<void(const Status&)> done, bool counted) const;
  CallMetadata& Meta() {
    if (!metadata_) metadata_ = std::make_unique<CallMetadata>();
    return *metadata_;
  }
  static const Metadata& EmptyMetadata();
  std::unique_ptr<CallMetadata> metadata_;
  // How many of the server's interceptors let the call through (their
  // OnEnd runs), and when the first saw it. Set before the handler runs.
  uint32_t intercepted_ = 0;
  Clock::time_point intercepted_at_;
  bool headers_sent_ = false;          // With a MESSAGE; guarded by mu_.
  rpc::MethodMetrics* const metrics_;  // Lives in the server's core.
  // Its method's count of running calls, when the method has a limit
  // (ServerOptions::method_max_concurrency), and the server's, when it has
  // one (max_concurrency): given back as the call's response goes.
  std::atomic<int64_t>* method_running_ = nullptr;
  std::atomic<int64_t>* server_running_ = nullptr;
  // For the metrics' latency only: when the request was taken in, shared by
  // the calls of one read or completion poll (a clock read is not free
  // everywhere: 3.3 us in the emulated test VM).
  const Clock::time_point started_;
  std::atomic<bool> finished_{false};
  std::atomic<bool> cancelled_{false};
  // Whether the session's table of live calls holds this call. Most calls
  // finish inside their handler and are never entered: the table is for
  // calls that outlive it (see ServerSession::OnFrame).
  enum Tracking : uint8_t { kNotYet, kTracked, kNever };
  std::atomic<uint8_t> tracking_{kNotYet};
  std::mutex mu_;
  std::function<void()> on_cancel_;  // Guarded by mu_.
  std::unique_ptr<Stream> stream_;   // Streaming calls only.
};

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace rpc {
using rdmarpc::ServerCall;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_SERVER_CALL_H_
