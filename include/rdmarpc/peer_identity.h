// PeerIdentity: who the peer of an authenticated connection proved to be,
// from the certificate it presented.
#ifndef RDMARPC_PEER_IDENTITY_H_
#define RDMARPC_PEER_IDENTITY_H_

#include <string>
#include <vector>

namespace rdmarpc {

struct PeerIdentity {
  // The certificate's subject in RFC 2253 form ("CN=kv-client,O=example");
  // empty when the peer presented no certificate.
  std::string subject;
  // Its subject alternative names, each with its kind:
  // "DNS:kv.example", "IP:10.0.0.7", "URI:spiffe://example/kv",
  // "email:ops@example".
  std::vector<std::string> alt_names;
  // The subject's common name, or empty.
  std::string common_name;

  bool authenticated() const { return !subject.empty(); }
  // The same subject and alternative names.
  bool SameAs(const PeerIdentity& other) const {
    return subject == other.subject && alt_names == other.alt_names;
  }
};

}  // namespace rdmarpc

#endif  // RDMARPC_PEER_IDENTITY_H_
