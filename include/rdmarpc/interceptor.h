// Interceptors: code that sees every call (unary or streaming) of a server
// or a channel, with its metadata, in one place instead of in each handler:
// a token check, logging, metrics, tracing.
//
// A chain is ServerOptions::interceptors or ChannelOptions::interceptors, run
// in order. Each interceptor may
//   - reject the call: OnCall returns an error, the call ends with it, and
//     neither the later interceptors nor (on a server) the handler run;
//   - read and rewrite its metadata: a server's the request headers and the
//     response headers and trailers (through the ServerCall), a channel's
//     the request headers (in the CallOptions it is given);
//   - observe its end: OnEnd, with the status the call ended with, for every
//     call OnCall let through (on the interceptors that let it through).
// Interceptors run on the thread that makes the call (channel) or runs the
// handler (server), OnEnd where the call ends: they must be thread-safe and
// quick, and must not throw.
//
//   rdmarpc::ServerOptions options;
//   options.interceptors.push_back(
//       std::make_shared<rdmarpc::TokenServerInterceptor>("s3cret"));
//   options.interceptors.push_back(
//       std::make_shared<rdmarpc::LoggingServerInterceptor>());
//
//   rdmarpc::ChannelOptions channel_options;
//   channel_options.interceptors.push_back(
//       std::make_shared<rdmarpc::TokenClientInterceptor>("s3cret"));
//
// A token travels in the clear on tcp:// and rdma://: there it protects only
// a trusted network; over TLS (tls://) it is encrypted (docs/security.md).
// Who a TLS peer is, and which methods it may call: rdmarpc/authorization.h.
#ifndef RDMARPC_INTERCEPTOR_H_
#define RDMARPC_INTERCEPTOR_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "rdmarpc/call_options.h"
#include "rdmarpc/metadata.h"
#include "rdmarpc/peer_identity.h"
#include "rdmarpc/status.h"
#include "rdmarpc/stream.h"

namespace rdmarpc {

class ServerCall;  // rdmarpc/server_call.h

// What a channel's interceptor learns of a call.
struct ClientCallInfo {
  std::string_view target;   // The channel's URI.
  std::string_view service;  // Empty if the call names its method by id
  std::string_view method;   // only (a MethodRef carries its names).
  StreamKind kind = StreamKind::kUnary;
};

// What an admission check sees of a call (ServerInterceptor::Admit): who
// calls, what, and the request headers; none of the payload.
struct AdmissionInfo {
  std::string_view peer;     // "tcp://10.0.0.2:41000".
  std::string_view service;  // Empty if the call names its method by an id
  std::string_view method;   // that is no method of this server.
  const Metadata& request_metadata;
  // Who the peer proved to be over TLS; not authenticated() otherwise.
  const PeerIdentity& peer_identity;
};

class ServerInterceptor {
 public:
  virtual ~ServerInterceptor() = default;
  // Admission: an interceptor that decides who may call at all (a token,
  // a TLS identity) says so with admission() and decides in Admit.
  // With one configured, a connection's calls are admitted on their method
  // and headers before their payloads are read, until one passes: until
  // then the server holds at most ServerOptions::max_unadmitted_frame_bytes
  // of a frame's payload (TCP) or lends nothing beyond the connection's
  // first receive buffers and no remote key (RDMA), discards the rest of a
  // refused call's payload as it arrives (RDMA: it is never sent), and
  // answers it with Admit's error. A connection
  // refused kMaxAdmissionFailures times is closed. Admit runs on the
  // connection's event loop: it must be quick and must not block. Once a
  // call is admitted, the connection's calls are checked by OnCall only, as
  // before (an admission interceptor checks there too).
  virtual bool admission() const { return false; }
  virtual Status Admit(const AdmissionInfo& call) {
    (void)call;
    return Status();
  }
  // Before the handler, on the thread that runs it. An error answers the
  // call with it instead. `call` gives the method, the deadline, the
  // request headers (mutable_request_metadata) and the response's
  // metadata.
  virtual Status OnCall(ServerCall& call) {
    (void)call;
    return Status();
  }
  // Once the call has ended: `status` is what the client was sent (or why
  // it was not: CANCELLED, DEADLINE_EXCEEDED), `elapsed` the time since the
  // request arrived.
  virtual void OnEnd(const ServerCall& call, const Status& status,
                     std::chrono::nanoseconds elapsed) {
    (void)call, (void)status, (void)elapsed;
  }
};

class ClientInterceptor {
 public:
  virtual ~ClientInterceptor() = default;
  // Before the call is sent, on the caller's thread: may change `options`
  // (its metadata, say). An error fails the call locally with it.
  virtual Status OnCall(const ClientCallInfo& call, CallOptions& options) {
    (void)call, (void)options;
    return Status();
  }
  // When the call completes, before its callback, where the callback runs.
  virtual void OnEnd(const ClientCallInfo& call, const Status& status,
                     std::chrono::nanoseconds elapsed) {
    (void)call, (void)status, (void)elapsed;
  }
};

// The header a token travels in, as "Bearer <token>" (as HTTP and gRPC).
inline constexpr std::string_view kAuthorizationKey = "authorization";

// Refuses, UNAUTHENTICATED, every call whose "authorization" header is not
// "Bearer <token>"; the header is taken off the call before its handler
// sees it. The comparison takes the same time wherever the tokens differ.
class TokenServerInterceptor : public ServerInterceptor {
 public:
  explicit TokenServerInterceptor(std::string token)
      : expected_("Bearer " + std::move(token)) {}
  Status OnCall(ServerCall& call) override;
  bool admission() const override { return true; }
  Status Admit(const AdmissionInfo& call) override;
  // Calls refused so far.
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  Status Check(const Metadata& headers);

  const std::string expected_;
  std::atomic<uint64_t> refused_{0};
};

// Adds "authorization: Bearer <token>" to every call.
class TokenClientInterceptor : public ClientInterceptor {
 public:
  explicit TokenClientInterceptor(std::string token)
      : value_("Bearer " + std::move(token)) {}
  Status OnCall(const ClientCallInfo& call, CallOptions& options) override;

 private:
  const std::string value_;
};

// Logs each call's end at info through the rdmarpc logger (base/log.h):
// "<service>/<method> <kind> -> <CODE> in <us> us (request <n> bytes)".
class LoggingServerInterceptor : public ServerInterceptor {
 public:
  void OnEnd(const ServerCall& call, const Status& status,
             std::chrono::nanoseconds elapsed) override;
};

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace rpc {
using rdmarpc::ClientCallInfo;
using rdmarpc::ClientInterceptor;
using rdmarpc::LoggingServerInterceptor;
using rdmarpc::ServerInterceptor;
using rdmarpc::TokenClientInterceptor;
using rdmarpc::TokenServerInterceptor;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_INTERCEPTOR_H_
