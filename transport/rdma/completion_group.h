// What RDMA connections share, so that a connection costs a queue pair and
// little else.
//
// DeviceDomain, one per device per process: the protection domain every QP
// and memory region on the device belongs to, the memory regions of the
// user's MemoryRegistrations (registered once per PD, whichever connection
// sends from them first), and the grant pool peers' large frames land in
// (grant_pool.h).
//
// CompletionGroup, one per event loop per device (and more when a loop has
// over kRdmaConnectionsPerGroup connections): one CQ with one completion
// channel watched by the loop's io_context, one shared receive queue, and
// the registered pools its connections' receives and send staging come from.
// The group polls the CQ and hands each completion to the connection whose
// QP produced it (by qp_num), which it knows only as a CompletionMember
// (completion_member.h); a completion of a QP that is gone is dropped, its
// receive buffer re-posted.
//
// Receive credits (protocol.h). The group lends receive buffers to its
// connections' peers: a connection Reserves kRdmaInitialCredits when it
// joins, asks LendOne for more while its peer is busy, and gives back what
// it no longer needs. The lent total never exceeds the buffers registered,
// all of which are posted to the shared receive queue or about to be again,
// so no peer that honours its credits can find it empty. The pool grows by
// chunks of kRdmaPoolChunkBuffers as connections need it, never per call
// (after a failed growth, not again for kRdmaReceiveGrowthRetry), and a
// connection that cannot get its initial credits is refused.
//
// Everything here runs on the group's loop thread, except DeviceDomain's
// registration cache, which any thread may use.
#ifndef RDMARPC_TRANSPORT_RDMA_COMPLETION_GROUP_H_
#define RDMARPC_TRANSPORT_RDMA_COMPLETION_GROUP_H_

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "rdmarpc/status.h"
#include "transport/connection.h"
#include "transport/rdma/completion_member.h"
#include "transport/rdma/grant_pool.h"
#include "transport/rdma/registration_cache.h"
#include "transport/rdma/verbs.h"

namespace rdmarpc::transport::rdma {

// Queue pairs of this process's RDMA connections, process-wide.
uint64_t LiveQueuePairs();
// Completion-channel wake-ups of every group in the process (event mode,
// and hybrid once quiet), and completions they polled in all.
uint64_t CompletionWakeups();
uint64_t CompletionsPolled();

class DeviceDomain {
 public:
  // This process's domain on `verbs`'s device, created on first use; it
  // lives while a connection or group holds it.
  static StatusOr<std::shared_ptr<DeviceDomain>> For(ibv_context* verbs);

  explicit DeviceDomain(ibv_context* verbs);  // Use For.
  ~DeviceDomain();
  DeviceDomain(const DeviceDomain&) = delete;
  DeviceDomain& operator=(const DeviceDomain&) = delete;

  ibv_context* verbs() const { return verbs_; }
  ibv_pd* pd() const { return pd_.get(); }
  RegistrationCache& registrations() { return *registrations_; }
  // Null where the device binds no type 2 memory windows.
  GrantPool* grant_pool() const { return grant_pool_.get(); }
  // Whether memory-window work requests (BIND_MW, LOCAL_INV) must wait for
  // an idle send queue: true on rxe. There, a retransmission restarts the
  // send queue at the oldest unacknowledged request and executes again a
  // bind or invalidation queued after it (rxe_req.c), and what is seen is a
  // queue pair that stops sending with no error completion, until the
  // peer's keepalive or its own retries end it (docs/reliability.md).
  bool local_ops_need_idle_send_queue() const { return local_ops_need_idle_; }
  // Whether the device checks an access through a memory window against
  // the window's range, as the verbs specification says, or only against
  // the memory region it is bound on: rxe (Linux 6.1, rxe_resp.c
  // check_rkey) does the latter, so a bulk loan there gets a region of its
  // own, exactly its bytes (rdma_bulk.cc).
  bool windows_bound_by_range() const { return !local_ops_need_idle_; }

 private:
  ibv_context* const verbs_;
  DeviceHold hold_;  // Released last: after the PD and its regions.
  ProtectionDomain pd_;
  std::optional<RegistrationCache> registrations_;
  std::unique_ptr<GrantPool, GrantPoolRetirer> grant_pool_;
  bool local_ops_need_idle_ = false;
};

// Registered memory in equal slots, grown by chunks (never shrunk).
class SlotPool {
 public:
  // At most `max_slots` slots, registered `slots_per_chunk` at a time, and
  // no chunk that would take the bytes of every pool in the process past
  // `max_pooled_bytes`.
  SlotPool(uint32_t slot_size, uint32_t max_slots, uint64_t max_pooled_bytes,
           uint32_t slots_per_chunk = tunables::kRdmaPoolChunkBuffers)
      : slot_size_(slot_size),
        slots_per_chunk_(slots_per_chunk),
        max_slots_(max_slots),
        max_pooled_bytes_(max_pooled_bytes) {}
  ~SlotPool();
  SlotPool(const SlotPool&) = delete;
  SlotPool& operator=(const SlotPool&) = delete;
  // Registers one more chunk of slots_per_chunk slots; its slots are
  // numbered from size(). RESOURCE_EXHAUSTED past max_slots, the
  // process's max_pooled_bytes or the locked-memory limit.
  Status Grow(ibv_pd* pd, const char* what);
  uint32_t size() const { return size_; }
  void set_max_slots(uint32_t max_slots) { max_slots_ = max_slots; }
  std::byte* data(uint32_t slot) const;
  uint32_t lkey(uint32_t slot) const;
  uint32_t slot_size() const { return slot_size_; }

 private:
  const uint32_t slot_size_;
  const uint32_t slots_per_chunk_;
  uint32_t max_slots_;
  const uint64_t max_pooled_bytes_;
  uint32_t size_ = 0;
  std::vector<RegisteredMemory> chunks_;
};

class CompletionGroup : public std::enable_shared_from_this<CompletionGroup> {
 public:
  // A group of `context`'s loop on `domain`'s device, polled as `options`
  // say, with room for one more connection: an existing one, or a new one.
  // The caller holds one of its places until Leave.
  static StatusOr<std::shared_ptr<CompletionGroup>> Join(
      boost::asio::io_context& context,
      const std::shared_ptr<DeviceDomain>& domain,
      const TransportOptions& options);

  CompletionGroup(boost::asio::io_context& context,
                  std::shared_ptr<DeviceDomain> domain,
                  const TransportOptions& options);  // Use Join.
  ~CompletionGroup();
  CompletionGroup(const CompletionGroup&) = delete;
  CompletionGroup& operator=(const CompletionGroup&) = delete;

  DeviceDomain& domain() const { return *domain_; }
  ibv_cq* cq() const { return cq_.get(); }
  ibv_srq* srq() const { return srq_; }

  // A connection's QP: its completions go to `member` (`id` names it) while
  // it lives, until Detach (which its ReleaseDevice calls, on the loop,
  // after destroying the QP).
  void Attach(uint32_t qp_num, std::weak_ptr<CompletionMember> member,
              uint64_t id);
  void Detach(uint32_t qp_num, uint64_t id);
  // Gives back the place Join took.
  void Leave();
  // Delivers what the CQ holds now. For a peer's disconnect: its last
  // frames landed (and were acknowledged, which it waited for) before it
  // disconnected, but the CM event may be read before the CQ is.
  void DrainNow() {
    if (!failed_) Drain();
  }

  // Receive credits (see the file comment).
  Status Reserve(uint32_t count);
  bool LendOne();  // One more buffer for a busy peer, when one is spare.
  void Unlend(uint32_t count) { lent_ -= count; }
  // The pool has few buffers to spare and cannot grow (its last growth
  // failed, less than kRdmaReceiveGrowthRetry ago): peers holding more than
  // their initial credits should give some back.
  bool Short() const;
  // A received message in receive slot `slot`.
  const std::byte* ReceiveData(uint32_t slot) const {
    return receives_.data(slot);
  }
  // The size of its receive buffers: kRdmaReceiveBufferSize, or
  // kRdmaSmallReceiveBufferSize in a process with little lockable memory.
  uint32_t receive_buffer_size() const { return receives_.slot_size(); }
  // The flag a connection sets after queueing a frame off the loop (the
  // busy poll's cue to look for it).
  std::shared_ptr<std::atomic<bool>> flush_wanted() const {
    return flush_wanted_;
  }

  // A registered staging buffer of kRdmaReceiveBufferSize bytes for a SEND
  // or a small staged WRITE, or nullopt when none is free and the pool
  // cannot grow (`waiter` is then flushed once one is released).
  struct SendSlot {
    uint32_t index = 0;
    std::byte* data = nullptr;
    uint32_t lkey = 0;
  };
  std::optional<SendSlot> AcquireSendSlot(CompletionMember* waiter);
  void ReleaseSendSlot(uint32_t index) { free_send_slots_.push_back(index); }

  // A bounce chunk (kRdmaBounceChunkSize bytes) through which a large
  // payload in unregistered memory is written: the loop's connections share
  // them (tunables::kRdmaGroupBounceChunks). Nullopt when all are busy and
  // the pool cannot grow (`waiter` is flushed once one is released), or,
  // with `error` set, when none can be registered at all.
  std::optional<SendSlot> AcquireBounceChunk(CompletionMember* waiter,
                                             Status* error);
  void ReleaseBounceChunk(uint32_t index) { free_bounces_.push_back(index); }

 private:
  Status Open();
  Status GrowReceives();
  // One more chunk of send-staging slots, all free.
  Status GrowSendSlots();
  // Receive buffers neither lent nor kept for those being re-posted.
  uint32_t Spare() const;
  void Repost(uint32_t slot);
  void FlushReposts();
  void WatchCq();
  void OnCqReady();
  void PollLoop();
  bool Drain();
  void Touch(const std::shared_ptr<CompletionMember>& member);
  void FinishBatch();
  void TouchFlushWanted();  // Connections whose off-loop frame waits.
  void FailAll(const Status& status);

  boost::asio::io_context& context_;
  const std::shared_ptr<DeviceDomain> domain_;
  // Set (from any thread) when a connection queued a frame off the loop
  // for a Flush: the busy poll then looks for it between polls, rather than
  // every connection's flag on every poll. Shared with the connections, which
  // may outlive their place in the group.
  const std::shared_ptr<std::atomic<bool>> flush_wanted_ =
      std::make_shared<std::atomic<bool>>(false);
  const PollMode poll_mode_;
  const std::chrono::microseconds hybrid_spin_;
  uint32_t members_ = 0;  // Places taken (guarded by the registry's lock).
  bool failed_ = false;

  // Declared in dependency order: destroyed bottom-up (SRQ before its
  // memory; the CQ before its channel).
  CompletionChannel channel_;
  CompletionQueue cq_;
  SlotPool receives_;
  SlotPool sends_;
  SlotPool bounces_;
  ibv_srq* srq_ = nullptr;  // Destroyed by the destructor, first.
  boost::asio::posix::stream_descriptor fd_;
  uint32_t unacked_events_ = 0;
  bool woken_ = false;  // The drain under way was started by a CQ event.
  std::chrono::steady_clock::time_point spin_until_;

  uint32_t lent_ = 0;
  uint32_t max_receives_ = 0;
  bool receives_exhausted_ = false;  // The last growth failed.
  // When a failed growth may be tried again (kRdmaReceiveGrowthRetry).
  std::chrono::steady_clock::time_point retry_growth_at_;
  // The last growth failed and it is too soon to try again.
  bool GrowthOnHold() const {
    return receives_exhausted_ &&
           std::chrono::steady_clock::now() < retry_growth_at_;
  }
  std::vector<ibv_recv_wr> repost_wrs_;
  std::vector<ibv_sge> repost_sges_;
  std::vector<uint32_t> free_send_slots_;
  std::vector<uint32_t> free_bounces_;
  // Connections waiting for a send slot or a bounce chunk.
  std::vector<std::weak_ptr<CompletionMember>> send_waiters_;

  struct Member {
    std::weak_ptr<CompletionMember> connection;  // Expired once destroyed.
    uint64_t id = 0;
  };
  std::unordered_map<uint32_t, Member> connections_;  // By QP number.
  // Connections that had completions in the batch being drained, and the
  // batch being finished (kept, so their capacity is reused).
  std::vector<std::shared_ptr<CompletionMember>> touched_;
  std::vector<std::shared_ptr<CompletionMember>> finishing_;
};

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_COMPLETION_GROUP_H_
