// Authorization: which authenticated peers may call which methods.
//
// A connection's identity is what its peer proved with a certificate over
// TLS (TransportOptions::tls; rdmarpc/peer_identity.h). A policy is a server
// interceptor (rdmarpc/interceptor.h) that decides each call from that
// identity and the method: it runs before the payload of a connection's
// first calls is read (admission) and before the handler of every call,
// and its refusal answers the call: UNAUTHENTICATED for a peer that proved
// no identity, PERMISSION_DENIED for one that may not call the method.
// Every service the server hosts is covered, health and introspection
// included.
//
//   auto policy = std::make_shared<rdmarpc::AllowListPolicy>();
//   policy->Allow("kv.Store/Get", "URI:spiffe://example/kv-reader")
//         .Allow("kv.Store", "CN=kv-admin")
//         .Allow("grpc.health.v1.Health", "*");
//   server_options.interceptors.push_back(policy);
#ifndef RDMARPC_AUTHORIZATION_H_
#define RDMARPC_AUTHORIZATION_H_

#include <map>
#include <set>
#include <string>
#include <string_view>

#include "rdmarpc/interceptor.h"
#include "rdmarpc/peer_identity.h"
#include "rdmarpc/status.h"

namespace rdmarpc {

class AuthorizationPolicy : public ServerInterceptor {
 public:
  // OK lets the call run; an error (PERMISSION_DENIED, UNAUTHENTICATED)
  // answers it instead. On the connection's event loop for admission, on
  // the handler's thread otherwise: quick, thread-safe, never blocking.
  virtual Status Authorize(const PeerIdentity& peer, std::string_view service,
                           std::string_view method) const = 0;

  bool admission() const final { return true; }
  Status Admit(const AdmissionInfo& call) final;
  Status OnCall(ServerCall& call) final;
};

// Allow lists. A call is let through when its peer matches an identity
// allowed for its method ("pkg.Service/Method"), its service
// ("pkg.Service") or everything ("*"). An identity is one of the peer's
// subject alternative names as PeerIdentity spells them ("DNS:kv.example",
// "URI:spiffe://example/kv", "IP:10.0.0.7", "email:ops@example"), its
// common name ("CN=kv-admin"), its whole subject ("CN=kv,O=example"), or
// "*" for any authenticated peer. Nothing allowed: every call refused.
// Configure before the server starts; Allow is not thread-safe.
class AllowListPolicy : public AuthorizationPolicy {
 public:
  AllowListPolicy& Allow(std::string scope, std::string identity);
  Status Authorize(const PeerIdentity& peer, std::string_view service,
                   std::string_view method) const override;

 private:
  bool Allowed(const std::string& scope, const PeerIdentity& peer) const;
  std::map<std::string, std::set<std::string>, std::less<>> allowed_;
};

}  // namespace rdmarpc

#endif  // RDMARPC_AUTHORIZATION_H_
