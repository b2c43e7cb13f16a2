// TcpConnection: bulk pulls and pushes over the socket (include/rdmarpc/
// bulk.h). The same API as RDMA's one-sided READ and WRITE, carried by
// control frames of kTcpBulkHeaderSize bytes of header:
//
//   offset size field
//        0    1 op      READ 16, DATA 17, WRITE 18, DONE 19
//        1    1 status  DATA and DONE: a status code, 0 for OK
//        2    6 zero
//        8    8 id      the borrower's, echoed in the answer
//       16    8 key     the loan (BulkDescriptor::key)
//       24    8 offset  into the loan
//       32    8 length  at most kBulkChunkSize
//
// The borrower sends READ (no payload) or WRITE (the bytes); the owner
// checks each against its LoanTable and answers DATA (the bytes) or DONE;
// an answer with an error carries the status message as its payload.
#include <algorithm>
#include <cstring>

#include "base/buffer_pool.h"
#include "base/little_endian.h"
#include "base/log.h"
#include "base/log_throttle.h"
#include "transport/tcp/tcp_connection_internal.h"

namespace rdmarpc::transport::tcp {
namespace {

enum BulkOpCode : uint8_t {
  kBulkRead = 16,
  kBulkData = 17,
  kBulkWrite = 18,
  kBulkDone = 19,
};

struct BulkHeader {
  uint8_t op = 0;
  uint8_t status = 0;
  uint64_t id = 0;
  uint64_t key = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

OutgoingFrame BulkFrame(const BulkHeader& h, Buffer payload = Buffer()) {
  OutgoingFrame frame;
  frame.type = FrameType::kControl;
  std::byte* out = frame.header.Prepare(kTcpBulkHeaderSize);
  std::memset(out, 0, kTcpBulkHeaderSize);
  out[0] = std::byte{h.op};
  out[1] = std::byte{h.status};
  PutLe<uint64_t>(out + 8, h.id);
  PutLe<uint64_t>(out + 16, h.key);
  PutLe<uint64_t>(out + 24, h.offset);
  PutLe<uint64_t>(out + 32, h.length);
  frame.header.Commit(kTcpBulkHeaderSize);
  frame.AddPayload(std::move(payload));
  return frame;
}

std::optional<BulkHeader> DecodeBulkHeader(std::span<const std::byte> in) {
  if (in.size() != kTcpBulkHeaderSize) return std::nullopt;
  for (size_t i = 2; i < 8; ++i) {
    if (in[i] != std::byte{0}) return std::nullopt;
  }
  BulkHeader h;
  h.op = std::to_integer<uint8_t>(in[0]);
  h.status = std::to_integer<uint8_t>(in[1]);
  h.id = GetLe<uint64_t>(&in[8]);
  h.key = GetLe<uint64_t>(&in[16]);
  h.offset = GetLe<uint64_t>(&in[24]);
  h.length = GetLe<uint64_t>(&in[32]);
  if (h.op < kBulkRead || h.op > kBulkDone) return std::nullopt;
  if (h.length > tunables::kBulkChunkSize || h.status > 16) {
    return std::nullopt;
  }
  return h;
}

}  // namespace

struct TcpConnection::BulkOp {
  bool push = false;
  uint64_t key = 0;
  uint64_t offset = 0;  // Into the loan.
  std::byte* local = nullptr;
  uint64_t length = 0;
  uint64_t issued = 0;  // Bytes sent for (push) or asked for (pull).
  uint32_t in_flight = 0;
  Status error;
  BulkCallback done;
  // Keeps the local memory registered while the bytes move.
  std::shared_ptr<MemoryRegistration> registration;
};

void TcpConnection::Pull(const BulkDescriptor& loan, uint64_t offset,
                         std::span<std::byte> destination, BulkCallback done) {
  auto op = std::make_shared<BulkOp>();
  op->local = destination.data();
  op->length = destination.size();
  op->offset = offset;
  op->done = std::move(done);
  StartBulk(std::move(op), loan, BulkAccess::kRead);
}

void TcpConnection::Push(std::span<const std::byte> source,
                         const BulkDescriptor& loan, uint64_t offset,
                         BulkCallback done) {
  auto op = std::make_shared<BulkOp>();
  op->push = true;
  op->local = const_cast<std::byte*>(source.data());
  op->length = source.size();
  op->offset = offset;
  op->done = std::move(done);
  StartBulk(std::move(op), loan, BulkAccess::kWrite);
}

void TcpConnection::StartBulk(std::shared_ptr<BulkOp> op,
                              const BulkDescriptor& loan, BulkAccess wanted) {
  op->key = loan.key;
  auto registration =
      CheckTransfer(loan, op->offset,
                    std::span<const std::byte>(op->local, op->length), wanted);
  Status checked = registration.status();
  if (registration.ok()) op->registration = std::move(*registration);
  PostToLoop([self = shared_from_this(), op = std::move(op),
              checked = std::move(checked)]() mutable {
    if (!checked.ok() || op->length == 0) return op->done(checked);
    if (self->torn_down_) return op->done(ClosedError(self->peer_));
    self->bulk_waiting_.push_back(std::move(op));
    self->PumpBulk();
  });
}

void TcpConnection::PumpBulk() {
  while (bulk_in_flight_.size() < tunables::kBulkWindowChunks &&
         !bulk_waiting_.empty() && !torn_down_) {
    const std::shared_ptr<BulkOp>& op = bulk_waiting_.front();
    if (!op->error.ok() || op->issued == op->length) {
      bulk_waiting_.pop_front();
      continue;
    }
    const uint64_t length =
        std::min<uint64_t>(op->length - op->issued, tunables::kBulkChunkSize);
    const uint64_t id = next_bulk_chunk_++;
    BulkHeader h;
    h.op = op->push ? kBulkWrite : kBulkRead;
    h.id = id;
    h.key = op->key;
    h.offset = op->offset + op->issued;
    h.length = length;
    Buffer payload;
    if (op->push) {
      payload =
          op->registration->Slice(static_cast<size_t>(op->local + op->issued -
                                                      op->registration->data()),
                                  length);
    }
    std::byte* destination = op->push ? nullptr : op->local + op->issued;
    op->issued += length;
    ++op->in_flight;
    bulk_in_flight_.emplace(id, BulkChunk{op, destination, length});
    if (Status sent = Send(BulkFrame(h, std::move(payload))); !sent.ok()) {
      FinishChunk(id, sent);
    }
  }
}

void TcpConnection::FinishChunk(uint64_t id, const Status& status) {
  const auto it = bulk_in_flight_.find(id);
  if (it == bulk_in_flight_.end()) return;
  const std::shared_ptr<BulkOp> op = std::move(it->second.op);
  bulk_in_flight_.erase(it);
  --op->in_flight;
  if (!status.ok() && op->error.ok()) op->error = status;
  const bool issued_all = op->issued == op->length || !op->error.ok();
  if (issued_all && op->in_flight == 0 && op->done) {
    BulkCallback done = std::move(op->done);
    done(op->error);
  }
  PumpBulk();
}

bool TcpConnection::TakeBulkPrefix(DecodedPrefix& decoded) {
  const FramePrefix& prefix = decoded.prefix;
  const bool bulk = prefix.type == FrameType::kControl && prefix.credits == 0 &&
                    prefix.header_size == kTcpBulkHeaderSize &&
                    prefix.payload_size <=
                        std::max<uint64_t>(tunables::kBulkChunkSize,
                                           tunables::kMaxStatusMessageSize);
  if (!bulk) {
    ProtocolError(Status(StatusCode::kInternal,
                         prefix.type == FrameType::kControl
                             ? "malformed frame: bad TCP control frame"
                             : "malformed frame: RDMA control field on a TCP "
                               "connection"));
    return false;
  }
  if (unadmitted_) {
    // Nothing was lent, nor asked for, before a call was admitted.
    ProtocolError(Status(StatusCode::kInternal,
                         "malformed frame: a bulk frame before the "
                         "connection's first call was admitted"));
    return false;
  }
  // A chunk is the transport's size, whatever max_payload_size says.
  decoded.verdict = PrefixVerdict::kAccept;
  return true;
}

void TcpConnection::OnBulkFrame(std::span<const std::byte> header,
                                Buffer payload, bool payload_dropped) {
  const std::optional<BulkHeader> h = DecodeBulkHeader(header);
  if (!h) {
    return ProtocolError(
        Status(StatusCode::kInternal, "malformed frame: bad bulk header"));
  }
  const bool carries_bytes =
      h->op == kBulkWrite || (h->op == kBulkData && h->status == 0);
  if (!payload_dropped &&
      (carries_bytes ? payload.size() != h->length
                     : (h->op == kBulkRead && !payload.empty()))) {
    return ProtocolError(Status(StatusCode::kInternal,
                                "malformed frame: a bulk frame's payload is "
                                "not the length it names"));
  }
  const Status dropped(StatusCode::kResourceExhausted,
                       "a bulk chunk's bytes were refused: the process holds "
                       "too much for its peers (rdmarpc::SetPeerMemoryLimit)");
  switch (h->op) {
    case kBulkRead: {
      Buffer bytes = PooledBuffer(h->length);
      const Status read =
          loans_.With(h->key, h->offset, h->length, BulkAccess::kRead,
                      [&](std::span<std::byte> lent) {
                        std::memcpy(bytes.data(), lent.data(), lent.size());
                      });
      return AnswerBulk(kBulkData, h->id, read,
                        read.ok() ? std::move(bytes) : Buffer());
    }
    case kBulkWrite: {
      const Status written =
          payload_dropped
              ? dropped
              : loans_.With(h->key, h->offset, h->length, BulkAccess::kWrite,
                            [&](std::span<std::byte> lent) {
                              std::memcpy(lent.data(), payload.data(),
                                          lent.size());
                            });
      return AnswerBulk(kBulkDone, h->id, written, Buffer());
    }
    case kBulkData:
    case kBulkDone: {
      const auto it = bulk_in_flight_.find(h->id);
      if (it == bulk_in_flight_.end()) return;  // Not asked for: ignored.
      Status status;
      if (payload_dropped) {
        status = dropped;
      } else if (h->status != 0) {
        status = Status(static_cast<StatusCode>(h->status),
                        "the loan's owner " + peer_ +
                            " refused: " + std::string(payload.view()));
      } else if (h->op == kBulkData) {
        if (it->second.destination == nullptr ||
            it->second.length != h->length) {
          return ProtocolError(
              Status(StatusCode::kInternal,
                     "malformed frame: a bulk answer unlike what was asked"));
        }
        std::memcpy(it->second.destination, payload.data(), payload.size());
      }
      return FinishChunk(h->id, status);
    }
  }
}

void TcpConnection::AnswerBulk(uint8_t op, uint64_t id, const Status& status,
                               Buffer payload) {
  BulkHeader h;
  h.op = op;
  h.id = id;
  if (!status.ok()) {
    h.status = static_cast<uint8_t>(status.code());
    const std::string_view message =
        std::string_view(status.message())
            .substr(0, tunables::kMaxStatusMessageSize);
    payload = Buffer::CopyOf(message);
  }
  h.length = status.ok() ? payload.size() : 0;
  if (Status sent = Send(BulkFrame(h, std::move(payload))); !sent.ok()) {
    // The peer does not read what it asked for: its own operation waits.
    if (const auto held = ThrottleLog("bulk answer dropped", peer_)) {
      Log().warn("{}: bulk answer not sent: {}{}", peer_, sent.message(),
                 HeldBack(*held));
    }
  }
}

void TcpConnection::EndBulk(const Status& reason) {
  loans_.Clear();
  const Status closed(
      StatusCode::kUnavailable,
      "connection to " + peer_ +
          " closed during a bulk transfer: " + reason.message());
  std::vector<std::shared_ptr<BulkOp>> ended;
  for (auto& [id, chunk] : bulk_in_flight_) ended.push_back(chunk.op);
  for (auto& op : bulk_waiting_) ended.push_back(op);
  bulk_in_flight_.clear();
  bulk_waiting_.clear();
  for (auto& op : ended) {
    if (op->done) {
      BulkCallback done = std::move(op->done);
      done(closed);
    }
  }
}

}  // namespace rdmarpc::transport::tcp
