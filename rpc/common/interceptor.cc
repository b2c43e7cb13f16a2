#include "rdmarpc/interceptor.h"

#include "base/log.h"
#include "rdmarpc/server_call.h"

namespace rdmarpc {
namespace {

// Equal, in a time that depends on the lengths only.
bool SameBytes(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    differ |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return differ == 0;
}

}  // namespace

Status TokenServerInterceptor::Check(const Metadata& headers) {
  const std::vector<std::string_view> given = headers.GetAll(kAuthorizationKey);
  if (given.size() != 1 || !SameBytes(given.front(), expected_)) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return Status(StatusCode::kUnauthenticated,
                  given.empty() ? "the call carries no authorization token"
                                : "the call's authorization token is wrong");
  }
  return Status();
}

Status TokenServerInterceptor::Admit(const AdmissionInfo& call) {
  return Check(call.request_metadata);
}

Status TokenServerInterceptor::OnCall(ServerCall& call) {
  Metadata& headers = call.mutable_request_metadata();
  if (Status checked = Check(headers); !checked.ok()) return checked;
  headers.Remove(kAuthorizationKey);  // The handler has no use for it.
  return Status();
}

Status TokenClientInterceptor::OnCall(const ClientCallInfo&,
                                      CallOptions& options) {
  options.metadata.Remove(kAuthorizationKey);
  options.metadata.Add(std::string(kAuthorizationKey), value_);
  return Status();
}

void LoggingServerInterceptor::OnEnd(const ServerCall& call,
                                     const Status& status,
                                     std::chrono::nanoseconds elapsed) {
  Log().info(
      "{}/{} {} -> {} in {} us (request {} bytes){}{}", call.service(),
      call.method(), StreamKindName(call.kind()), StatusCodeName(status.code()),
      std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count(),
      call.request_size(), status.ok() ? "" : ": ", status.message());
}

}  // namespace rdmarpc
