// The typed layer under the code protoc-gen-rdmarpc generates: protobuf
// requests and responses over the generic Channel and Server.
//
// Server side: a generated service's handler gets a TypedCall: the parsed
// request, a response to fill, the deadline and cancellation, and Finish(),
// callable once from any thread, now or later.
//
// Client side: AsyncUnaryCall takes any Asio completion token. The completion
// signature is void(rdmarpc::Status, Response):
//   - a callback:            [](Status status, Response response) { ... }
//   - asio::use_future:      std::future<std::tuple<Status, Response>>
//   - asio::use_awaitable:   auto [status, response] = co_await ...;
// and the generated stub has a blocking form of each unary method:
//   Status status = stub.Say(context, request, &response);
// The handler runs on its associated executor (a coroutine's own), or,
// when it has none, where the channel runs callbacks: on its event loop or
// its callback executor (ChannelOptions::callback_threads).
//
// Metadata (include/rdmarpc/metadata.h): a handler reads request_metadata() and
// fills response_headers() and response_trailers(); a client sets and reads
// them through a ClientContext.
//
// Attachments (include/rdmarpc/payload.h): a handler reads the request's with
// request_attachment() and sends one with set_response_attachment(); a
// client passes a ClientContext (rpc/typed/client_context.h) to the stub's
// overload that takes one.
#ifndef RDMARPC_TYPED_CALL_H_
#define RDMARPC_TYPED_CALL_H_

#include <google/protobuf/message_lite.h>

#include <array>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/use_future.hpp>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "rdmarpc/buffer.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/client_context.h"
#include "rdmarpc/payload.h"
#include "rdmarpc/server_call.h"
#include "rdmarpc/service.h"
#include "rdmarpc/status.h"
#include "rdmarpc/tunables.h"

namespace rdmarpc {

// The message's wire bytes in a new Buffer.
Buffer SerializeMessage(const google::protobuf::MessageLite& message);
// Parses `bytes` into `message`; an error names the expected type.
Status ParseMessage(const Buffer& bytes,
                    google::protobuf::MessageLite& message);

namespace internal {
// Blocks for per-call objects (a TypedCall with its shared_ptr's counts),
// from the library's per-thread pools instead of the heap.
void* AllocatePerCall(size_t size);
void FreePerCall(void* block, size_t size) noexcept;
template <typename T>
struct PerCallAllocator {
  using value_type = T;
  PerCallAllocator() noexcept = default;
  template <typename U>
  PerCallAllocator(const PerCallAllocator<U>&) noexcept {}  // NOLINT
  T* allocate(size_t n) {
    static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__,
                  "pool blocks have operator new's alignment");
    return static_cast<T*>(AllocatePerCall(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept { FreePerCall(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const PerCallAllocator<U>&) const noexcept {
    return true;
  }
};
// Objects of type T kept per thread from one call for the next, at most
// tunables::kTypedSpareMessages of them, so that their strings and repeated
// fields keep their capacity.
template <typename T>
class ThreadSpares {
 public:
  // A kept object, or a new one.
  static std::unique_ptr<T> Take() {
    Spares& spares = Mine();
    if (spares.count == 0) return std::make_unique<T>();
    return std::move(spares.kept[--spares.count]);
  }
  // Kept, once `ready(*spare)` has cleared it for its next use (false: not
  // kept after all), unless the thread keeps enough already.
  template <typename Ready>
  static void Keep(std::unique_ptr<T> spare, Ready&& ready) {
    Spares& spares = Mine();
    if (spares.count == spares.kept.size() || !ready(*spare)) return;
    spares.kept[spares.count++] = std::move(spare);
  }

 private:
  struct Spares {
    std::array<std::unique_ptr<T>, tunables::kTypedSpareMessages> kept;
    size_t count = 0;
  };
  static Spares& Mine() {
    thread_local Spares spares;
    return spares;
  }
};
// A server's request and response objects, kept from one call of a method
// for the next on the same thread (tunables::kTypedSpareMessages says how
// many and how large). A kept pair's request holds the last call's: parsing
// clears it.
template <typename Request, typename Response>
struct MessagePair {
  Request request;
  Response response;
};
template <typename Request, typename Response>
using SpareMessages = ThreadSpares<MessagePair<Request, Response>>;
// A client's response objects, kept as the server's pairs are: a callback's
// response is parsed into one kept from an earlier call's completion on the
// same thread, so its strings keep their capacity. A callback that takes the
// response by value moves it out, and the next call allocates as before; one
// that takes it by reference leaves it to be kept.
template <typename Response>
using SpareResponses = ThreadSpares<Response>;
}  // namespace internal

template <typename Request, typename Response>
class TypedCall {
 public:
  explicit TypedCall(std::shared_ptr<ServerCall> call)
      : call_(std::move(call)),
        messages_(internal::SpareMessages<Request, Response>::Take()) {}
  ~TypedCall() {
    // A request the handler changed is measured again (its content bounds
    // what it holds; one it moved a field out of is the smaller for it).
    if (keep_ && (!changed_ || messages_->request.ByteSizeLong() <=
                                   tunables::kTypedSpareMessageBytes)) {
      internal::SpareMessages<Request, Response>::Keep(std::move(messages_),
                                                       [](auto& pair) {
                                                         pair.response.Clear();
                                                         return true;
                                                       });
    }
  }
  TypedCall(const TypedCall&) = delete;
  TypedCall& operator=(const TypedCall&) = delete;

  const Request& request() const { return messages_->request; }
  // The request is the handler's: it may move large fields out of it.
  Request& mutable_request() {
    changed_ = true;
    return messages_->request;
  }
  Response& response() { return messages_->response; }
  std::optional<Clock::time_point> deadline() const {
    return call_->deadline();
  }
  bool IsCancelled() const { return call_->IsCancelled(); }
  // The generic call underneath: the method's names, the request's bytes.
  const ServerCall& server_call() const { return *call_; }
  void OnCancel(std::function<void()> on_cancel) {
    call_->OnCancel(std::move(on_cancel));
  }
  // Metadata: the client's request headers, and what goes back
  // (ServerCall::response_headers, response_trailers).
  const Metadata& request_metadata() const { return call_->request_metadata(); }
  Metadata& response_headers() { return call_->response_headers(); }
  Metadata& response_trailers() { return call_->response_trailers(); }
  // The request's attachment; empty if it has none. Take it to keep its
  // bytes beyond the call without a copy.
  const Buffer& request_attachment() const {
    return call_->request_attachment();
  }
  Buffer TakeRequestAttachment() { return call_->TakeRequestAttachment(); }
  // Bulk (include/rdmarpc/bulk.h): the client's loans, and the bytes
  // moved through them (ServerCall::Pull and Push say how).
  std::span<const BulkDescriptor> bulk() const { return call_->bulk(); }
  void Pull(const BulkDescriptor& loan, uint64_t offset,
            std::span<std::byte> destination,
            UniqueFunction<void(const Status&)> done) {
    call_->Pull(loan, offset, destination, std::move(done));
  }
  void Push(std::span<const std::byte> source, const BulkDescriptor& loan,
            uint64_t offset, UniqueFunction<void(const Status&)> done) {
    call_->Push(source, loan, offset, std::move(done));
  }
  // Sent beside response() by a Finish that is OK; into the client's
  // memory if it named a destination (CallOptions::ResponseInto).
  void set_response_attachment(Buffer attachment) {
    response_attachment_ = std::move(attachment);
  }
  // Sends response() (and the attachment) when `status` is OK, else the
  // error alone.
  void Finish(const Status& status = Status()) {
    keep_ = keep_ && status.ok();
    if (!status.ok()) return call_->Finish(status);
    Buffer response = SerializeMessage(messages_->response);
    keep_ = keep_ && response.size() <= tunables::kTypedSpareMessageBytes;
    call_->Finish(
        status, Payload(std::move(response), std::move(response_attachment_)));
  }

 private:
  template <typename Rq, typename Rs, typename F>
  friend MethodHandler MakeUnaryHandler(F handle);

  std::shared_ptr<ServerCall> call_;
  std::unique_ptr<internal::MessagePair<Request, Response>> messages_;
  Buffer response_attachment_;
  // Whether messages_ goes back to the spares when the call ends: a request
  // that parsed, of at most kTypedSpareMessageBytes (still, if the handler
  // changed it), and an OK response of at most as many.
  bool keep_ = false;
  bool changed_ = false;
};

// A generic handler that parses the request and hands a TypedCall to
// `handle`. A request that does not parse is answered INVALID_ARGUMENT.
template <typename Request, typename Response, typename F>
MethodHandler MakeUnaryHandler(F handle) {
  return [handle = std::move(handle)](std::shared_ptr<ServerCall> raw) {
    using Call = TypedCall<Request, Response>;
    // `raw` moves into the TypedCall: no reference count taken and dropped.
    auto call = std::allocate_shared<Call>(internal::PerCallAllocator<Call>(),
                                           std::move(raw));
    ServerCall& server_call = *call->call_;
    const Status parsed =
        ParseMessage(server_call.request(), call->messages_->request);
    if (!parsed.ok()) return server_call.Finish(parsed);
    call->keep_ =
        server_call.request().size() <= tunables::kTypedSpareMessageBytes;
    handle(std::move(call));
  };
}

// UNIMPLEMENTED from a call by id names the id only (the server never saw
// the names): this puts the names in front, "<service>/<method>: ...",
// unless the message names them already. Other statuses pass unchanged.
Status NameMethodInError(const MethodRef& method, Status status);

namespace internal {

struct ClientContextAccess {
  static Buffer& request_attachment(ClientContext& context) {
    return context.request_attachment_;
  }
  static Buffer& response_attachment(ClientContext& context) {
    return context.response_attachment_;
  }
  // The context's options, with the response's metadata going into the
  // context (which outlives the call: no ownership is shared).
  static CallOptions OptionsFor(ClientContext& context) {
    context.response_metadata_ = ResponseMetadata();
    CallOptions options = context.options;
    options.response_metadata = std::shared_ptr<ResponseMetadata>(
        std::shared_ptr<void>(), &context.response_metadata_);
    return options;
  }
};

// Whether a completion handler has an executor of its own (a coroutine's, a
// future's, one bound with bind_executor): asio's trait answers with the
// default given, this private type, for one that has none.
struct NoExecutorOfItsOwn {};
template <typename Handler>
inline constexpr bool kHasOwnExecutor =
    !std::is_same_v<typename boost::asio::associated_executor<
                        Handler, NoExecutorOfItsOwn>::type,
                    NoExecutorOfItsOwn>;

// The response of a call that ended with `status` and `payload`: parsed
// into `response`, or the error (a method's name added to UNIMPLEMENTED;
// a response that does not parse is INTERNAL, as in gRPC). The attachment
// goes to `*response_attachment` unless it is null.
template <typename Response>
Status TakeResponse(const MethodRef& method, const Status& status,
                    Payload& payload, Buffer* response_attachment,
                    Response& response) {
  if (!status.ok()) return NameMethodInError(method, status);
  Status result = ParseMessage(payload.message, response);
  if (!result.ok()) return Status(StatusCode::kInternal, result.message());
  if (response_attachment != nullptr) {
    *response_attachment = std::move(payload.attachment);
  }
  return result;
}

// The unary call behind both AsyncUnaryCall overloads. `response_attachment`,
// unless null, receives the response's attachment before the completion
// handler runs.
template <typename Response, typename CompletionToken>
auto StartUnaryCall(Channel& channel, const MethodRef& method,
                    const google::protobuf::MessageLite& request,
                    const CallOptions& options, Buffer request_attachment,
                    Buffer* response_attachment, CompletionToken&& token) {
  // `options` goes to async_initiate as an argument: a token that initiates
  // at once (a callback, a future) passes it on by reference, and one that
  // initiates later (use_awaitable, at the co_await) keeps a copy until then.
  auto initiate = [&channel, &method, response_attachment](
                      auto handler, Payload&& payload,
                      const CallOptions& options) {
    using Handler = decltype(handler);
    if constexpr (!kHasOwnExecutor<Handler>) {
      // A plain callback runs where the channel runs callbacks, which is
      // where this completion runs: no dispatch, no work to track, and a
      // small handler keeps the completion within the call's inline
      // storage (no allocation).
      channel.Call(
          method, std::move(payload), options,
          [handler = std::move(handler), named = &method, response_attachment](
              const Status& status, Payload payload) mutable {
            std::unique_ptr<Response> response =
                SpareResponses<Response>::Take();
            Status result = TakeResponse(*named, status, payload,
                                         response_attachment, *response);
            std::move(handler)(std::move(result), std::move(*response));
            // Kept only if small (tunables::kTypedSpareMessageBytes).
            SpareResponses<Response>::Keep(
                std::move(response), [](Response& kept) {
                  if (kept.ByteSizeLong() > tunables::kTypedSpareMessageBytes) {
                    return false;
                  }
                  kept.Clear();
                  return true;
                });
          });
    } else {
      // Keeps the handler's executor (e.g. a coroutine's io_context) busy
      // until the call completes, so its run() does not return early.
      auto executor =
          boost::asio::prefer(boost::asio::get_associated_executor(handler),
                              boost::asio::execution::outstanding_work.tracked);
      channel.Call(
          method, std::move(payload), options,
          [handler = std::move(handler), executor = std::move(executor),
           named = &method,
           response_attachment](const Status& status, Payload payload) mutable {
            Response response;
            Status result = TakeResponse(*named, status, payload,
                                         response_attachment, response);
            boost::asio::dispatch(
                executor, [handler = std::move(handler), result,
                           response = std::move(response)]() mutable {
                  std::move(handler)(result, std::move(response));
                });
          });
    }
  };
  return boost::asio::async_initiate<CompletionToken, void(Status, Response)>(
      std::move(initiate), token,
      Payload(SerializeMessage(request), std::move(request_attachment)),
      options);
}

}  // namespace internal

// Calls `method` (by its id: include/rdmarpc/method_ref.h) with `request`.
// Generated stubs call this with their static MethodRefs: `method` must outlive
// the call.
template <typename Response, typename CompletionToken>
auto AsyncUnaryCall(Channel& channel, const MethodRef& method,
                    const google::protobuf::MessageLite& request,
                    const CallOptions& options, CompletionToken&& token) {
  return internal::StartUnaryCall<Response>(
      channel, method, request, options, Buffer(), nullptr,
      std::forward<CompletionToken>(token));
}

// The same with a ClientContext: its request attachment and metadata go
// with the call, and the response's land in it. `context` must outlive the
// call.
template <typename Response, typename CompletionToken>
auto AsyncUnaryCall(Channel& channel, const MethodRef& method,
                    const google::protobuf::MessageLite& request,
                    ClientContext& context, CompletionToken&& token) {
  using Access = internal::ClientContextAccess;
  Buffer& response_attachment = Access::response_attachment(context);
  response_attachment.Reset();
  return internal::StartUnaryCall<Response>(
      channel, method, request, Access::OptionsFor(context),
      std::move(Access::request_attachment(context)), &response_attachment,
      std::forward<CompletionToken>(token));
}

// Blocking calls (a generated stub's <Method>(context, request, &response)):
// the token they pass to async_<Method>, and the wait for its future.
inline constexpr boost::asio::use_future_t<> kBlocking{};
template <typename Response>
Status BlockingUnaryCall(std::future<std::tuple<Status, Response>> future,
                         Response* response) {
  auto [status, reply] = future.get();
  if (status.ok() && response != nullptr) *response = std::move(reply);
  return status;
}

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace rpc {
using rdmarpc::AsyncUnaryCall;
using rdmarpc::BlockingUnaryCall;
using rdmarpc::kBlocking;
using rdmarpc::MakeUnaryHandler;
using rdmarpc::NameMethodInError;
using rdmarpc::ParseMessage;
using rdmarpc::SerializeMessage;
using rdmarpc::TypedCall;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_TYPED_CALL_H_
