// AuthorizationPolicy and its allow lists (include/rdmarpc/authorization.h).
#include "rdmarpc/authorization.h"

#include "rdmarpc/server_call.h"

namespace rdmarpc {

namespace {

Status Unauthenticated() {
  return Status(StatusCode::kUnauthenticated,
                "the peer proved no identity: the server authorizes calls by "
                "TLS client certificate");
}

}  // namespace

Status AuthorizationPolicy::Admit(const AdmissionInfo& call) {
  return Authorize(call.peer_identity, call.service, call.method);
}

Status AuthorizationPolicy::OnCall(ServerCall& call) {
  return Authorize(call.peer_identity(), call.service(), call.method());
}

AllowListPolicy& AllowListPolicy::Allow(std::string scope,
                                        std::string identity) {
  allowed_[std::move(scope)].insert(std::move(identity));
  return *this;
}

bool AllowListPolicy::Allowed(const std::string& scope,
                              const PeerIdentity& peer) const {
  const auto found = allowed_.find(scope);
  if (found == allowed_.end()) return false;
  const std::set<std::string>& who = found->second;
  if (who.contains("*") || who.contains(peer.subject)) return true;
  if (!peer.common_name.empty() && who.contains("CN=" + peer.common_name)) {
    return true;
  }
  for (const std::string& name : peer.alt_names) {
    if (who.contains(name)) return true;
  }
  return false;
}

Status AllowListPolicy::Authorize(const PeerIdentity& peer,
                                  std::string_view service,
                                  std::string_view method) const {
  if (!peer.authenticated()) return Unauthenticated();
  const std::string service_scope(service);
  const std::string method_scope = service_scope + "/" + std::string(method);
  if (Allowed(method_scope, peer) || Allowed(service_scope, peer) ||
      Allowed("*", peer)) {
    return Status();
  }
  return Status(StatusCode::kPermissionDenied,
                "'" + peer.subject + "' may not call " + method_scope);
}

}  // namespace rdmarpc
