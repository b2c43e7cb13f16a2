// ClientContext: what a typed call carries besides its request and
// response messages, as gRPC's ClientContext or brpc's Controller: the
// call's options and its attachments (rpc/payload.h).
//
//   rpc::ClientContext context(rpc::CallOptions::WithTimeout(1s));
//   context.set_request_attachment(std::move(bulk));
//   auto [status, reply] = co_await stub.async_Put(context, request,
//                                                  asio::use_awaitable);
//   Buffer returned = context.TakeResponseAttachment();
//
// A context serves one call at a time and must outlive it: the response's
// attachment is stored in it before the completion handler runs. It may be
// reused for the next call.
#ifndef RDMARPC_RPC_CLIENT_CONTEXT_H_
#define RDMARPC_RPC_CLIENT_CONTEXT_H_

#include <utility>

#include "base/buffer.h"
#include "rpc/call_options.h"

namespace rdmarpc::rpc {
namespace internal {
struct ClientContextAccess;  // rpc/typed.h
}  // namespace internal

class ClientContext {
 public:
  ClientContext() = default;
  explicit ClientContext(CallOptions call_options)
      : options(std::move(call_options)) {}
  ClientContext(const ClientContext&) = delete;
  ClientContext& operator=(const ClientContext&) = delete;

  // Deadline, cancellation, wait-for-ready.
  CallOptions options;

  // Sent beside the request by the next call made with this context (which
  // takes it).
  void set_request_attachment(Buffer attachment) {
    request_attachment_ = std::move(attachment);
  }
  // The response's attachment once a call completed OK; empty before, after
  // an error, or when the server sent none.
  const Buffer& response_attachment() const { return response_attachment_; }
  Buffer TakeResponseAttachment() { return std::move(response_attachment_); }

 private:
  friend struct internal::ClientContextAccess;

  Buffer request_attachment_;
  Buffer response_attachment_;
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_CLIENT_CONTEXT_H_
