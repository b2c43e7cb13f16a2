// ServerSession: admission, the check of who calls before a call's payload is
// read (ServerInterceptor::admission(), include/rdmarpc/interceptor.h).
//
// A session of a server with admission interceptors starts not admitted
// (RequireAdmission): its transport reads at most max_unadmitted_frame_bytes
// of a frame's payload before asking AdmitHeader, and each request goes
// through OnGatedRequest. The first call that passes admits the connection;
// from then on requests take the plain path, and OnCall checks each call as
// for any interceptor.
#include "base/log.h"
#include "base/log_throttle.h"
#include "rdmarpc/tunables.h"
#include "rpc/server/server_session.h"
#include "rpc/wire/wire_codec.h"

namespace rdmarpc::rpc {

void ServerCore::NoteRefusal(const std::string& peer, const Status& why) {
  calls_unadmitted.fetch_add(1, std::memory_order_relaxed);
  if (const auto held = ThrottleLog("call refused", peer)) {
    Log().warn("{}: call refused: {}{}", peer, why.message(), HeldBack(*held));
  }
}

Status ServerSession::RunAdmission(const CallHeader& header) const {
  if (core_->admitters.empty()) return Status();
  Metadata metadata;
  if (!header.metadata().empty()) {
    Status read = ReadMetadata(header.metadata(), core_->max_metadata_size,
                               "request metadata", "server",
                               StatusCode::kInvalidArgument, &metadata);
    if (!read.ok()) return read;
  }
  std::string_view service = header.service();
  std::string_view method = header.method();
  if (header.method_id() != 0) {
    MethodIndex<MethodEntry>::Found found;
    const MethodEntry* entry =
        core_->methods_by_id.Find(header.method_id(), &found);
    if (found == MethodIndex<MethodEntry>::Found::kOne) {
      service = *entry->service;
      method = *entry->method;
    }
  }
  static const PeerIdentity kNobody;
  const PeerIdentity* identity = connection_->peer_identity();
  const AdmissionInfo info{connection_->peer(), service, method, metadata,
                           identity != nullptr ? *identity : kNobody};
  for (ServerInterceptor* admitter : core_->admitters) {
    if (Status verdict = admitter->Admit(info); !verdict.ok()) return verdict;
  }
  return Status();
}

void ServerSession::RefuseUnadmitted(uint64_t id, const Status& why) {
  core_->NoteRefusal(connection_->peer(), why);
  Reply(id, why);
  if (!admitted_ && ++admission_failures_ >= tunables::kMaxAdmissionFailures) {
    connection_->Close(Status(
        why.code(),
        std::to_string(admission_failures_) +
            " calls refused admission on this connection: " + why.message()));
  }
}

bool ServerSession::OnGatedRequest(const CallHeader& header) {
  const uint64_t id = header.call_id();
  if (!recycled_.ok()) {  // Sent after the GOAWAY: elsewhere, please.
    ReplyNotRun(id, recycled_);
    return false;
  }
  if (!refusal_.ok()) {
    ReplyNotRun(id, refusal_);
    connection_->Close(refusal_);  // Sends the answer first.
    return false;
  }
  Status verdict = std::exchange(header_refusal_, Status());
  if (verdict.ok()) verdict = RunAdmission(header);
  if (!verdict.ok()) {
    RefuseUnadmitted(id, verdict);
    return false;
  }
  admitted_ = true;
  gated_ = false;
  connection_->Admit();
  return true;
}

bool ServerSession::AdmitHeader(std::span<const std::byte> bytes) {
  const std::optional<CallHeader> header = CallHeader::Decode(bytes);
  // Anything else is answered, or found malformed, by OnFrame; its payload
  // is not needed for that.
  if (!header || header->kind() != CallHeader::kRequest) return false;
  Status verdict = RunAdmission(*header);
  if (verdict.ok()) {
    admitted_ = true;
    gated_ = !refusal_.ok() || !recycled_.ok();
    connection_->Admit();
    return true;
  }
  header_refusal_ = std::move(verdict);
  return false;
}

}  // namespace rdmarpc::rpc
