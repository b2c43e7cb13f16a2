// The transport interface: a message-oriented, full-duplex connection.
//
// A Connection moves whole frames (a header and payload slices) between two
// peers. It is built so an RDMA transport can implement it without copies:
//  - outgoing bytes are Buffers the transport owns until they have left (a
//    Buffer's release hook tells the owner of registered memory it is free);
//  - received frames arrive as owned Buffers, so a transport can hand over
//    the memory a frame landed in (an RDMA grant, a TCP staging block)
//    without a copy and get it back when the frame is destroyed.
//
// Threading: a connection runs on one executor (a single-threaded
// io_context). Send and Close may be called from any thread. Observer
// callbacks run on the connection's executor.
#ifndef RDMARPC_TRANSPORT_CONNECTION_H_
#define RDMARPC_TRANSPORT_CONNECTION_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cassert>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "rdmarpc/buffer.h"
#include "rdmarpc/connection_stats.h"
#include "rdmarpc/peer_identity.h"
#include "rdmarpc/status.h"
#include "rdmarpc/transport_options.h"
#include "rdmarpc/tunables.h"
#include "transport/bulk.h"
#include "transport/frame.h"
#include "transport/header_bytes.h"

namespace rdmarpc::transport {

// An outgoing frame's payload slices: only [0, count) are live Buffers, so
// that making, moving and destroying a frame touches the slices it carries
// (most carry one) rather than all kMaxPayloadSlices.
class PayloadSlices {
 public:
  PayloadSlices() = default;
  PayloadSlices(const PayloadSlices&) = delete;
  PayloadSlices& operator=(const PayloadSlices&) = delete;
  ~PayloadSlices() { std::destroy_n(slices(), count_); }

  size_t size() const { return count_; }
  Buffer& operator[](size_t i) {
    assert(i < count_);
    return slices()[i];
  }
  const Buffer& operator[](size_t i) const {
    assert(i < count_);
    return slices()[i];
  }
  [[gnu::always_inline]] void push_back(Buffer&& slice) {
    assert(count_ < tunables::kMaxPayloadSlices);
    new (slices() + count_) Buffer(std::move(slice));
    ++count_;
  }
  // Takes `other`'s slices, which it is left without.
  void TakeFrom(PayloadSlices& other) noexcept {
    std::destroy_n(slices(), count_);
    count_ = other.count_;
    for (size_t i = 0; i < count_; ++i) {
      new (slices() + i) Buffer(std::move(other.slices()[i]));
    }
    std::destroy_n(other.slices(), other.count_);
    other.count_ = 0;
  }

 private:
  Buffer* slices() { return std::launder(reinterpret_cast<Buffer*>(bytes_)); }
  const Buffer* slices() const {
    return std::launder(reinterpret_cast<const Buffer*>(bytes_));
  }
  alignas(
      Buffer) std::byte bytes_[sizeof(Buffer) * tunables::kMaxPayloadSlices];
  size_t count_ = 0;
};

// A frame to send: a header and up to kMaxPayloadSlices payload slices,
// gathered on the wire without being copied together.
struct OutgoingFrame {
  FrameType type = FrameType::kRpc;
  HeaderBytes header;
  // The payload, in slices.
  PayloadSlices payload;
  // Past max_queued_bytes, a frame that may wait is queued anyway, in order,
  // where another is refused: a client's requests, whose bytes its own
  // outstanding calls bound (rpc::ChannelOptions::wait_for_room).
  bool may_wait = false;

  OutgoingFrame() = default;
  OutgoingFrame(OutgoingFrame&& other) noexcept
      : type(other.type),
        header(std::move(other.header)),
        may_wait(other.may_wait) {
    payload.TakeFrom(other.payload);
  }
  OutgoingFrame& operator=(OutgoingFrame&& other) noexcept {
    if (this != &other) {
      type = other.type;
      header = std::move(other.header);
      payload.TakeFrom(other.payload);
      may_wait = other.may_wait;
    }
    return *this;
  }

  // Always inline: every call's frame maker adds a slice, and an out-of-line
  // copy of this (GCC's choice, which moved with unrelated code) cost 50.
  [[gnu::always_inline]] void AddPayload(Buffer&& slice) {
    if (!slice.empty()) payload.push_back(std::move(slice));
  }
  size_t payload_slices() const { return payload.size(); }
  uint64_t payload_size() const {
    uint64_t total = 0;
    for (size_t i = 0; i < payload.size(); ++i) total += payload[i].size();
    return total;
  }
};

// A whole received frame. It owns its bytes; destroying it (or the payload
// taken from it) returns them to the transport.
class ReceivedFrame {
 public:
  ReceivedFrame(FrameType type, Buffer block, uint32_t header_size,
                uint64_t dropped_payload_size,
                DropReason drop_reason = DropReason::kTooLarge)
      : type_(type),
        drop_reason_(dropped_payload_size > 0 ? drop_reason
                                              : DropReason::kNone),
        block_(std::move(block)),
        header_size_(header_size),
        dropped_payload_size_(dropped_payload_size) {}

  FrameType type() const { return type_; }
  std::span<const std::byte> header() const {
    return block_.span().first(header_size_);
  }
  uint64_t payload_size() const { return block_.size() - header_size_; }
  // Non-zero when the payload exceeded the receiver's maximum and was
  // discarded unread; the header is intact so the call can be answered.
  uint64_t dropped_payload_size() const { return dropped_payload_size_; }
  DropReason drop_reason() const { return drop_reason_; }

  // The payload as an owned Buffer; header() is invalid afterwards.
  Buffer TakePayload() && {
    block_.RemovePrefix(header_size_);
    header_size_ = 0;
    return std::move(block_);
  }

 private:
  FrameType type_;
  DropReason drop_reason_;
  Buffer block_;  // Header, then payload.
  uint32_t header_size_;
  uint64_t dropped_payload_size_;
};

// Adds to a ConnectionStats counter. Only the connection's event-loop thread
// writes its counters, so a relaxed load and store do, where ++ would be a
// locked read-modify-write on every message; other threads read them
// relaxed.
[[gnu::always_inline]] inline void Bump(std::atomic<uint64_t>& counter,
                                        uint64_t n = 1) {
  counter.store(counter.load(std::memory_order_relaxed) + n,
                std::memory_order_relaxed);
}

class ConnectionObserver {
 public:
  virtual ~ConnectionObserver() = default;
  // Frames arrive in the order the peer sent them. The observer may move
  // from `frame` (a reference: passing it costs no move of its own).
  virtual void OnFrame(ReceivedFrame&& frame) = 0;
  // Exactly once, after which no callback arrives: the peer went away, a
  // malformed frame arrived, or Close() was called.
  virtual void OnClose(const Status& reason) = 0;
  // On a connection that requires admission (Connection::RequireAdmission)
  // and is not yet admitted: a frame whose payload is over the bound has
  // arrived up to its header. True takes the payload; false discards it as
  // it arrives, and the frame is delivered with its payload dropped.
  virtual bool AdmitHeader(std::span<const std::byte> header) {
    (void)header;
    return true;
  }
};

class Connection {
 public:
  virtual ~Connection() = default;

  // Starts delivering frames to `observer`. The connection keeps the observer
  // alive until OnClose has returned.
  virtual void Start(std::shared_ptr<ConnectionObserver> observer) = 0;

  // Queues a frame; frames leave in the order queued, frames queued while a
  // write is under way leave together. UNAVAILABLE once the connection is
  // closing. Takes the frame by reference so that it moves once, into the
  // queue (or not at all, written at once): a frame is a few hundred bytes,
  // and a parameter by value cost a call two more moves. On an error the
  // frame may be left with the caller, whose destroying it releases its
  // buffers.
  virtual Status Send(OutgoingFrame&& frame) = 0;

  // Closes with a reason (delivered to OnClose). Frames already queued are
  // written first (bounded by kCloseFlushTimeout); later Sends fail.
  // Idempotent.
  virtual void Close(const Status& reason) = 0;
  // Closes without waiting for what is queued or posted: for a connection
  // taken for dead (transport/rails: a rail that stopped making progress).
  // Bulk transfers under way fail UNAVAILABLE once nothing more can land.
  virtual void Abort(const Status& reason) { Close(reason); }

  virtual boost::asio::any_io_executor executor() const = 0;
  // The peer as a URI: "tcp://127.0.0.1:40001".
  virtual const std::string& peer() const = 0;
  // Who the peer proved to be (TLS); null when it proved nothing.
  virtual const PeerIdentity* peer_identity() const { return nullptr; }
  virtual const ConnectionStats& stats() const = 0;
  // What frames queued and not yet handed to the socket or the send queue
  // (waiting for room, or on RDMA for credits) cost now: on TCP their bytes
  // and their queue entries (include/rdmarpc/peer_memory.h), on RDMA their
  // bytes.
  virtual uint64_t queued_bytes() const = 0;

  // Admission (the server's side, include/rdmarpc/interceptor.h). Before
  // Start: until Admit(), a frame whose payload is over `max_payload` is
  // read up to its header and handed to the observer's AdmitHeader first
  // (RDMA: every frame by rendezvous, whatever `max_payload`;
  // transport/rdma/protocol.h).
  virtual void RequireAdmission(uint64_t max_payload) { (void)max_payload; }
  // The peer is admitted: frames are read whole from now on. On the
  // connection's executor.
  virtual void Admit() {}
  // A connection of several rails (transport/rails): each rail's counters;
  // empty for any other. Any thread.
  virtual std::vector<RailStats> rail_stats() const { return {}; }

  // Bulk (include/rdmarpc/bulk.h, transport/bulk.h): both transports
  // implement these; the defaults answer UNIMPLEMENTED. The owner's side,
  // any thread: lends `bytes`, inside a live registration, to the peer
  // until Revoke or the close. Errors as LoanTable::Lend's.
  virtual StatusOr<BulkDescriptor> Lend(std::span<std::byte> bytes,
                                        BulkAccess access) {
    (void)bytes;
    (void)access;
    return BulkUnsupported();
  }
  // As Lend, for a descriptor that reaches the peer over another connection
  // (a rail's, transport/rails): `usable` runs once the peer can reach the
  // loan on this one (over RDMA once its window's bind has completed: on
  // its own connection the bind precedes every later frame, on another
  // nothing orders them), or the connection closed; any thread. Not run if
  // Lend fails.
  virtual StatusOr<BulkDescriptor> LendAcross(std::span<std::byte> bytes,
                                              BulkAccess access,
                                              UniqueFunction<void()> usable) {
    StatusOr<BulkDescriptor> lent = Lend(bytes, access);
    if (lent.ok()) usable();
    return lent;
  }
  // Ends loan `key`; `revoked` runs once the peer can no longer reach the
  // memory (at once over TCP; over RDMA when the window's invalidation has
  // completed, or the connection closed), on any thread. Unknown keys are
  // revoked at once.
  virtual void Revoke(uint64_t key, UniqueFunction<void()> revoked) {
    (void)key;
    revoked();
  }
  // The borrower's side, any thread: copies [offset, offset + size) of the
  // peer's loan into `destination`, or `source` into the loan at `offset`.
  // Local memory must lie inside a live registration and stay valid until
  // `done` runs, once, on the connection's executor: OK, or the range or
  // access check's error, the owner's (a revoked loan), or UNAVAILABLE once
  // the connection is closed.
  virtual void Pull(const BulkDescriptor& loan, uint64_t offset,
                    std::span<std::byte> destination, BulkCallback done) {
    (void)loan;
    (void)offset;
    (void)destination;
    boost::asio::post(executor(), [done = std::move(done)]() mutable {
      done(BulkUnsupported());
    });
  }
  virtual void Push(std::span<const std::byte> source,
                    const BulkDescriptor& loan, uint64_t offset,
                    BulkCallback done) {
    (void)source;
    (void)loan;
    (void)offset;
    boost::asio::post(executor(), [done = std::move(done)]() mutable {
      done(BulkUnsupported());
    });
  }

 private:
  static Status BulkUnsupported() {
    return Status(StatusCode::kUnimplemented,
                  "bulk loans are not supported on this transport yet");
  }
};

// What Send returns once the connection to `peer` is closing or closed.
inline Status ClosedError(const std::string& peer) {
  return Status(StatusCode::kUnavailable,
                "connection to " + peer + " is closed");
}

// Send's check of max_queued_bytes: `queued` bytes wait already.
inline Status CheckQueueRoom(uint64_t queued, uint64_t frame_bytes,
                             uint64_t limit, const std::string& peer) {
  if (queued == 0 || queued + frame_bytes <= limit) return Status();
  return Status(StatusCode::kResourceExhausted,
                "send queue to " + peer + " is full (" +
                    std::to_string(queued) + " bytes waiting, limit " +
                    std::to_string(limit) + "): the peer is not keeping up");
}

// Marks a transport as inside its observer's OnFrame for one scope (the
// `inside_on_frame` that NotifyClosed takes), even if OnFrame throws.
class InsideOnFrame {
 public:
  explicit InsideOnFrame(bool& flag) : flag_(flag) { flag_ = true; }
  ~InsideOnFrame() { flag_ = false; }
  InsideOnFrame(const InsideOnFrame&) = delete;
  InsideOnFrame& operator=(const InsideOnFrame&) = delete;

 private:
  bool& flag_;
};

// A transport's last word to its observer. Closed from inside the
// observer's own OnFrame (a write that failed in Send), OnClose is posted to
// `executor`, so it runs after OnFrame has returned, never inside it.
inline void NotifyClosed(std::shared_ptr<ConnectionObserver> observer,
                         const Status& reason, bool inside_on_frame,
                         const boost::asio::any_io_executor& executor) {
  if (!observer) return;
  if (!inside_on_frame) return observer->OnClose(reason);
  boost::asio::post(executor, [observer = std::move(observer), reason] {
    observer->OnClose(reason);
  });
}

// Picks the io_context that will own the next accepted connection.
using ContextPicker = std::function<boost::asio::io_context&()>;
using AcceptHandler = std::function<void(std::shared_ptr<Connection>)>;
using ConnectHandler =
    std::function<void(StatusOr<std::shared_ptr<Connection>>)>;

class Listener {
 public:
  virtual ~Listener() = default;
  // The URI actually bound: a port of 0 is replaced by the chosen port.
  virtual const std::string& uri() const = 0;
  // Stops accepting; connections already accepted are unaffected.
  virtual void Close() = 0;
};

}  // namespace rdmarpc::transport

#endif  // RDMARPC_TRANSPORT_CONNECTION_H_
