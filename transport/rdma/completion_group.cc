#include "transport/rdma/completion_group.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <map>
#include <mutex>
#include <tuple>

#include "base/log.h"
#include "base/pooled_handler.h"
#include "base/receive_clock.h"
#include "transport/rdma/loop_state.h"

namespace rdmarpc::transport::rdma {

namespace asio = boost::asio;
using tunables::kRdmaConnectionsPerGroup;
using tunables::kRdmaPoolChunkBuffers;
using tunables::kRdmaReceiveBufferSize;
using tunables::kRdmaReceiveDepth;
using tunables::kRdmaSendDepth;

namespace {

uint32_t ReceiveBufferSize() {
  const std::optional<uint64_t> limit = LockedMemoryLimit();
  return limit && *limit < tunables::kRdmaSmallPinnedBudget
             ? tunables::kRdmaSmallReceiveBufferSize
             : kRdmaReceiveBufferSize;
}

// Spare receive buffers below which a busy peer is lent no more without
// growing the pool first.
constexpr uint32_t kSpareLow = kRdmaPoolChunkBuffers / 4;
// Completions taken per ibv_poll_cq; their receive buffers are re-posted
// after each poll. Connections return a message's credit as soon as it
// arrives, before its buffer is re-posted, so the pool keeps this many
// buffers beyond those lent.
constexpr int kPollBatch = 32;

std::atomic<uint64_t> live_qps{0};
std::atomic<uint64_t> wakeups{0};
std::atomic<uint64_t> completions_polled{0};

std::mutex registry_mu;
// Guarded by registry_mu.
std::map<ibv_context*, std::weak_ptr<DeviceDomain>>& Domains() {
  static auto* domains =
      new std::map<ibv_context*, std::weak_ptr<DeviceDomain>>;
  return *domains;
}
// The loop's LoopState::loop_id(), never its address.
using GroupKey = std::tuple<uint64_t, ibv_context*, PollMode>;
std::map<GroupKey, std::vector<std::weak_ptr<CompletionGroup>>>& Groups() {
  static auto* groups =
      new std::map<GroupKey, std::vector<std::weak_ptr<CompletionGroup>>>;
  return *groups;
}

}  // namespace

// --- DeviceDomain ------------------------------------------------------------

StatusOr<std::shared_ptr<DeviceDomain>> DeviceDomain::For(ibv_context* verbs) {
  std::shared_ptr<DeviceDomain> domain;
  {
    std::lock_guard lock(registry_mu);
    // Entries of domains gone are dropped here, not by their destructors:
    // one may run under this lock (the last reference let go of here).
    std::erase_if(Domains(),
                  [](const auto& entry) { return entry.second.expired(); });
    if (auto it = Domains().find(verbs); it != Domains().end()) {
      domain = it->second.lock();
    }
    if (domain) return domain;
    domain = std::make_shared<DeviceDomain>(verbs);
    if (domain->pd_) {
      Domains()[verbs] = domain;
      return domain;
    }
  }
  const int error = errno;
  domain.reset();  // Outside the lock.
  return ErrnoStatus("ibv_alloc_pd", error);
}

DeviceDomain::DeviceDomain(ibv_context* verbs)
    : verbs_(verbs), hold_(verbs), pd_(ibv_alloc_pd(verbs)) {
  if (!pd_) return;
  registrations_.emplace(pd_.get());
  if (GrantPool::Supported(verbs)) grant_pool_.reset(new GrantPool(pd_.get()));
  local_ops_need_idle_ = IsSoftRoce(verbs);
}

DeviceDomain::~DeviceDomain() {
  grant_pool_.reset();     // Its regions, before the PD.
  registrations_.reset();  // Its regions, before the PD.
  pd_.reset();
}

uint64_t LiveQueuePairs() { return live_qps.load(std::memory_order_relaxed); }
uint64_t CompletionWakeups() { return wakeups.load(std::memory_order_relaxed); }
uint64_t CompletionsPolled() {
  return completions_polled.load(std::memory_order_relaxed);
}

// --- SlotPool ----------------------------------------------------------------

SlotPool::~SlotPool() { UnchargePooledBytes(uint64_t{size_} * slot_size_); }

Status SlotPool::Grow(ibv_pd* pd, const char* what) {
  if (size_ + slots_per_chunk_ > max_slots_) {
    return Status(StatusCode::kResourceExhausted,
                  std::string(what) + ": the pool holds its most (" +
                      std::to_string(max_slots_) + " buffers)");
  }
  const uint64_t chunk_bytes = uint64_t{slots_per_chunk_} * slot_size_;
  if (Status s = ChargePooledBytes(chunk_bytes, max_pooled_bytes_, what);
      !s.ok()) {
    return s;
  }
  auto chunk =
      RegisteredMemory::Allocate(pd, chunk_bytes, IBV_ACCESS_LOCAL_WRITE);
  if (!chunk.ok()) {
    UnchargePooledBytes(chunk_bytes);
    return chunk.status();
  }
  chunks_.push_back(std::move(*chunk));
  size_ += slots_per_chunk_;
  NotePoolGrowth(1);
  return Status();
}

std::byte* SlotPool::data(uint32_t slot) const {
  return chunks_[slot / slots_per_chunk_].data() +
         size_t{slot % slots_per_chunk_} * slot_size_;
}

uint32_t SlotPool::lkey(uint32_t slot) const {
  return chunks_[slot / slots_per_chunk_].lkey();
}

// --- CompletionGroup ---------------------------------------------------------

StatusOr<std::shared_ptr<CompletionGroup>> CompletionGroup::Join(
    asio::io_context& context, const std::shared_ptr<DeviceDomain>& domain,
    const TransportOptions& options) {
  const GroupKey key{LoopState::Of(context).loop_id(), domain->verbs(),
                     options.poll_mode};
  {
    std::lock_guard lock(registry_mu);
    // Loop ids are never reused: a key whose groups are all gone goes.
    for (auto it = Groups().begin(); it != Groups().end();) {
      std::erase_if(it->second,
                    [](const auto& weak) { return weak.expired(); });
      it = it->second.empty() ? Groups().erase(it) : std::next(it);
    }
    auto& groups = Groups()[key];
    for (const auto& weak : groups) {
      auto group = weak.lock();
      if (group && !group->failed_ &&
          group->members_ < kRdmaConnectionsPerGroup) {
        ++group->members_;
        return group;
      }
    }
  }
  auto group = std::make_shared<CompletionGroup>(context, domain, options);
  if (Status opened = group->Open(); !opened.ok()) return opened;
  std::lock_guard lock(registry_mu);
  ++group->members_;
  Groups()[key].push_back(group);
  return group;
}

CompletionGroup::CompletionGroup(asio::io_context& context,
                                 std::shared_ptr<DeviceDomain> domain,
                                 const TransportOptions& options)
    : context_(context),
      domain_(std::move(domain)),
      poll_mode_(options.poll_mode),
      hybrid_spin_(options.hybrid_spin),
      receives_(ReceiveBufferSize(),
                kRdmaConnectionsPerGroup * kRdmaReceiveDepth,
                options.rdma_max_pool_bytes),
      sends_(kRdmaReceiveBufferSize, kRdmaConnectionsPerGroup * kRdmaSendDepth,
             options.rdma_max_pool_bytes, tunables::kRdmaSendChunkBuffers),
      bounces_(tunables::kRdmaBounceChunkSize, tunables::kRdmaGroupBounceChunks,
               options.rdma_max_pool_bytes, /*slots_per_chunk=*/1),
      fd_(context) {}

CompletionGroup::~CompletionGroup() {
  // The descriptor belongs to rdma-core, not to Asio.
  if (fd_.is_open()) fd_.release();
  if (srq_ != nullptr) ibv_destroy_srq(srq_);
  if (cq_ && unacked_events_ > 0) ibv_ack_cq_events(cq_.get(), unacked_events_);
}

Status CompletionGroup::Open() {
  ibv_context* verbs = domain_->verbs();
  ibv_device_attr device{};
  if (ibv_query_device(verbs, &device) != 0) {
    return ErrnoStatus("ibv_query_device", errno);
  }
  channel_.reset(ibv_create_comp_channel(verbs));
  if (!channel_) return ErrnoStatus("ibv_create_comp_channel", errno);
  if (Status s = SetNonBlocking(channel_->fd); !s.ok()) return s;
  // Room for every completion the group's QPs can produce at once: each
  // one's whole send queue (flushed, signaled or not, when its link dies)
  // and every receive the shared queue can hold.
  max_receives_ =
      std::min<uint32_t>(kRdmaConnectionsPerGroup * kRdmaReceiveDepth,
                         static_cast<uint32_t>(std::max(device.max_srq_wr, 1)));
  const int entries =
      std::min<int>(static_cast<int>(kRdmaConnectionsPerGroup * kRdmaSendDepth +
                                     max_receives_ + 16),
                    device.max_cqe);
  cq_.reset(ibv_create_cq(verbs, entries, this, channel_.get(), 0));
  if (!cq_) return ErrnoStatus("ibv_create_cq", errno);
  ibv_srq_init_attr attr{};
  attr.attr.max_wr = max_receives_;
  attr.attr.max_sge = 1;
  receives_.set_max_slots(max_receives_);
  srq_ = ibv_create_srq(domain_->pd(), &attr);
  if (srq_ == nullptr) return ErrnoStatus("ibv_create_srq", errno);
  repost_wrs_.reserve(kRdmaPoolChunkBuffers);
  repost_sges_.reserve(kRdmaPoolChunkBuffers);
  // The first chunk of send-staging slots, now. A frame that does not go
  // inline waits for a slot until a send completes and frees one; with no
  // slot at all (the pool unable to grow under RLIMIT_MEMLOCK once receive
  // buffers and bounce chunks took the rest) it would wait forever.
  if (Status grown = GrowSendSlots(); !grown.ok()) return grown;
  fd_.assign(channel_->fd);
  if (poll_mode_ == PollMode::kBusy) {
    asio::post(context_, [weak = weak_from_this()] {
      if (auto self = weak.lock()) self->PollLoop();
    });
  } else {
    if (ibv_req_notify_cq(cq_.get(), 0) != 0) {
      return ErrnoStatus("ibv_req_notify_cq", errno);
    }
    WatchCq();
  }
  return Status();
}

void CompletionGroup::Attach(uint32_t qp_num,
                             std::weak_ptr<CompletionMember> member,
                             uint64_t id) {
  connections_[qp_num] = {std::move(member), id};
  live_qps.fetch_add(1, std::memory_order_relaxed);
}

void CompletionGroup::Detach(uint32_t qp_num, uint64_t id) {
  // The QP number may already be another connection's.
  if (auto it = connections_.find(qp_num);
      it != connections_.end() && it->second.id == id) {
    connections_.erase(it);
    live_qps.fetch_sub(1, std::memory_order_relaxed);
  }
  std::erase_if(send_waiters_,
                [](const auto& waiter) { return waiter.expired(); });
}

void CompletionGroup::Leave() {
  std::lock_guard lock(registry_mu);
  --members_;
}

// --- Receive credits ---------------------------------------------------------

Status CompletionGroup::GrowReceives() {
  const uint32_t first = receives_.size();
  if (Status grown = receives_.Grow(domain_->pd(), "receive buffers");
      !grown.ok()) {
    receives_exhausted_ = true;
    retry_growth_at_ =
        std::chrono::steady_clock::now() + tunables::kRdmaReceiveGrowthRetry;
    return grown;
  }
  receives_exhausted_ = false;
  for (uint32_t slot = first; slot < receives_.size(); ++slot) Repost(slot);
  FlushReposts();
  return failed_ ? Status(StatusCode::kUnavailable, "ibv_post_srq_recv failed")
                 : Status();
}

uint32_t CompletionGroup::Spare() const {
  const uint32_t committed = lent_ + kPollBatch;
  return receives_.size() > committed ? receives_.size() - committed : 0;
}

Status CompletionGroup::Reserve(uint32_t count) {
  while (Spare() < count) {
    if (Status grown = GrowReceives(); !grown.ok()) return grown;
  }
  lent_ += count;
  return Status();
}

bool CompletionGroup::LendOne() {
  if (Spare() <= kSpareLow && (GrowthOnHold() || !GrowReceives().ok())) {
    return false;
  }
  ++lent_;
  return true;
}

bool CompletionGroup::Short() const {
  // Once the hold is over, lending tries to grow the pool again (LendOne).
  return Spare() <= kSpareLow && GrowthOnHold();
}

void CompletionGroup::Repost(uint32_t slot) {
  repost_sges_.push_back({reinterpret_cast<uint64_t>(receives_.data(slot)),
                          receives_.slot_size(), receives_.lkey(slot)});
  ibv_recv_wr& wr = repost_wrs_.emplace_back();  // Zeroed in place.
  wr.wr_id = WrId(kRecvTag, slot);
  wr.num_sge = 1;
}

void CompletionGroup::FlushReposts() {
  if (repost_wrs_.empty() || failed_) return;
  for (size_t i = 0; i < repost_wrs_.size(); ++i) {
    repost_wrs_[i].sg_list = &repost_sges_[i];
    repost_wrs_[i].next =
        i + 1 < repost_wrs_.size() ? &repost_wrs_[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  const int error = ibv_post_srq_recv(srq_, repost_wrs_.data(), &bad);
  repost_wrs_.clear();
  repost_sges_.clear();
  if (error != 0) FailAll(ErrnoStatus("ibv_post_srq_recv", error));
}

// --- Send staging ------------------------------------------------------------

Status CompletionGroup::GrowSendSlots() {
  const uint32_t first = sends_.size();
  if (Status grown = sends_.Grow(domain_->pd(), "send buffers"); !grown.ok()) {
    return grown;
  }
  for (uint32_t slot = sends_.size(); slot-- > first;) {
    free_send_slots_.push_back(slot);
  }
  return Status();
}

std::optional<CompletionGroup::SendSlot> CompletionGroup::AcquireSendSlot(
    CompletionMember* waiter) {
  if (free_send_slots_.empty() && !GrowSendSlots().ok()) {
    if (!waiter->waiting_for_staging_) {
      waiter->waiting_for_staging_ = true;
      send_waiters_.push_back(waiter->WeakMember());
    }
    return std::nullopt;
  }
  const uint32_t index = free_send_slots_.back();
  free_send_slots_.pop_back();
  return SendSlot{index, sends_.data(index), sends_.lkey(index)};
}

std::optional<CompletionGroup::SendSlot> CompletionGroup::AcquireBounceChunk(
    CompletionMember* waiter, Status* error) {
  if (free_bounces_.empty()) {
    // Every chunk is busy (or none exists yet): more, while the pool may
    // grow; without any at all the large send cannot go.
    const uint32_t first = bounces_.size();
    if (Status grown = bounces_.Grow(domain_->pd(), "bounce buffers");
        !grown.ok() && first == 0) {
      *error = grown;
      return std::nullopt;
    }
    for (uint32_t chunk = bounces_.size(); chunk-- > first;) {
      free_bounces_.push_back(chunk);
    }
  }
  if (free_bounces_.empty()) {
    if (!waiter->waiting_for_staging_) {
      waiter->waiting_for_staging_ = true;
      send_waiters_.push_back(waiter->WeakMember());
    }
    return std::nullopt;
  }
  const uint32_t index = free_bounces_.back();
  free_bounces_.pop_back();
  return SendSlot{index, bounces_.data(index), bounces_.lkey(index)};
}

// --- Polling -----------------------------------------------------------------

void CompletionGroup::WatchCq() {
  fd_.async_wait(
      asio::posix::stream_descriptor::wait_read,
      Pooled([weak = weak_from_this()](const boost::system::error_code& e) {
        auto self = weak.lock();
        if (e || !self) return;
        self->OnCqReady();
      }));
}

void CompletionGroup::OnCqReady() {
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  // The CQ is armed once per wait and raises one event per arm: one read
  // (a second would only find the channel empty, at a system call's cost).
  if (ibv_get_cq_event(channel_.get(), &cq, &context) == 0) ++unacked_events_;
  if (unacked_events_ >= tunables::kRdmaCqEventAckBatch) {
    ibv_ack_cq_events(cq_.get(), unacked_events_);
    unacked_events_ = 0;
  }
  wakeups.fetch_add(1, std::memory_order_relaxed);
  woken_ = true;
  Drain();
  woken_ = false;
  if (failed_) return;
  if (poll_mode_ == PollMode::kHybrid) {
    // Activity: spin for a while before waiting for the next event.
    spin_until_ = std::chrono::steady_clock::now() + hybrid_spin_;
    return PollLoop();
  }
  // Arm, then drain again: a completion that arrived between the first
  // drain and the arm would otherwise raise no event.
  if (ibv_req_notify_cq(cq_.get(), 0) != 0) {
    return FailAll(ErrnoStatus("ibv_req_notify_cq", errno));
  }
  Drain();
  if (!failed_) WatchCq();
}

void CompletionGroup::PollLoop() {
  if (failed_) return;
  // Several polls per trip through the event loop: a trip (the scheduler's
  // locks, a non-blocking epoll_wait) costs far more than an empty poll.
  // Stop at the first completions, so what they started runs next. A frame
  // queued meanwhile (by a handler that ran before this one, or by another
  // thread) is posted at once: its Flush, queued behind this loop, would
  // otherwise wait out every poll of it.
  bool any = false;
  for (uint32_t i = 0; i < tunables::kRdmaBusyPollsPerYield; ++i) {
    TouchFlushWanted();
    if (!touched_.empty()) FinishBatch();
    any = Drain();
    if (any || failed_) break;
  }
  if (failed_) return;
  if (poll_mode_ == PollMode::kHybrid) {  // One clock read per trip.
    const auto now = std::chrono::steady_clock::now();
    if (any) {
      spin_until_ = now + hybrid_spin_;
    } else if (now >= spin_until_) {
      // Quiet for hybrid_spin: arm, drain the race, wait for an event.
      if (ibv_req_notify_cq(cq_.get(), 0) != 0) {
        return FailAll(ErrnoStatus("ibv_req_notify_cq", errno));
      }
      Drain();
      if (!failed_) WatchCq();
      return;
    }
  }
  // Poll again from the loop, so timers and other handlers still run.
  asio::post(context_, Pooled([weak = weak_from_this()] {
               if (auto self = weak.lock()) self->PollLoop();
             }));
}

void CompletionGroup::TouchFlushWanted() {
  // Acquire: pairs with the release in RdmaConnection::Send, after which
  // the connection's flush_pending_ reads true.
  if (!flush_wanted_->load(std::memory_order_relaxed) ||
      !flush_wanted_->exchange(false, std::memory_order_acquire)) {
    return;
  }
  for (const auto& [qp, member] : connections_) {
    auto connection = member.connection.lock();
    if (connection &&
        connection->flush_pending_.load(std::memory_order_relaxed)) {
      Touch(connection);
    }
  }
}

void CompletionGroup::Touch(const std::shared_ptr<CompletionMember>& member) {
  if (member->touched_) return;
  member->touched_ = true;
  touched_.push_back(member);
}

bool CompletionGroup::Drain() {
  ibv_wc wcs[kPollBatch];
  bool any = false;
  while (!failed_) {
    const int n = ibv_poll_cq(cq_.get(), kPollBatch, wcs);
    if (n < 0) {
      FailAll(Status(StatusCode::kUnavailable, "ibv_poll_cq failed"));
      break;
    }
    if (n == 0) break;
    any = true;
    completions_polled.fetch_add(n, std::memory_order_relaxed);
    // The last completion that can deliver a frame: send completions
    // polled after it carry none, so a reply need not wait for them.
    int last = n - 1;
    while (last > 0 && (wcs[last].status != IBV_WC_SUCCESS ||
                        (wcs[last].opcode & IBV_WC_RECV) == 0)) {
      --last;
    }
    const ReceiveClock::Batch batch;  // The poll's frames share its time.
    // Consecutive completions of one QP (most of a busy connection's poll)
    // look it up and lock it once. Its QP number cannot be another's before
    // the poll ends: a QP number is reused only once the QP is destroyed
    // and another created, which completions do not do.
    std::shared_ptr<CompletionMember> connection;
    uint32_t connection_qp = 0;
    bool looked_up = false;
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[i];
      const bool receive = (wc.wr_id >> kTagShift) == kRecvTag;
      if (!looked_up || wc.qp_num != connection_qp) {
        connection.reset();
        if (auto it = connections_.find(wc.qp_num); it != connections_.end()) {
          connection = it->second.connection.lock();
        }
        connection_qp = wc.qp_num;
        looked_up = true;
      }
      if (connection && !connection->torn_down_) {
        Touch(connection);
        // Reset even if a handler throws (the event loop logs and goes on).
        struct Delivering {
          Delivering(const CompletionMember* c, bool is_last) {
            delivering = c;
            delivering_last = is_last ? c : nullptr;
          }
          ~Delivering() { delivering = delivering_last = nullptr; }
        } guard(connection.get(), i == last);
        connection->OnCompletion(wc);
      }
      // The connection has copied out what it needs (or is gone): the
      // buffer takes the next message, whoever it is from.
      if (receive) Repost(static_cast<uint32_t>(wc.wr_id & kValueMask));
    }
    FlushReposts();
  }
  if (!touched_.empty()) FinishBatch();
  return any;
}

void CompletionGroup::FinishBatch() {
  // Slots came free: the connections that waited for one try again.
  if ((!free_send_slots_.empty() || !free_bounces_.empty()) &&
      !send_waiters_.empty()) {
    std::vector<std::weak_ptr<CompletionMember>> waiters;
    waiters.swap(send_waiters_);
    for (const auto& weak : waiters) {
      if (auto waiter = weak.lock()) {
        waiter->waiting_for_staging_ = false;
        Touch(waiter);
      }
    }
  }
  // AfterBatch may start another batch (a Flush that closes): it fills
  // touched_ anew while this one is finished.
  finishing_.swap(touched_);
  for (const auto& connection : finishing_) connection->touched_ = false;
  for (const auto& connection : finishing_) connection->AfterBatch(woken_);
  finishing_.clear();
}

void CompletionGroup::FailAll(const Status& status) {
  if (failed_) return;
  failed_ = true;
  Log().error("RDMA completion group on {} failed: {}",
              DeviceName(domain_->verbs()), status.message());
  std::vector<std::shared_ptr<CompletionMember>> all;
  for (const auto& [qp, member] : connections_) {
    if (auto connection = member.connection.lock()) all.push_back(connection);
  }
  for (const auto& connection : all) connection->CloseNow(status);
}

}  // namespace rdmarpc::transport::rdma
