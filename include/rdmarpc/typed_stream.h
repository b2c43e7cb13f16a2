// Protobuf-typed streaming calls: what protoc-gen-rdmarpc generates for a
// method with `stream` in its request, its response or both, over the
// generic ServerCall::Read/Write and Channel::OpenStream
// (include/rdmarpc/stream.h).
//
// Server side, the generated service's method gets a TypedServerStream:
//   void Scan(std::shared_ptr<TypedServerStream<ScanRequest, Row>> stream)
//   stream->request()                             server-streaming: the request
//   stream->async_Read(token)     void(Status, std::optional<Request>)
//   stream->async_Write(message, token)           void(Status)
//   stream->Finish(status[, response])
//
// Client side, the stub's Open<Method>([context,] [request]) returns a
// TypedClientStream; a ClientContext (include/rdmarpc/client_context.h) serves
// a stream as it serves a unary call (options, headers both ways, attachments),
// or CallOptions alone:
//   stream->async_Write(message, token)           void(Status)
//   stream->WritesDone()
//   stream->async_Read(token)     void(Status, std::optional<Response>)
//   stream->async_Finish(token)   void(Status, Response)
//
// Either side may send bulk bytes beside a message, as a unary call's
// attachment (on RDMA from registered memory, never copied into the
// message): async_Write(message, attachment, token) sends one, and
// async_ReadWithAttachment(token), void(Status, std::optional<Message>,
// Buffer), receives it (async_Read releases it).
//
// Every operation takes any Asio completion token (a callback,
// boost::asio::use_future, boost::asio::use_awaitable), one Read and one
// Write outstanding at a time. A read without a message is the end: OK once
// the writer finished, else how the call ended. The completion handler runs
// on its associated executor (a coroutine's own), or where the stream's
// callbacks run when it has none.
#ifndef RDMARPC_TYPED_STREAM_H_
#define RDMARPC_TYPED_STREAM_H_

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/system_executor.hpp>
#include <memory>
#include <optional>
#include <utility>

#include "rdmarpc/channel.h"
#include "rdmarpc/service.h"
#include "rdmarpc/typed_call.h"

namespace rdmarpc {
namespace internal {

// Starts an asynchronous operation: `start(deliver)` begins it, and
// `deliver(args...)` completes it, once. The token's handler then runs on
// its associated executor, or on `fallback`.
template <typename... Args, typename Token, typename Start>
auto AsyncOperation(const boost::asio::any_io_executor& fallback, Token&& token,
                    Start start) {
  return boost::asio::async_initiate<Token, void(Args...)>(
      [fallback, start = std::move(start)](auto handler) mutable {
        auto executor = boost::asio::prefer(
            boost::asio::get_associated_executor(handler, fallback),
            boost::asio::execution::outstanding_work.tracked);
        start([handler = std::move(handler),
               executor = std::move(executor)](Args... args) mutable {
          boost::asio::dispatch(executor,
                                [handler = std::move(handler),
                                 ... args = std::move(args)]() mutable {
                                  std::move(handler)(std::move(args)...);
                                });
        });
      },
      token);
}

// The next message of a stream, parsed as `Message`. A message that does
// not parse ends the read with its error (INVALID_ARGUMENT), as a unary
// request that does not parse.
// `deliver` gets (Status, std::optional<Message>, Buffer attachment): the
// attachment, empty when the peer sent none, as it arrived (never copied).
template <typename Message, typename Deliver>
StreamReadCallback AttachmentReader(Deliver deliver) {
  return [deliver = std::move(deliver)](
             const Status& status, std::optional<Payload> payload) mutable {
    if (!payload) return deliver(status, std::optional<Message>(), Buffer());
    std::optional<Message> message(std::in_place);
    const Status parsed = ParseMessage(payload->message, *message);
    if (!parsed.ok()) {
      return deliver(parsed, std::optional<Message>(), Buffer());
    }
    deliver(Status(), std::move(message), std::move(payload->attachment));
  };
}
// AttachmentReader for a `deliver` of (Status, std::optional<Message>): an
// attachment, if the peer sent one, is released.
template <typename Message, typename Deliver>
StreamReadCallback ParsingReader(Deliver deliver) {
  return AttachmentReader<Message>(
      [deliver = std::move(deliver)](
          const Status& status, std::optional<Message> message,
          Buffer) mutable { deliver(status, std::move(message)); });
}

}  // namespace internal

template <typename Request, typename Response>
class TypedServerStream {
 public:
  explicit TypedServerStream(std::shared_ptr<ServerCall> call)
      : call_(std::move(call)) {}

  // A server-streaming call's request, and the attachment the client sent
  // beside it (empty if none; take it to keep its bytes without a copy).
  const Request& request() const { return request_; }
  const Buffer& request_attachment() const {
    return call_->request_attachment();
  }
  Buffer TakeRequestAttachment() { return call_->TakeRequestAttachment(); }
  std::optional<Clock::time_point> deadline() const {
    return call_->deadline();
  }
  bool IsCancelled() const { return call_->IsCancelled(); }
  void OnCancel(std::function<void()> on_cancel) {
    call_->OnCancel(std::move(on_cancel));
  }
  const ServerCall& server_call() const { return *call_; }
  // Metadata, as ServerCall's: headers go with the first async_Write (or
  // Finish), trailers with Finish.
  const Metadata& request_metadata() const { return call_->request_metadata(); }
  Metadata& response_headers() { return call_->response_headers(); }
  Metadata& response_trailers() { return call_->response_trailers(); }

  // Client- and bidi-streaming: the client's next message, or none at the
  // end. Signature void(Status, std::optional<Request>).
  template <typename Token>
  auto async_Read(Token&& token) {
    return internal::AsyncOperation<Status, std::optional<Request>>(
        boost::asio::system_executor(), std::forward<Token>(token),
        [call = call_](auto deliver) {
          call->Read(internal::ParsingReader<Request>(std::move(deliver)));
        });
  }
  // async_Read, with the message's attachment: bulk bytes the client sent
  // beside it (async_Write's attachment form), empty if none. Signature
  // void(Status, std::optional<Request>, Buffer).
  template <typename Token>
  auto async_ReadWithAttachment(Token&& token) {
    return internal::AsyncOperation<Status, std::optional<Request>, Buffer>(
        boost::asio::system_executor(), std::forward<Token>(token),
        [call = call_](auto deliver) {
          call->Read(internal::AttachmentReader<Request>(std::move(deliver)));
        });
  }
  // Server- and bidi-streaming: sends `message`; completes once the
  // client's window let it go. Signature void(Status).
  template <typename Token>
  auto async_Write(const Response& message, Token&& token) {
    return async_Write(message, Buffer(), std::forward<Token>(token));
  }
  // async_Write with `attachment` sent beside the message, as a unary
  // call's attachment is: on RDMA straight from its registered memory.
  template <typename Token>
  auto async_Write(const Response& message, Buffer attachment, Token&& token) {
    return internal::AsyncOperation<Status>(
        boost::asio::system_executor(), std::forward<Token>(token),
        [call = call_,
         payload = Payload(SerializeMessage(message), std::move(attachment))](
            auto deliver) mutable {
          call->Write(std::move(payload),
                      [deliver = std::move(deliver)](
                          const Status& status) mutable { deliver(status); });
        });
  }
  // A client-streaming call's response, sent by a Finish that is OK (as a
  // TypedCall's, for handlers that return their status: SpawnHandler), with
  // the attachment set here.
  Response& response() {
    has_response_ = true;
    return response_;
  }
  void set_response_attachment(Buffer attachment) {
    has_response_ = true;
    response_attachment_ = std::move(attachment);
  }
  // Ends the call. A client-streaming call's OK carries response() if it
  // was set, or `response`.
  void Finish(const Status& status) {
    if (!status.ok() || !has_response_) return call_->Finish(status);
    call_->Finish(status, Payload(SerializeMessage(response_),
                                  std::move(response_attachment_)));
  }
  void Finish(const Status& status, const Response& response) {
    if (!status.ok()) return call_->Finish(status);
    call_->Finish(status, Payload(SerializeMessage(response),
                                  std::move(response_attachment_)));
  }

 private:
  template <typename Rq, typename Rs, typename F>
  friend MethodHandler MakeStreamHandler(StreamKind kind, F handle);

  std::shared_ptr<ServerCall> call_;
  Request request_;
  bool has_response_ = false;
  Response response_;
  Buffer response_attachment_;
};

// A generic handler for a streaming method of `kind`: hands a
// TypedServerStream to `handle`, after parsing a server-streaming call's
// request (one that does not parse is answered INVALID_ARGUMENT).
template <typename Request, typename Response, typename F>
MethodHandler MakeStreamHandler(StreamKind kind, F handle) {
  return [kind, handle = std::move(handle)](std::shared_ptr<ServerCall> raw) {
    auto stream = std::make_shared<TypedServerStream<Request, Response>>(raw);
    if (kind == StreamKind::kServerStreaming) {
      const Status parsed = ParseMessage(raw->request(), stream->request_);
      if (!parsed.ok()) return raw->Finish(parsed);
    }
    handle(std::move(stream));
  };
}

template <typename Request, typename Response>
class TypedClientStream {
 public:
  // `response_attachment`, unless null, receives a client-streaming call's
  // response attachment before async_Finish's handler runs (a
  // ClientContext's: OpenTypedStream).
  TypedClientStream(std::shared_ptr<Channel> channel, const MethodRef& method,
                    std::unique_ptr<ClientStream> stream,
                    Buffer* response_attachment = nullptr)
      : channel_(std::move(channel)),
        method_(method),
        stream_(std::move(stream)),
        response_attachment_(response_attachment) {}

  // Client- and bidi-streaming: sends `message`; completes once the
  // server's window let it go. Signature void(Status).
  template <typename Token>
  auto async_Write(const Request& message, Token&& token) {
    return async_Write(message, Buffer(), std::forward<Token>(token));
  }
  // async_Write with `attachment` sent beside the message (see
  // TypedServerStream::async_Write).
  template <typename Token>
  auto async_Write(const Request& message, Buffer attachment, Token&& token) {
    return internal::AsyncOperation<Status>(
        channel_->completion_executor(), std::forward<Token>(token),
        [stream = stream_.get(),
         payload = Payload(SerializeMessage(message), std::move(attachment))](
            auto deliver) mutable {
          stream->Write(std::move(payload),
                        [deliver = std::move(deliver)](
                            const Status& status) mutable { deliver(status); });
        });
  }
  // Client- and bidi-streaming: no more messages.
  void WritesDone() { stream_->WritesDone(); }
  // Server- and bidi-streaming: the server's next message, or none at the
  // end. Signature void(Status, std::optional<Response>).
  template <typename Token>
  auto async_Read(Token&& token) {
    return internal::AsyncOperation<Status, std::optional<Response>>(
        channel_->completion_executor(), std::forward<Token>(token),
        [stream = stream_.get(), method = &method_](auto deliver) {
          stream->Read(internal::ParsingReader<Response>(
              [deliver = std::move(deliver), method](
                  const Status& status,
                  std::optional<Response> message) mutable {
                deliver(NameMethodInError(*method, status), std::move(message));
              }));
        });
  }
  // async_Read, with the message's attachment (empty if none). Signature
  // void(Status, std::optional<Response>, Buffer).
  template <typename Token>
  auto async_ReadWithAttachment(Token&& token) {
    return internal::AsyncOperation<Status, std::optional<Response>, Buffer>(
        channel_->completion_executor(), std::forward<Token>(token),
        [stream = stream_.get(), method = &method_](auto deliver) {
          stream->Read(internal::AttachmentReader<Response>(
              [deliver = std::move(deliver), method](
                  const Status& status, std::optional<Response> message,
                  Buffer attachment) mutable {
                deliver(NameMethodInError(*method, status), std::move(message),
                        std::move(attachment));
              }));
        });
  }
  // The call's status once it ends, with a client-streaming call's
  // response. Signature void(Status, Response).
  template <typename Token>
  auto async_Finish(Token&& token) {
    return internal::AsyncOperation<Status, Response>(
        channel_->completion_executor(), std::forward<Token>(token),
        [stream = stream_.get(), method = &method_,
         sink = response_attachment_](auto deliver) {
          stream->Finish([deliver = std::move(deliver), method, sink](
                             const Status& status, Payload payload) mutable {
            Response response;
            Status result = NameMethodInError(*method, status);
            if (result.ok() && payload.size() > 0) {
              result = ParseMessage(payload.message, response);
              if (!result.ok()) {
                result = Status(StatusCode::kInternal, result.message());
              }
            }
            if (result.ok() && sink != nullptr) {
              *sink = std::move(payload.attachment);
            }
            deliver(std::move(result), std::move(response));
          });
        });
  }
  // Ends the call CANCELLED.
  void Cancel() { stream_->Cancel(); }
  // The server's response headers, once a read delivered its first message
  // or the call ended; its trailers once it ended.
  const Metadata& response_headers() const {
    return stream_->response_headers();
  }
  const Metadata& response_trailers() const {
    return stream_->response_trailers();
  }

 private:
  const std::shared_ptr<Channel> channel_;
  const MethodRef& method_;
  std::unique_ptr<ClientStream> stream_;
  Buffer* const response_attachment_;
};

// Opens a typed stream of `kind` to `method`; `request` is a
// server-streaming call's.
// `method` must outlive the stream (generated stubs pass their static
// MethodRefs); the stream keeps `channel`.
template <typename Request, typename Response>
std::unique_ptr<TypedClientStream<Request, Response>> OpenTypedStream(
    std::shared_ptr<Channel> channel, const MethodRef& method, StreamKind kind,
    const CallOptions& options, const Request* request = nullptr) {
  Payload payload;
  if (request != nullptr) payload = Payload(SerializeMessage(*request));
  auto stream = channel->OpenStream(method, kind, options, std::move(payload));
  return std::make_unique<TypedClientStream<Request, Response>>(
      std::move(channel), method, std::move(stream));
}

// OpenTypedStream with `context`, which must outlive the stream: its options
// and request headers; a server-streaming call's request goes with the
// context's request attachment. The server's response headers and trailers
// land in the context as they arrive (ClientContext::response_headers), and
// a client-streaming call's response attachment once async_Finish
// completed OK.
template <typename Request, typename Response>
std::unique_ptr<TypedClientStream<Request, Response>> OpenTypedStream(
    std::shared_ptr<Channel> channel, const MethodRef& method, StreamKind kind,
    ClientContext& context, const Request* request = nullptr) {
  using Access = internal::ClientContextAccess;
  Payload payload;
  if (request != nullptr) {
    payload = Payload(SerializeMessage(*request),
                      std::move(Access::request_attachment(context)));
  }
  Buffer& response_attachment = Access::response_attachment(context);
  response_attachment.Reset();
  auto stream = channel->OpenStream(method, kind, Access::OptionsFor(context),
                                    std::move(payload));
  return std::make_unique<TypedClientStream<Request, Response>>(
      std::move(channel), method, std::move(stream), &response_attachment);
}

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace rpc {
using rdmarpc::MakeStreamHandler;
using rdmarpc::OpenTypedStream;
using rdmarpc::TypedClientStream;
using rdmarpc::TypedServerStream;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_TYPED_STREAM_H_
