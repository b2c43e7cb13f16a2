// MethodRef: a method a client calls, named once.
//
// A request names its method either by its service and method names or by
// one 64-bit id (CallHeader.method_id in proto/wire.proto). The id is
// computed from the names, by client and server alike, so nothing is
// negotiated: a connection has no state for it and a reconnect loses none.
// It shortens a request by the names' length (23 bytes for
// "rdmarpc.bench.Bench"/"Echo"), and the server matches one integer instead
// of two strings.
//
//   constexpr rdmarpc::MethodRef kSay("pkg.Echo", "Say");  // Hashed at compile
//   time. channel.Call(kSay, request, options, done);
//
// Generated stubs hold one MethodRef per method. A server that has no
// method with a request's id answers UNIMPLEMENTED naming the id.
#ifndef RDMARPC_METHOD_REF_H_
#define RDMARPC_METHOD_REF_H_

#include <cstdint>
#include <string_view>

namespace rdmarpc {

// 64-bit FNV-1a of "<service>/<method>". 0 means "no id" on the wire, so a
// hash of 0 becomes 1. Two methods of one server may share an id only with
// odds of about n^2 / 2^65 for n methods; the server detects it (see
// MethodIndex) and those methods stay callable by name.
constexpr uint64_t MethodId(std::string_view service, std::string_view method) {
  constexpr uint64_t kOffsetBasis = 0xcbf29ce484222325u;
  constexpr uint64_t kPrime = 0x100000001b3u;
  uint64_t hash = kOffsetBasis;
  const auto mix = [&hash](char c) {
    hash ^= static_cast<uint8_t>(c);
    hash *= kPrime;
  };
  for (const char c : service) mix(c);
  mix('/');
  for (const char c : method) mix(c);
  return hash == 0 ? 1 : hash;
}

class MethodRef {
 public:
  // For the third argument: the method may run twice for one call without
  // harm, so a channel's retry policy may send a failed call again
  // (include/rdmarpc/retry_options.h). Generated stubs pass it for the methods
  // whose .proto says `option idempotency_level = IDEMPOTENT;` (or
  // NO_SIDE_EFFECTS).
  static constexpr bool kIdempotent = true;

  // The names must outlive the MethodRef (string literals, typically).
  constexpr MethodRef(std::string_view service, std::string_view method,
                      bool idempotent = false)
      : service_(service),
        method_(method),
        id_(MethodId(service, method)),
        idempotent_(idempotent) {}

  constexpr std::string_view service() const { return service_; }
  constexpr std::string_view method() const { return method_; }
  constexpr uint64_t id() const { return id_; }
  constexpr bool idempotent() const { return idempotent_; }

 private:
  std::string_view service_;
  std::string_view method_;
  uint64_t id_;
  bool idempotent_;
};

// Deprecated: the name this had before it moved to rdmarpc::; it goes in
// the next release.
namespace rpc {
using rdmarpc::MethodId;
using rdmarpc::MethodRef;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_METHOD_REF_H_
