// A Connection over one reliable-connected queue pair (librdmacm + verbs).
//
// See protocol.h for the wire protocol (credits, rendezvous). Resources, all
// RAII: per connection, its rdma_cm id and one QP; shared, its loop's
// rdma_cm event channel (cm_channel.h), and (completion_group.h) the
// device's PD and its loop's completion group: the CQ and completion channel
// its completions arrive on, the shared receive queue its receives come from,
// and the pool its sends are staged in. The group hands the connection its
// completions on its Asio executor, so completions, timers and sockets share
// one event loop.
//
// Receive: small frames are copied out of the shared receive buffer (which
// the group re-posts at once, so a slow handler never starves a peer of
// credits); a large frame lands by WRITE WITH IMMEDIATE in a block granted
// for it (from the device's grant pool, behind a memory window bound for
// it) and is delivered without a copy.
// Send: small frames are copied into a staging slot of the group's send pool
// (or, when they fit inline, into a small area the device copies from) and
// posted as one chain per flush (a single doorbell). Large frames are
// written (write_plan.h) straight from the caller's memory when it lies in a
// MemoryRegistration (its memory region cached per device) or in the grant
// pool (a received frame sent on), and through the loop's registered bounce
// chunks when it does not.
//
// The implementation is split by concern: rdma_connection.cc (setup and the
// rdma_cm handshake), rdma_auth.cc (the TLS handshake over the QP, when
// configured), rdma_completions.cc (completion polling, receives),
// rdma_send.cc (the send path and credits), rdma_rendezvous.cc (large
// transfers received: RTS, GRANT, landing), rdma_writes.cc (large transfers
// sent: the WRITEs, the bounce pool), rdma_standing.cc (standing grants),
// rdma_close.cc; transfers.h declares the large frames under way.
#ifndef RDMARPC_TRANSPORT_RDMA_RDMA_CONNECTION_H_
#define RDMARPC_TRANSPORT_RDMA_RDMA_CONNECTION_H_

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/futex_mutex.h"
#include "base/ring_queue.h"
#include "rdmarpc/memory.h"
#include "transport/connection.h"
#include "transport/keepalive.h"
#include "transport/rdma/cm_channel.h"
#include "transport/rdma/completion_group.h"
#include "transport/rdma/completion_member.h"
#include "transport/rdma/device_events.h"
#include "transport/rdma/grant_memory.h"
#include "transport/rdma/peer_checks.h"
#include "transport/rdma/protocol.h"
#include "transport/rdma/read_depth.h"
#include "transport/rdma/registration_cache.h"
#include "transport/rdma/transfers.h"
#include "transport/rdma/verbs.h"

namespace rdmarpc::transport::rdma {

class RdmaConnection final
    : public Connection,
      public CmEventHandler,
      public CompletionMember,
      public std::enable_shared_from_this<RdmaConnection> {
 public:
  // Runs once: OK when the connection is established, else why not; with
  // the connection. Until then its loop holds it (LoopState), and a loop
  // destroyed first lets go of it without running this.
  using EstablishedHandler =
      std::function<void(const Status&, std::shared_ptr<RdmaConnection>)>;

  // Active side: resolves `host:port` and connects; `rail` names the
  // session and rail it opens, if it is one of several (transport/rails).
  static std::shared_ptr<RdmaConnection> Connect(
      boost::asio::io_context& context, const std::string& host, uint16_t port,
      const TransportOptions& options, const RailHello& rail,
      EstablishedHandler on_established);

  // Passive side: `id` came from a CONNECT_REQUEST (its event acknowledged);
  // it is moved onto this connection's own event channel and accepted.
  // `requested_depth` is the request's READ depth, in this side's view.
  static std::shared_ptr<RdmaConnection> Accept(
      boost::asio::io_context& context, CmId id, const ConnParams& peer,
      ReadDepth requested_depth, const TransportOptions& options,
      EstablishedHandler on_established);

  ~RdmaConnection() override;

  void Start(std::shared_ptr<ConnectionObserver> observer) override;
  Status Send(OutgoingFrame&& frame) override;
  void Close(const Status& reason) override;
  void Abort(const Status& reason) override;
  boost::asio::any_io_executor executor() const override;
  const std::string& peer() const override { return peer_; }
  const ConnectionStats& stats() const override { return stats_; }
  uint64_t queued_bytes() const override {
    std::lock_guard lock(mu_);
    return queued_bytes_;
  }
  // What a queued frame of `bytes` counts in the peer memory budget
  // (include/rdmarpc/peer_memory.h): its bytes and its queue entry.
  static constexpr uint64_t QueuedCharge(uint64_t bytes) {
    return bytes + sizeof(OutgoingFrame);
  }
  // Until Admit(), no RTS of the peer's is granted before its header was
  // seen and admitted (protocol.h, Admission); `max_payload` does not
  // apply: the peer may SEND only what its initial credits' receives hold.
  void RequireAdmission(uint64_t max_payload) override;
  void Admit() override { admitted_ = true; }
  // Who the peer proved to be (TransportOptions::tls), before hand-over.
  const PeerIdentity* peer_identity() const override {
    return identity_ && identity_->authenticated() ? &*identity_ : nullptr;
  }

  // Bulk (rdma_bulk.cc, docs/protocol.md "Bulk over RDMA"). A loan is a
  // type 2 memory window bound to this QP over the lent bytes; a pull or
  // push is RDMA READs or WRITEs of at most kBulkChunkSize, at most the
  // negotiated READ depth (or kBulkWindowChunks WRITEs) in flight.
  StatusOr<BulkDescriptor> Lend(std::span<std::byte> bytes,
                                BulkAccess access) override {
    return LendImpl(bytes, access, nullptr);
  }
  // Its bind is signaled, and `usable` runs as it completes.
  StatusOr<BulkDescriptor> LendAcross(std::span<std::byte> bytes,
                                      BulkAccess access,
                                      UniqueFunction<void()> usable) override {
    return LendImpl(bytes, access, std::move(usable));
  }
  void Revoke(uint64_t key, UniqueFunction<void()> revoked) override;
  void Pull(const BulkDescriptor& loan, uint64_t offset,
            std::span<std::byte> destination, BulkCallback done) override;
  void Push(std::span<const std::byte> source, const BulkDescriptor& loan,
            uint64_t offset, BulkCallback done) override;

  // The peer's connection parameters (passive side: its rail, if it opened
  // one). Once established.
  const ConnParams& peer_params() const { return peer_params_; }

  // Memory regions its device's domain holds for MemoryRegistrations.
  size_t cached_registrations() const {
    return domain_ ? domain_->registrations().size() : 0;
  }

  // Where its queue pair runs, read back from the QP (ibv_query_qp): what
  // the device, port and GID options (TransportOptions::rdma_device ...) and
  // the path chose. Call it on the connection's loop, once established.
  struct Path {
    std::string device;
    uint32_t port = 0;
    uint32_t gid_index = 0;      // The source GID's index.
    uint32_t traffic_class = 0;  // The GRH's (RoCE: the IP TOS).
    uint32_t path_mtu = 0;       // Bytes.
    uint32_t ack_timeout = 0;    // Exponent of 4.096 us.
    uint32_t retry_count = 0;
    // RDMA READs outstanding at once (tunables::kRdmaMaxReadDepth): this
    // side's to the peer, and the peer's this side serves.
    uint32_t reads_issued = 0;
    uint32_t reads_served = 0;
  };
  StatusOr<Path> QueryPath() const;

  // Test hook: moves the QP to the error state, as a fabric failure would.
  void ForceQpErrorForTesting();

  RdmaConnection(boost::asio::io_context& context,
                 const TransportOptions& options);  // Use Connect/Accept.

 private:
  // Large frames under way, each way (transfers.h).
  using OutgoingTransfer = rdma::OutgoingTransfer;
  using IncomingTransfer = rdma::IncomingTransfer;

  // Connection setup (rdma_cm events).
  Status OpenEventChannel();  // Joins the loop's CmChannel.
  void OnCmEvent(rdma_cm_event* event) override;
  // OnCmEvent's cases. `params`: the listener's, with its accept or reject
  // (active side only); `refused`: rejected for lack of resources.
  void OnRouteResolved();
  void AwaitAccept();  // After the connect request: a hung listener.
  void OnEstablished(const std::optional<StatusOr<ConnParams>>& params);
  void OnDeviceRemoval();
  void OnCmFailure(const std::string& what, int status, bool refused,
                   const std::optional<StatusOr<ConnParams>>& params);
  Status CreateResources();
  void AdoptPeerParams(const ConnParams& params);  // Credits and grants.
  void Established(const Status& status);
  // Once established: whether the QP is on the device, port and GID the
  // options asked for.
  Status CheckPath() const;
  Status SetTos();  // TransportOptions::rdma_tos on the id, if set.

  // Completions, from the group (or, for those that came before Start,
  // replayed by Start).
  void OnCompletion(const ibv_wc& wc) override;
  // A completion in error: the connection closes, saying why.
  void OnCompletionError(const ibv_wc& wc);
  // A SEND of `bytes` at `data`: a plain RPC frame is checked inline and
  // delivered; anything else (a control message, a payload over the limit,
  // a malformed message) goes to OnOtherReceive, out of line.
  void OnReceive(const std::byte* data, uint32_t bytes);
  void OnOtherReceive(const std::byte* data, uint32_t bytes);
  // Delivers the frame of `prefix` at `data` (its prefix) to the observer,
  // its header and, unless `dropped`, its payload copied out.
  void DeliverReceived(const std::byte* data, const FramePrefix& prefix,
                       bool dropped);
  void OnWriteLanded(uint32_t imm, uint32_t bytes);
  // Receive-credit accounting for one message received from the peer (a
  // SEND or WRITE WITH IMMEDIATE): false (closed) when it had no credit.
  // `frame`: an RPC frame or a transfer's landing, not a control message;
  // only frames show a busy peer that is lent more.
  bool UseCredit(bool frame);
  void NoCreditLeft();  // UseCredit's error: the connection closes.
  // The group ended a batch that had completions of ours: flush.
  void AfterBatch(bool woken) override;
  void OnControl(const ControlMessage& message);
  void OnGrant(const ControlMessage& message);  // Of ours: the peer's GRANT.
  void OnRts(const ControlMessage& rts);
  // Admission (protocol.h). The receiver's: whether `transfer`, not yet
  // granted, waits for its header (asking for it if not yet asked); a
  // HEADER, admitted or refused; refused transfers at the head of the
  // queue, delivered. The sender's: a GRANT with kGrantHeaderFirst or
  // kGrantRefused, and the HEADER message posted.
  bool AwaitsHeader(IncomingTransfer& transfer);
  void OnHeader(const ControlMessage& message,
                std::span<const std::byte> bytes);
  void DeliverRefused();
  void OnAdmissionGrant(OutgoingTransfer& transfer,
                        const ControlMessage& grant);
  bool PostHeader(const ControlMessage& message);
  // Standing grants (protocol.h). Ours for the peer: an RTS that uses the
  // oldest, a RELEASE that gives some back, and offering another once a
  // frame of `landed` bytes landed from the pool.
  void OnStandingRts(const ControlMessage& rts);
  void OnRelease(const ControlMessage& release);
  void OfferStandingGrant(uint64_t landed);
  // Our oldest standing grant, if it was sent (the peer may name it).
  std::optional<StandingGrant> OldestStanding();
  // The peer's for us: a GRANT with kGrantStanding, and whether the next
  // transfer, of `bytes` (header and payload), may go into the oldest.
  void OnStandingGrant(const ControlMessage& grant);
  bool TakeStandingGrant(OutgoingTransfer& transfer, ControlMessage& rts);
  // PlanGrant for `transfer` with `ahead` of the peer's transfers before
  // it; for a segmented one, its next segment.
  StatusOr<GrantPlan> PlanGrantFor(const IncomingTransfer& transfer,
                                   size_t ahead);
  // Registered bytes this connection may grant now.
  uint64_t GrantBudget(uint64_t length);
  void Grant(IncomingTransfer& transfer, const GrantPlan& plan);
  // Grant's parts: logs and counts a payload it discards; queues the GRANT
  // message for `transfer`'s memory (`pooled`: behind a memory window).
  void NoteDrop(uint64_t payload_size, DropReason reason);
  void QueueGrant(const IncomingTransfer& transfer, const GrantPlan& plan,
                  bool pooled);
  void GrantWaiting();  // Grants RTSs that waited for memory, in order.
  // The pool this connection's grants come from: null when
  // TransportOptions::rdma_pooled_grants is off or the device has none.
  GrantPool* PooledGrants() const {
    return options_.rdma_pooled_grants ? domain_->grant_pool() : nullptr;
  }
  // A grant-pool block and a window for `transfer`, if the pool and the
  // device can give them (else the caller registers a block).
  bool GrantFromPool(IncomingTransfer& transfer, size_t extent);
  // Memory windows (one per open grant from the pool, reused): a free one,
  // allocated on first need; null if the device will not allocate one.
  ibv_mw* TakeWindow();
  // Posts a queued control message; a GRANT on a pool block is preceded by
  // the bind of its window. False when the send queue or pool is full.
  bool PostQueuedControl(const ControlMessage& message);
  // The frame of a transfer landed. A windowed one is delivered once its
  // window's invalidation completes (OnInvalidated): until then the peer
  // could still write into it, so it and every message after it wait.
  void Deliver(IncomingTransfer transfer);
  // A segment landed: copied into the frame, the next one granted; false
  // once the frame is whole (`transfer.block` then holds it).
  bool SegmentLanded(IncomingTransfer& transfer);
  void PostInvalidates();
  void OnInvalidated();
  // Whether a BIND_MW or LOCAL_INV may be posted now: where the device
  // needs an idle send queue for them (DeviceDomain), only once every
  // request that could be retransmitted has completed. Else it marks
  // local_op_waiting_, and Flush posts nothing else until it goes; and
  // where nothing signaled follows the last request on the wire, it asks
  // for a completion that says when it is done (SignalLastTransmit).
  bool LocalOpMayGo();
  // Makes the last request on the wire signaled if it is still in the
  // chain being built, else adds a signaled zero-length RDMA WRITE after it
  // (no key is checked and nothing lands for a zero-length WRITE: IB spec
  // C9-88; it takes none of the peer's receives). Its completion means
  // every request before it is done. Nothing if the send queue is full: a
  // completion then comes anyway and Flush asks again.
  void SignalLastTransmit();
  // Completions held while a landed frame's window is invalidated (and
  // those that came before Start), in order, until the hold ends.
  void ReplayHeld();

  // Sending.
  void Flush();
  // Flush's parts. Under mu_: moves the large frame at the head of queue_
  // into outgoing_ and posts its RTS; true when a standing grant took it,
  // its WRITEs to be started now. Then: CREDIT messages, to return credits
  // or to mark the end of a draining close.
  bool StartTransferLocked();
  void PostCredits();
  // False, with nothing posted, when no staging slot is free.
  bool PostSmall(const OutgoingFrame& frame, FrameType type,
                 std::span<const std::byte> body);
  bool PostControl(const ControlMessage& message);
  // True while a large frame of ours has WRITEs left to post: frames queued
  // behind it wait (the peer receives frames in the order they are posted).
  bool WritesPending();
  void PostWrites();
  // The grant arrived: plan the WRITEs.
  void StartWrites(OutgoingTransfer& transfer);
  // Posts the next planned WRITE; false if blocked.
  bool PostWrite(OutgoingTransfer& transfer);
  // A bounce chunk of the group's for WRITE `seq`, held until it completes;
  // null when all are busy (Flush runs again once one is free).
  std::byte* AcquireBounceChunk(uint64_t seq, uint32_t* lkey);
  void ReleaseBounceChunks(uint64_t completed);
  // Frames up to this size (prefix included) travel as one SEND.
  size_t SmallLimit() const {
    return std::min<size_t>(tunables::kRdmaReceiveBufferSize,
                            peer_params_.receive_buffer_size);
  }
  // Send may post a small frame itself: nothing it could overtake but the
  // queue (which Send checks too), and a credit beyond the reserve and a
  // slot.
  bool CanPostSmallAtOnce(uint64_t frame_bytes) const;
  bool SendSlotFree() const {
    return posted_ - completed_ < tunables::kRdmaSendDepth;
  }
  // The last credit goes only to a message that returns credits. Spent on
  // one that returns none (a control message while nothing is owed, a
  // transfer's last WRITE WITH IMMEDIATE), and the peer doing the same at
  // the same moment, each side would owe the other credits it has none left
  // to send: both silent until keepalive closes the connection. Kept this
  // way, a side at zero credits last sent some back, so its peer holds one
  // and owes it at least one: its CREDIT can always go.
  bool MaySpendCredit(bool returns_credits) const {
    return credits_ >= 2 || (credits_ == 1 && returns_credits);
  }
  // A staging slot for work request `seq`, held until it completes; null
  // when the group's pool has none (Flush runs again once one is free).
  std::byte* AcquireStaging(uint64_t seq, uint32_t* lkey);
  void ReleaseStaging(uint64_t completed);
  void Post();  // Posts the chain built by PostSmall/PostWrite.

  // For RDMARPC_TRACE: 0 on the connecting side, 1 on the accepting side.
  int TraceSide() const { return host_.empty() ? 1 : 0; }

  // Keepalive (transport/keepalive.h): the timer's next tick.
  void ArmKeepalive();
  // The peer pinged too often: TOO_MANY_PINGS, then close.
  void TooManyPings();
  // Keepalive found the connection idle: if nothing waits to be sent,
  // queues a RELEASE of the standing grants held and a GIVE_BACK of the
  // credits held beyond the peer's initial ones.
  void GiveBackIdleCredits();

  void MaybeFinishClose();
  void ProtocolError(const Status& error);
  void CloseNow(const Status& reason) override;
  std::weak_ptr<CompletionMember> WeakMember() override {
    return weak_from_this();
  }
  // UNAVAILABLE "connection to PEER lost: WHY", for a connection that dies.
  Status Lost(std::string_view why) const;
  // A verbs async event of this connection's device (device_events.h): a
  // fatal one for its QP, CQ or device closes it; a port down for longer
  // than kRdmaPortDownGrace closes it too.
  void OnDeviceEvent(const DeviceEvent& event);
  // Frees every verbs resource, then the rdma_cm id, in the order the
  // device needs (QP first; the device hold before the id). CloseNow posts
  // it, and the destructor calls it: the kernel cannot finish removing a
  // device while a process holds anything on it, and whoever holds this
  // connection (a server's table, a pending call) may let go much later.
  void ReleaseDevice();

  boost::asio::io_context& context_;
  const TransportOptions options_;
  std::string peer_ = "rdma://?";
  ConnectionStats stats_;
  std::shared_ptr<ConnectionObserver> observer_;
  EstablishedHandler on_established_;
  bool established_ = false;
  // Inside observer_->OnFrame (loop thread): CloseNow defers OnClose.
  bool in_observer_ = false;
  // torn_down_ (CompletionMember): set once it is being torn down.
  Status close_reason_;
  ConnParams peer_params_;
  std::string host_;  // Active side only.
  uint16_t port_ = 0;
  RailHello rail_;  // Active side only.

  // Declared in dependency order: destroyed bottom-up (QP first).
  std::shared_ptr<CmChannel> cm_;  // Outlives id_.
  std::shared_ptr<DeviceDomain> domain_;
  std::shared_ptr<CompletionGroup> group_;  // Holds one of its places.
  DeviceHold device_hold_;                  // Once the resources exist.
  DeviceEventSubscription device_events_;
  CmId id_;  // Owns the QP.
  // A REQ was sent or received on id_, so destroying it sends the peer a
  // DREQ or a REJ, and its device is not being removed: on a port that is
  // down, ReleaseDevice parks the id (CmChannel::Park) instead.
  bool may_park_ = false;
  uint32_t qp_num_ = 0;
  bool attached_ = false;  // group_ delivers the QP's completions to us.
  uint32_t max_inline_ = 0;
  static uint64_t NextId();
  const uint64_t id_in_group_ = NextId();  // Unique (Attach, Detach).
  // Authentication (rdma_auth.cc; protocol.h): with options_.tls, the TLS
  // handshake over the QP once established, while auth_ is set. SendAuth
  // posts its records as credits allow; Authenticated hands it over.
  struct AuthState;
  struct AuthStateDelete {
    void operator()(AuthState* state) const;
  };
  void StartAuth();
  void OnAuthReceive(const ibv_wc& wc, const std::byte* data);
  void AdvanceAuth();
  void SendAuth();
  void AuthFailed(const Status& why);
  void Authenticated();
  std::unique_ptr<AuthState, AuthStateDelete> auth_;
  std::optional<PeerIdentity> identity_;
  // Receive completions that came before Start, or while a landed frame's
  // window is invalidated, with a copy of their data (ReplayHeld).
  bool started_ = false;
  bool admitted_ = true;  // RequireAdmission makes it false.
  std::deque<std::pair<ibv_wc, Buffer>> held_;

  // Credits we hold: receives the peer has lent us.
  uint32_t credits_ = 0;
  // Credits we lent the peer: `lent_` receives of the group's pool are ours,
  // of which the peer holds (or has in flight) `peer_holds_`; the rest were
  // used by messages received and wait to be returned.
  uint32_t lent_ = 0;
  uint32_t peer_holds_ = 0;
  uint32_t credits_to_return_ = 0;
  // Returned credits riding on sends chained but not yet posted: the peer
  // holds them once Post posts the chain. Until then the lending rule
  // (UseCredit) sees a peer that has used them, as it has: the replies to
  // one poll's messages are chained one by one and posted together.
  uint32_t chained_credits_ = 0;
  // Staging slots of the group's send pool, and its bounce chunks, in use,
  // by work request.
  RingQueue<std::pair<uint64_t, uint32_t>> staging_;
  RingQueue<std::pair<uint64_t, uint32_t>> bounce_held_;

  // Send queue accounting: work requests posted and known complete, and
  // the last one posted signaled. Only signaled requests complete (every
  // kRdmaSignalEvery-th, those that free a staging slot or bounce chunk or a
  // caller's buffers, and those posted while closing); on a reliable
  // connection one completing means every earlier one has.
  uint64_t posted_ = 0;
  uint64_t completed_ = 0;
  uint64_t signaled_ = 0;
  uint32_t unsignaled_ = 0;
  // Where local operations need an idle send queue and this connection's
  // grants use windows (set with the queue pair): last_transmit_ is the
  // last request that goes on the wire (SEND, WRITE), and a local operation
  // waits until completed_ reaches it (LocalOpMayGo).
  bool local_ops_need_idle_ = false;
  bool local_op_waiting_ = false;
  uint64_t last_transmit_ = 0;
  // Whether the next request is signaled (every kRdmaSignalEvery-th).
  bool SignalNext() {
    if (++unsignaled_ < tunables::kRdmaSignalEvery) return false;
    unsignaled_ = 0;
    return true;
  }
  std::vector<ibv_send_wr> send_wrs_;  // The chain being built.
  std::vector<ibv_sge> send_sges_;
  // Inline sends of the chain being built, max_inline_ bytes each.
  std::vector<std::byte> inline_staging_;

  // Taken up to five times per call (Send, Flush): a FutexMutex, whose
  // uncontended lock and unlock are one atomic instruction each.
  mutable FutexMutex mu_;
  RingQueue<OutgoingFrame> queue_;  // Guarded by mu_.
  // flush_pending_ (CompletionMember) is written under mu_. The busy loop
  // reads it without the lock, as a hint that a frame is waiting for Flush.
  // The group's flush_wanted(), set once with the group (before the
  // connection is anyone else's) and kept after it leaves: Send reads it
  // from any thread. Null in event mode, where no poll waits on it.
  std::shared_ptr<std::atomic<bool>> flush_wanted_;
  // Set under mu_; Send's post-at-once path reads it without the lock.
  std::atomic<bool> closing_{false};
  uint64_t queued_bytes_ = 0;  // Guarded by mu_: the bytes in queue_.
  // queue_.size(), set under mu_; Send's post-at-once path reads it without
  // the lock (a frame another thread queues meanwhile is concurrent with
  // this one, so either order is right).
  std::atomic<size_t> queued_frames_{0};

  // Control messages waiting to be sent: GRANTs, keepalive PING and PONG.
  RingQueue<ControlMessage> control_queue_;
  // Our large frames under way, oldest first: at most max_transfers_.
  RingQueue<OutgoingTransfer> outgoing_;
  uint32_t max_transfers_ = 1;  // The peer's max_open_grants.
  // The peer's, oldest first: granted ones, then any waiting for memory.
  RingQueue<IncomingTransfer> incoming_;
  // Landed in a pool block, oldest first: their windows being invalidated.
  RingQueue<IncomingTransfer> invalidating_;
  // Our standing grants for the peer's next transfers, oldest first (each
  // an IncomingTransfer granted ahead of its RTS; rts.transfer holds its
  // number), and the next one's number.
  RingQueue<IncomingTransfer> standing_;
  uint32_t next_standing_offer_ = 0;
  // The size class (grant-pool block) of the last frame that landed whole.
  uint64_t last_landed_extent_ = 0;
  // The peer's standing grants for ours (GRANTs, `transfer` their number),
  // oldest first, and the number the next must have.
  RingQueue<ControlMessage> standing_grants_;
  uint32_t next_standing_grant_ = 0;
  // Memory windows: all this connection allocated, and those not bound.
  std::vector<MemoryWindow> windows_;
  std::vector<ibv_mw*> free_windows_;

  // Bulk (rdma_bulk.cc). Loans: lent on any thread, bound and invalidated
  // by Flush, in the order asked, under the send queue's rules for local
  // operations (LocalOpMayGo). Guarded by mu_.
  struct Loan {
    BulkDescriptor descriptor;
    std::shared_ptr<MemoryRegistration> registration;
    ibv_mr* region = nullptr;
    // Where windows are checked against their region only (rxe): a region
    // of exactly the lent bytes (RegistrationCache::ExactBulkRegion).
    std::shared_ptr<ibv_mr> own_region;
    ibv_mw* window = nullptr;
    enum class State { kToBind, kBound, kToInvalidate, kInvalidating };
    State state = State::kToBind;
    bool window_bound = false;    // Its BIND_MW was posted.
    uint64_t invalidate_seq = 0;  // Its LOCAL_INV's, once posted.
    std::vector<UniqueFunction<void()>> revoked;
    UniqueFunction<void()> usable;  // LendAcross's, until the bind is done.
  };
  StatusOr<BulkDescriptor> LendImpl(std::span<std::byte> bytes,
                                    BulkAccess access,
                                    UniqueFunction<void()> usable);
  std::unordered_map<uint64_t, Loan> loans_;  // By key; guarded by mu_.
  std::deque<uint64_t> loan_work_;            // Keys to bind or revoke.
  std::vector<MemoryWindow> loan_windows_;    // Guarded by mu_.
  std::vector<ibv_mw*> free_loan_windows_;    // Guarded by mu_.
  uint64_t next_loan_key_ = 1;                // Guarded by mu_.
  uint32_t loan_invalidations_ = 0;  // LOCAL_INVs posted (loop thread).
  // Flush's: binds and invalidates what loan_work_ asks, as far as the
  // send queue lets it (false: it waits, local_op_waiting_).
  void PostLoanWork();
  // A loan's LOCAL_INV completed (sequence `seq`); false if none had it.
  bool OnLoanInvalidated(uint64_t seq);
  // The connection closed: loans end, their revocations run.
  void EndLoans();

  // Pulls and pushes (loop thread): those with chunks still to post, and
  // the chunks posted, by the sequence number of their work request.
  struct BulkOp;
  // A bind that LendAcross awaits is one too (`counted` false: not a READ
  // or WRITE of the window), its op of no bytes.
  struct BulkChunk {
    uint64_t seq;
    std::shared_ptr<BulkOp> op;
    bool read;
    bool counted = true;
  };
  std::deque<std::shared_ptr<BulkOp>> bulk_waiting_;
  std::deque<BulkChunk> bulk_posted_;
  uint32_t reads_posted_ = 0;   // READs of bulk_posted_.
  uint32_t writes_posted_ = 0;  // WRITEs of bulk_posted_.
  uint32_t read_depth_ = 0;     // The QP's max_rd_atomic, read on first use.
  void StartBulk(std::shared_ptr<BulkOp> op, const BulkDescriptor& loan,
                 BulkAccess wanted);
  void PumpBulk();
  // Chunks whose work requests are complete (completed_ has reached them).
  void FinishBulkChunks();
  // The send queue's requests up to `seq` are complete: what they held
  // goes back.
  void SendsCompleted(uint64_t seq);
  void EndBulk(const Status& reason);
  uint32_t next_transfer_id_ = 1;
  std::optional<Status> close_after_drain_;
  boost::asio::steady_timer close_timer_;
  boost::asio::steady_timer keepalive_timer_;
  KeepaliveClock keepalive_;
  // While our port is down: what the event said, for the close's status.
  std::string port_down_;
  boost::asio::steady_timer port_down_timer_;
};

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_RDMA_CONNECTION_H_
