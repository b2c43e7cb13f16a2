// RdmaConnection: authentication (protocol.h, Authentication), in a
// translation unit of its own (see BUILD). With
// TransportOptions::tls, a TLS 1.3 handshake runs over the queue pair in
// AUTH messages before the connection is handed over: until it is done the
// peer is lent its initial credits only, nothing it sends but AUTH and
// CREDIT is accepted, and no RTS is granted, so no key is lent and no
// method runs.
#include <array>
#include <cstring>
#include <memory>

#include "base/log.h"
#include "transport/rdma/rdma_connection.h"
#include "transport/tls/tls.h"

namespace rdmarpc::transport::rdma {

struct RdmaConnection::AuthState {
  std::unique_ptr<tls::TlsSession> session;
  bool server = false;
  uint64_t received = 0;  // Handshake bytes from the peer so far.
  bool verified_sent = false;
  bool failed = false;  // Closing: what still arrives is dropped.
};

void RdmaConnection::AuthStateDelete::operator()(AuthState* state) const {
  delete state;
}

void RdmaConnection::StartAuth() {
  const bool server = host_.empty();
  auto context = tls::TlsContext::Shared(
      *options_.tls,
      server ? tls::TlsContext::Role::kServer : tls::TlsContext::Role::kClient);
  if (!context.ok()) return Established(context.status());
  auto session = (*context)->NewSession(host_);
  if (!session.ok()) return Established(session.status());
  auth_.reset(new AuthState);
  auth_->server = server;
  auth_->session = std::move(*session);
  close_timer_.expires_after(options_.connect_timeout);
  close_timer_.async_wait(
      [weak = weak_from_this(), waited = options_.connect_timeout](
          const boost::system::error_code& error) {
        const auto self = weak.lock();
        if (error || !self || !self->auth_ || self->torn_down_) return;
        self->CloseNow(Status(
            StatusCode::kUnavailable,
            "TLS handshake with " + self->peer_ + " not done within " +
                std::to_string(waited.count()) + " ms (connect_timeout)"));
      });
  // What the peer sent before this side saw ESTABLISHED.
  while (!held_.empty() && auth_ && !torn_down_) {
    auto [wc, data] = std::move(held_.front());
    held_.pop_front();
    OnAuthReceive(wc, data.data());
  }
  if (auth_ && !server && !torn_down_) AdvanceAuth();  // The ClientHello.
}

void RdmaConnection::OnAuthReceive(const ibv_wc& wc, const std::byte* data) {
  if (auth_->failed) return;
  if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    return ProtocolError(Status(StatusCode::kUnauthenticated,
                                "peer wrote into this side's memory before "
                                "authenticating (no grant was ever made)"));
  }
  StatusOr<InboundMessage> inbound =
      CheckInbound(std::span(data, wc.byte_len), options_.max_payload_size);
  if (!inbound.ok()) return ProtocolError(inbound.status());
  StatusOr<AuthInbound> kind =
      CheckBeforeAuth(*inbound, auth_->server, auth_->session->handshake_done(),
                      auth_->received);
  if (!kind.ok()) return ProtocolError(kind.status());
  if (Status s = CheckCreditReturn(credits_, inbound->prefix.credits,
                                   peer_params_.receive_depth);
      !s.ok()) {
    return ProtocolError(s);
  }
  credits_ += inbound->prefix.credits;
  Bump(stats_.bytes_received, wc.byte_len);
  switch (*kind) {
    case AuthInbound::kCredit:
      return SendAuth();  // What waited for credits.
    case AuthInbound::kVerified:
      return Authenticated();
    case AuthInbound::kBytes:
      auth_->received += inbound->attached.size();
      auth_->session->Receive(inbound->attached);
      return AdvanceAuth();
  }
}

void RdmaConnection::AdvanceAuth() {
  tls::TlsSession& session = *auth_->session;
  if (!session.handshake_done()) {
    StatusOr<tls::TlsSession::Step> step = session.Handshake();
    if (!step.ok()) return AuthFailed(step.status());
  } else {
    // A client waiting for VERIFIED: what comes is the server's alert (it
    // refused this side's certificate), or part of one.
    std::array<std::byte, 64> sink;
    StatusOr<size_t> read = session.Read(sink);
    if (!read.ok()) return AuthFailed(read.status());
    if (*read > 0) {
      return ProtocolError(Status(StatusCode::kInternal,
                                  "malformed frame: TLS application data in "
                                  "the handshake"));
    }
  }
  SendAuth();
}

void RdmaConnection::SendAuth() {
  if (torn_down_) return;
  tls::TlsSession& session = *auth_->session;
  const size_t room =
      SmallLimit() - tunables::kFramePrefixSize - sizeof(ControlMessage);
  bool posted = false;
  // One credit stays in reserve for CREDIT messages, as for any message.
  while (!session.Outgoing().empty() && credits_ >= 2 && SendSlotFree()) {
    const auto bytes =
        session.Outgoing().first(std::min(room, session.Outgoing().size()));
    ControlMessage message;
    message.kind = ControlKind::kAuth;
    message.length = static_cast<uint32_t>(bytes.size());
    OutgoingFrame frame;
    frame.type = FrameType::kControl;
    // Borrowed: PostSmall copies them into the send.
    frame.header = Buffer::Borrow(std::as_bytes(std::span(&message, 1)));
    frame.AddPayload(Buffer::Borrow(bytes));
    if (!PostSmall(frame, FrameType::kControl, {})) break;
    send_wrs_.back().send_flags |= IBV_SEND_SIGNALED;
    session.Consume(bytes.size());
    posted = true;
  }
  if (auth_->server && session.handshake_done() && !auth_->failed &&
      !auth_->verified_sent && session.Outgoing().empty() && credits_ >= 2 &&
      SendSlotFree()) {
    ControlMessage verified;
    verified.kind = ControlKind::kAuth;
    verified.flags = kAuthVerified;
    if (PostControl(verified)) {
      send_wrs_.back().send_flags |= IBV_SEND_SIGNALED;
      auth_->verified_sent = true;
      posted = true;
    }
  }
  if (posted) Post();
  if (auth_->verified_sent && !torn_down_) Authenticated();
}

void RdmaConnection::AuthFailed(const Status& why) {
  auth_->failed = true;
  SendAuth();  // The alert, if the session wrote one: the peer learns why.
  Close(Status(why.code(),
               "TLS handshake with " + peer_ + " failed: " + why.message()));
}

void RdmaConnection::Authenticated() {
  const tls::TlsSession& session = *auth_->session;
  identity_ = session.peer();
  Log().debug("{}: authenticated {} ({}, {})", peer_, identity_->subject,
              session.version(), session.cipher());
  auth_.reset();
  close_timer_.cancel();
  Established(Status());
}

}  // namespace rdmarpc::transport::rdma
