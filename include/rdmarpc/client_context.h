// ClientContext: what a typed call carries besides its request and
// response messages, as gRPC's ClientContext or brpc's Controller: the
// call's options, its metadata (include/rdmarpc/metadata.h) and its attachments
// (include/rdmarpc/payload.h).
//
//   rdmarpc::ClientContext context(rdmarpc::CallOptions::WithTimeout(1s));
//   context.AddMetadata("tenant", "blue");
//   context.set_request_attachment(std::move(bulk));
//   auto [status, reply] = co_await stub.async_Put(context, request,
//                                                  asio::use_awaitable);
//   Buffer returned = context.TakeResponseAttachment();
//   auto version = context.response_trailers().Get("version");
//
// A context serves one call at a time and must outlive it: the response's
// attachment is stored in it before the completion handler runs. It may be
// reused for the next call.
#ifndef RDMARPC_CLIENT_CONTEXT_H_
#define RDMARPC_CLIENT_CONTEXT_H_

#include <span>
#include <string>
#include <utility>

#include "rdmarpc/buffer.h"
#include "rdmarpc/call_options.h"
#include "rdmarpc/metadata.h"

namespace rdmarpc {
namespace internal {
struct ClientContextAccess;  // include/rdmarpc/typed.h
}  // namespace internal

class ClientContext {
 public:
  ClientContext() = default;
  explicit ClientContext(CallOptions call_options)
      : options(std::move(call_options)) {}
  ClientContext(const ClientContext&) = delete;
  ClientContext& operator=(const ClientContext&) = delete;

  // Deadline, cancellation, wait-for-ready, request headers.
  CallOptions options;

  // A request header, sent by every call made with this context (it stays
  // in options.metadata).
  void AddMetadata(std::string key, std::string value) {
    options.metadata.Add(std::move(key), std::move(value));
  }
  // What the server sent back besides the response, once a call completed
  // (on an error too); empty before, or when it sent none.
  const Metadata& response_headers() const {
    return response_metadata_.headers;
  }
  const Metadata& response_trailers() const {
    return response_metadata_.trailers;
  }

  // Sent beside the request by the next call made with this context (which
  // takes it).
  void set_request_attachment(Buffer attachment) {
    request_attachment_ = std::move(attachment);
  }
  // The response's attachment once a call completed OK; empty before, after
  // an error, or when the server sent none.
  const Buffer& response_attachment() const { return response_attachment_; }
  // The response's attachment lands in `destination` (CallOptions::
  // ResponseInto), for every call made with this context from now on.
  void set_response_destination(std::span<std::byte> destination) {
    options.ResponseInto(destination);
  }
  Buffer TakeResponseAttachment() { return std::move(response_attachment_); }

 private:
  friend struct internal::ClientContextAccess;

  Buffer request_attachment_;
  Buffer response_attachment_;
  ResponseMetadata response_metadata_;
};

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace rpc {
using rdmarpc::ClientContext;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_CLIENT_CONTEXT_H_
