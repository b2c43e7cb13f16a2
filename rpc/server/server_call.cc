#include "rdmarpc/server_call.h"

#include <deque>
#include <exception>
#include <optional>

#include "base/log.h"
#include "base/receive_clock.h"
#include "rdmarpc/memory.h"
#include "rdmarpc/tunables.h"
#include "rpc/common/stream_window.h"
#include "rpc/server/server_session.h"
#include "rpc/wire/wire_codec.h"

namespace rdmarpc {

// What a streaming call adds; guarded by mu_.
struct ServerCall::Stream {
  Stream(StreamKind stream_kind, uint64_t window_messages,
         uint64_t window_bytes)
      : kind(stream_kind), send(window_messages, window_bytes) {}
  const StreamKind kind;
  // Messages from the client not yet read, and a Read waiting for one.
  std::deque<Payload> inbox;
  StreamReadCallback reader;
  bool half_closed = false;
  // Flow control: what the client may send us, and we it.
  rpc::ReceiveWindow receive;
  rpc::SendWindow send;
  // A Write waiting for the client's room.
  std::optional<Payload> pending;
  StreamWriteCallback writer;
  // Set when the call ends: every later Read or Write gets it.
  Status ended;
  bool over = false;
};

StreamKind ServerCall::kind() const {
  return stream_ ? stream_->kind : StreamKind::kUnary;
}

// ------------------------------------------------------------- ServerCall --

ServerCall::ServerCall(std::shared_ptr<rpc::ServerSession> session, uint64_t id,
                       const std::string& service, const std::string& method,
                       Payload&& request,
                       std::optional<Clock::time_point> deadline,
                       rpc::MethodMetrics* metrics)
    : session_(std::move(session)),
      id_(id),
      service_(&service),
      method_(&method),
      request_size_(request.size()),
      request_(std::move(request.message)),
      request_attachment_(std::move(request.attachment)),
      deadline_(deadline),
      metrics_(metrics),
      started_(metrics != nullptr ? ReceiveClock::Now() : Clock::time_point()) {
}

ServerCall::~ServerCall() {
  if (finished_) return;
  if (IsCancelled()) {
    // A handler may just return once its call is cancelled or past its
    // deadline, as in gRPC: the client has its status already.
    Finish(Status(StatusCode::kCancelled, "the call was cancelled"));
    return;
  }
  Log().warn("{}/{}: handler dropped call {} without finishing it", *service_,
             *method_, id_);
  Finish(Status(StatusCode::kInternal,
                "the server's handler dropped the call without a response"));
}

const Metadata& ServerCall::EmptyMetadata() {
  static const Metadata empty;
  return empty;
}

bool ServerCall::IsCancelled() const {
  return cancelled_ || (deadline_ && Clock::now() >= *deadline_);
}

void ServerCall::OnCancel(std::function<void()> on_cancel) {
  {
    std::lock_guard lock(mu_);
    if (!cancelled_) {
      on_cancel_ = std::move(on_cancel);
      return;
    }
  }
  on_cancel();
}

bool ServerCall::MarkCancelled() {
  std::function<void()> on_cancel;
  {
    std::lock_guard lock(mu_);
    if (cancelled_.exchange(true)) return false;
    on_cancel = std::move(on_cancel_);
  }
  if (stream_) EndStream(Status(StatusCode::kCancelled, "call cancelled"));
  if (!on_cancel) return true;
  try {
    on_cancel();
  } catch (const std::exception& e) {
    Log().error("{}/{}: OnCancel callback threw: {}", *service_, *method_,
                e.what());
  }
  return true;
}

void ServerCall::EndWith(const Status& why) {
  // Cancelled first: the stream is over, so no MESSAGE follows the answer,
  // and the handler's own Finish sends nothing.
  if (MarkCancelled()) session_->Reply(id_, why);
}

void ServerCall::Finish(const Status& status, Payload&& response) {
  if (finished_.exchange(true)) {
    Log().error("{}/{}: call {} finished twice; ignoring {}", *service_,
                *method_, id_, status.ToString());
    return;
  }
  if (stream_) {
    EndStream(Status(StatusCode::kCancelled, "the call has finished"));
    // Its messages went by Write.
    if (ServerSends(stream_->kind)) response = Payload();
  }
  if (metadata_ && metadata_->destination && status.ok() &&
      !response.attachment.empty()) [[unlikely]] {
    return FinishIntoDestination(std::move(response));
  }
  session_->Complete(*this, status, std::move(response));
}

void ServerCall::FinishIntoDestination(Payload&& response) {
  const BulkDescriptor to = *metadata_->destination;
  const uint64_t n = response.attachment.size();
  if (n > to.length) {
    return session_->Complete(
        *this,
        Status(StatusCode::kResourceExhausted,
               "the response's attachment of " + std::to_string(n) +
                   " bytes does not fit the client's destination of " +
                   std::to_string(to.length) + " bytes"),
        Payload());
  }
  std::shared_ptr<ServerCall> self = metadata_->self.lock();
  const std::span<const std::byte> source(response.attachment.data(), n);
  if (to.rkey == 0 || !self || !MemoryRegistration::Find(source) ||
      BeginBulk().has_value()) {
    // Over TCP, or from memory outside every registration: the attachment
    // goes with the response, and the client copies it into place. (A
    // cancelled call's response is dropped there.)
    return session_->Complete(*this, Status(), std::move(response));
  }
  // One RDMA WRITE into the destination, then the response, which says how
  // many bytes landed. The attachment lives until the WRITE completes.
  auto held = std::make_shared<Payload>(std::move(response));
  session_->connection().Push(
      source, to, 0, [self = std::move(self), held, n](const Status& pushed) {
        self->EndBulk();  // Cancelled meanwhile: answered, and this dropped.
        if (!pushed.ok()) {
          return self->session_->Complete(*self, pushed, Payload());
        }
        self->metadata_->placed = n;
        self->session_->Complete(*self, Status(),
                                 Payload(std::move(held->message)));
      });
}

// ------------------------------------------------- ServerCall, streaming --

void ServerCall::StartStream(StreamKind kind, uint64_t window_messages,
                             uint64_t window_bytes) {
  stream_ = std::make_unique<Stream>(kind, window_messages, window_bytes);
}

std::optional<Status> ServerCall::BeginBulk() {
  std::lock_guard lock(mu_);
  if (IsCancelled()) {
    return Status(StatusCode::kCancelled,
                  "the call was cancelled or is past its deadline");
  }
  if (HoldsLoans()) ++metadata_->bulk_under_way;
  return std::nullopt;
}

void ServerCall::EndBulk() {
  {
    std::lock_guard lock(mu_);
    if (--metadata_->bulk_under_way != 0 || !metadata_->release_owed) return;
    metadata_->release_owed = false;
  }
  ReleaseLoans();
}

void ServerCall::ReleaseLoans() {
  if (!HoldsLoans()) return;
  {
    std::lock_guard lock(mu_);
    if (metadata_->bulk_under_way != 0) {
      metadata_->release_owed = true;
      return;
    }
  }
  // Sent after every READ and WRITE of the call has completed: the client
  // invalidates its windows when this arrives (rpc/client/bulk_loans.h).
  session_->Reply(id_, Status(StatusCode::kCancelled,
                              "the call was cancelled; its loans are "
                              "released"));
}

UniqueFunction<void(const Status&)> ServerCall::BulkDone(
    UniqueFunction<void(const Status&)> done, bool counted) const {
  std::shared_ptr<ServerCall> self;
  if (counted && HoldsLoans()) self = metadata_->self.lock();
  return [session = session_, self = std::move(self),
          done = std::move(done)](const Status& status) mutable {
    if (self) self->EndBulk();
    session->Post([done = std::move(done), status]() mutable { done(status); });
  };
}

void ServerCall::Pull(const BulkDescriptor& loan, uint64_t offset,
                      std::span<std::byte> destination,
                      UniqueFunction<void(const Status&)> done) {
  if (auto refused = BeginBulk()) {
    return BulkDone(std::move(done), /*counted=*/false)(*refused);
  }
  session_->connection().Pull(loan, offset, destination,
                              BulkDone(std::move(done), /*counted=*/true));
}

void ServerCall::Push(std::span<const std::byte> source,
                      const BulkDescriptor& loan, uint64_t offset,
                      UniqueFunction<void(const Status&)> done) {
  if (auto refused = BeginBulk()) {
    return BulkDone(std::move(done), /*counted=*/false)(*refused);
  }
  session_->connection().Push(source, loan, offset,
                              BulkDone(std::move(done), /*counted=*/true));
}

boost::asio::any_io_executor ServerCall::executor() const {
  return session_->connection().executor();
}

const PeerIdentity& ServerCall::peer_identity() const {
  static const PeerIdentity kNobody;
  const PeerIdentity* identity = session_->connection().peer_identity();
  return identity != nullptr ? *identity : kNobody;
}

void ServerCall::Post(UniqueFunction<void()> task) {
  session_->Post(std::move(task));
}

void ServerCall::Read(StreamReadCallback done) {
  std::unique_lock lock(mu_);
  Status refused;
  if (!stream_ || !ClientSends(stream_->kind)) {
    refused = Status(StatusCode::kFailedPrecondition,
                     "Read on a call whose client sends no stream");
  } else if (stream_->reader) {
    refused = Status(StatusCode::kFailedPrecondition,
                     "Read while another Read is outstanding");
  }
  if (!refused.ok()) {
    lock.unlock();
    return Post([done = std::move(done), refused]() mutable {
      done(refused, std::nullopt);
    });
  }
  Stream& stream = *stream_;
  if (stream.inbox.empty()) {
    if (!stream.over && !stream.half_closed) {
      stream.reader = std::move(done);  // OnStreamMessage hands it one.
      return;
    }
    const Status end = stream.over ? stream.ended : Status();
    lock.unlock();
    return Post(
        [done = std::move(done), end]() mutable { done(end, std::nullopt); });
  }
  Payload message = std::move(stream.inbox.front());
  stream.inbox.pop_front();
  // Read, its room goes back to the client.
  Status window_sent;
  if (const auto room = stream.receive.Consume(message.size());
      room && !stream.over && !stream.half_closed) {
    window_sent = session_->SendStreamFrame(
        rpc::MakeWindowFrame(id_, room->first, room->second));
  }
  lock.unlock();
  if (!window_sent.ok()) EndWith(window_sent);
  Post([done = std::move(done), message = std::move(message)]() mutable {
    done(Status(), std::move(message));
  });
}

void ServerCall::Write(Payload message, StreamWriteCallback done) {
  std::unique_lock lock(mu_);
  Status refused;
  if (!stream_ || !ServerSends(stream_->kind)) {
    refused = Status(StatusCode::kFailedPrecondition,
                     "Write on a call that sends no stream");
  } else if (stream_->over) {
    refused = stream_->ended;
  } else if (stream_->writer) {
    refused = Status(StatusCode::kFailedPrecondition,
                     "Write while another Write is outstanding");
  } else if (message.size() > session_->max_response_size()) {
    refused = Status(StatusCode::kResourceExhausted,
                     "stream message of " + std::to_string(message.size()) +
                         " bytes exceeds the server's maximum of " +
                         std::to_string(session_->max_response_size()));
  }
  if (!refused.ok()) {
    lock.unlock();
    return Post([done = std::move(done), refused]() mutable { done(refused); });
  }
  Stream& stream = *stream_;
  if (!stream.send.HasRoom()) {
    stream.pending = std::move(message);  // Until the client's WINDOW.
    stream.writer = std::move(done);
    return;
  }
  stream.send.Take(message.size());
  // Under mu_: messages leave in the order written, ahead of the RESPONSE.
  StatusOr<transport::OutgoingFrame> frame =
      MessageFrameLocked(std::move(message));
  const Status sent = frame.ok() ? session_->SendStreamFrame(std::move(*frame))
                                 : frame.status();
  lock.unlock();
  if (sent.ok() && metrics_ != nullptr) {
    metrics_->messages_sent.fetch_add(1, std::memory_order_relaxed);
  }
  // Not sent (the send queue is full, the connection closing): the call
  // cannot go on without the message.
  if (!sent.ok()) EndWith(sent);
  Post([done = std::move(done), sent]() mutable { done(sent); });
}

bool ServerCall::OnStreamMessage(Payload message) {
  std::unique_lock lock(mu_);
  Stream& stream = *stream_;
  if (stream.over) return true;  // Crossed the call's end: dropped.
  if (!ClientSends(stream.kind) || stream.half_closed ||
      !stream.receive.Admit(message.size())) {
    return false;
  }
  stream.inbox.push_back(std::move(message));
  if (metrics_ != nullptr) {
    metrics_->messages_received.fetch_add(1, std::memory_order_relaxed);
  }
  if (!stream.reader) return true;
  StreamReadCallback reader = std::move(stream.reader);
  lock.unlock();
  Read(std::move(reader));  // Takes the message just queued.
  return true;
}

void ServerCall::OnHalfClose() {
  StreamReadCallback reader;
  {
    std::lock_guard lock(mu_);
    if (stream_->over) return;
    stream_->half_closed = true;
    if (!stream_->inbox.empty() || !stream_->reader) return;
    reader = std::move(stream_->reader);
  }
  Post([reader = std::move(reader)]() mutable {
    reader(Status(), std::nullopt);
  });
}

void ServerCall::OnWindow(uint64_t messages, uint64_t bytes) {
  StreamWriteCallback writer;
  Status sent;
  {
    std::lock_guard lock(mu_);
    Stream& stream = *stream_;
    stream.send.Open(messages, bytes);
    if (!stream.pending || !stream.send.HasRoom()) return;
    stream.send.Take(stream.pending->size());
    StatusOr<transport::OutgoingFrame> frame =
        MessageFrameLocked(std::move(*stream.pending));
    sent = frame.ok() ? session_->SendStreamFrame(std::move(*frame))
                      : frame.status();
    stream.pending.reset();
    if (sent.ok() && metrics_ != nullptr) {
      metrics_->messages_sent.fetch_add(1, std::memory_order_relaxed);
    }
    writer = std::move(stream.writer);
  }
  if (!sent.ok()) EndWith(sent);
  Post([writer = std::move(writer), sent]() mutable { writer(sent); });
}

StatusOr<transport::OutgoingFrame> ServerCall::MessageFrameLocked(
    Payload message) {
  if (std::exchange(headers_sent_, true) || !metadata_ ||
      metadata_->headers.empty()) {
    return rpc::MakeMessageFrame(id_, std::move(message));
  }
  StatusOr<std::string> headers =
      rpc::EncodeOutgoingMetadata(metadata_->headers, "response headers");
  if (!headers.ok()) {
    Log().error("{}/{}: call {}: {}", *service_, *method_, id_,
                headers.status().message());
    return Status(StatusCode::kInternal,
                  "the server's " + headers.status().message());
  }
  return rpc::MakeMessageFrame(id_, std::move(message), *headers);
}

void ServerCall::EndStream(const Status& why) {
  StreamReadCallback reader;
  StreamWriteCallback writer;
  {
    std::lock_guard lock(mu_);
    if (stream_->over) return;
    stream_->over = true;
    stream_->ended = why;
    stream_->inbox.clear();
    stream_->pending.reset();
    reader = std::move(stream_->reader);
    writer = std::move(stream_->writer);
  }
  if (reader) {
    Post([reader = std::move(reader), why]() mutable {
      reader(why, std::nullopt);
    });
  }
  if (writer) {
    Post([writer = std::move(writer), why]() mutable { writer(why); });
  }
}

}  // namespace rdmarpc
