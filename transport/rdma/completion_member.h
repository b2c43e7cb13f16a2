// What a completion group (completion_group.h) knows of a connection whose
// completions it polls: where to hand each completion, when the batch that
// had some of them ends, how to close it when the CQ fails, and the few
// flags the group reads or keeps for it. RdmaConnection is the one kind of
// member; the group sees it only through this class, so the connection's
// module may include the group's and not the other way round.
//
// Also the contract both sides read in a completion: the work request id's
// tag (a receive's slot, a send's sequence) and the thread's delivering
// member.
#ifndef RDMARPC_TRANSPORT_RDMA_COMPLETION_MEMBER_H_
#define RDMARPC_TRANSPORT_RDMA_COMPLETION_MEMBER_H_

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "rdmarpc/status.h"

namespace rdmarpc::transport::rdma {

// wr_id: a tag in the top two bits, a slot or sequence number below. The
// group reposts a receive's slot (kRecvTag) once its member has read it.
enum WrTag : uint64_t { kRecvTag = 1, kSendTag = 2, kWriteTag = 3 };
constexpr uint64_t kTagShift = 62;
constexpr uint64_t kValueMask = (uint64_t{1} << kTagShift) - 1;
constexpr uint64_t WrId(WrTag tag, uint64_t value) {
  return (uint64_t{tag} << kTagShift) | value;
}

class CompletionMember {
 public:
  CompletionMember(const CompletionMember&) = delete;
  CompletionMember& operator=(const CompletionMember&) = delete;

 protected:
  CompletionMember() = default;
  ~CompletionMember() = default;  // Owned as its connection.

  // Set by the member once it is being torn down: its completions are no
  // longer delivered (receive slots are still reposted).
  bool torn_down_ = false;
  // Written under the member's lock when a frame waits for a Flush; the busy
  // poll reads it without the lock, as a hint (flush_wanted, group).
  std::atomic<bool> flush_pending_{false};

 private:
  friend class CompletionGroup;

  // One completion of the member's QP, in the order polled.
  virtual void OnCompletion(const ibv_wc& wc) = 0;
  // The batch that had completions of the member's ended (or a staging
  // slot it waited for came free): flush. `woken`: the batch was drained
  // after a CQ event, not by a busy poll.
  virtual void AfterBatch(bool woken) = 0;
  // The group's CQ failed: close with `reason`.
  virtual void CloseNow(const Status& reason) = 0;
  // For the group's list of members waiting for a staging slot (rarely).
  virtual std::weak_ptr<CompletionMember> WeakMember() = 0;

  // Kept by the group: in its batch; waiting for a send-staging slot.
  bool touched_ = false;
  bool waiting_for_staging_ = false;
};

// The member whose completion this thread is delivering, polled in a batch
// (CompletionGroup::Drain). A small frame sent meanwhile (a handler's reply)
// joins the member's chain of work requests inside Send, without the queue;
// the batch's end (AfterBatch) posts the chain, one doorbell for the batch.
inline thread_local const CompletionMember* delivering = nullptr;
// ...and when that completion is the batch's last received message: the
// chain is posted inside Send, since nothing else in hand could join it, and
// the handler's bookkeeping after Send (metrics, releasing the call) need
// not delay it.
inline thread_local const CompletionMember* delivering_last = nullptr;

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_COMPLETION_MEMBER_H_
