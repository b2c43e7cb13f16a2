// CallTable: a client's outstanding calls and their deadlines.
//
// Slots are reused, so a steady stream of calls allocates nothing. A call id
// is the slot index plus a generation that changes on every reuse: a late
// reply to a finished call never matches the call now in its slot. Deadlines
// sit in an indexed min-heap so a completed call leaves it at once.
//
// Not thread-safe: the owner serialises access.
#ifndef RDMARPC_RPC_CLIENT_CALL_TABLE_H_
#define RDMARPC_RPC_CLIENT_CALL_TABLE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "rdmarpc/buffer.h"
#include "rdmarpc/call_options.h"
#include "rdmarpc/metadata.h"
#include "rdmarpc/payload.h"
#include "rdmarpc/status.h"
#include "rdmarpc/unique_function.h"

namespace rdmarpc::rpc {

class BulkLoans;  // bulk_loans.h

class CallTable {
 public:
  using Entry = std::pair<uint64_t, ResponseCallback>;

  // Returns the new call's id (never 0). `metadata`, if set, is where the
  // response's metadata goes (CallOptions::response_metadata).
  uint64_t Add(ResponseCallback&& done,
               std::optional<Clock::time_point> deadline,
               const std::shared_ptr<ResponseMetadata>& metadata = nullptr);

  bool Contains(uint64_t id) const;
  // Removes the call and returns its callback; nullopt if `id` is not
  // outstanding (already completed: a late or duplicate reply).
  std::optional<ResponseCallback> Take(uint64_t id);
  // The same into `*done` (one move of the callback, not three), and the
  // call's metadata destination into `*metadata`; false if `id` is not
  // outstanding.
  bool Take(uint64_t id, ResponseCallback* done,
            std::shared_ptr<ResponseMetadata>* metadata);
  // Removes every call whose deadline is at or before `now`; those that
  // lend memory also go to `*lending` (their loans live as long as their
  // callback in `*out`).
  void TakeExpired(
      Clock::time_point now, std::vector<Entry>* out,
      std::vector<std::pair<uint64_t, BulkLoans*>>* lending = nullptr);
  // Removes every call.
  void TakeAll(std::vector<Entry>* out);
  // Removes every call but those in `keep`.
  void TakeAllExcept(const std::vector<uint64_t>& keep,
                     std::vector<Entry>* out);

  std::optional<Clock::time_point> NextDeadline() const;

  // A call's bulk loans (CallOptions::bulk), for a response that reports
  // bytes written into the call's destination. Set after Add for the few
  // calls that lend; null for the rest, and once the call left the table.
  // The call's callback owns them.
  void SetLoans(uint64_t id, BulkLoans* loans) {
    if (Slot* slot = Find(id)) slot->loans = loans;
  }
  BulkLoans* LoansOf(uint64_t id) {
    Slot* slot = Find(id);
    return slot != nullptr ? slot->loans : nullptr;
  }

  // The request window (ChannelOptions::max_request_bytes_in_flight): a
  // call's request bytes count against it from Charge until the call leaves
  // the table, however it leaves. A call is charged once, when its request
  // is sent; nothing happens if `id` is not outstanding.
  void Charge(uint64_t id, uint64_t bytes);
  uint64_t charged_bytes() const { return charged_bytes_; }
  uint32_t charged_calls() const { return charged_calls_; }
  // The calls outstanding. Unlike the rest, readable from any thread (a
  // cluster's balancer reads it without the owner's lock), if only as a
  // hint: it may be stale by the time it is used.
  size_t size() const { return live_.load(std::memory_order_relaxed); }

  // Ids from now on carry `tag` (1..65535) in their top 16 bits, so that a
  // cluster channel knows from an id which subchannel's call it is; the
  // generation then has 16 bits instead of 32.
  void set_id_tag(uint16_t tag) {
    tag_bits_ = uint64_t{tag} << 48;
    generation_mask_ = tag == 0 ? UINT32_MAX : 0xffff;
  }
  static uint16_t IdTag(uint64_t id) { return static_cast<uint16_t>(id >> 48); }

 private:
  static constexpr uint32_t kNotInHeap = UINT32_MAX;
  struct Slot {
    ResponseCallback done;
    std::shared_ptr<ResponseMetadata> metadata;
    BulkLoans* loans = nullptr;
    Clock::time_point deadline;
    uint64_t charged = 0;  // Request bytes counted in the window.
    uint32_t generation = 0;
    uint32_t heap_pos = kNotInHeap;
    bool in_use = false;
  };

  uint64_t MakeId(uint32_t index, uint32_t generation) const {
    return tag_bits_ | (uint64_t{generation} << 32) | index;
  }
  Slot* Find(uint64_t id);
  // Frees the slot; its callback moves to `*done`.
  void Release(uint32_t index, ResponseCallback* done);

  void HeapPush(uint32_t index);
  void HeapRemove(uint32_t pos);
  void HeapSwap(uint32_t a, uint32_t b);
  void SiftUp(uint32_t pos);
  void SiftDown(uint32_t pos);
  bool Earlier(uint32_t a, uint32_t b) const {
    return slots_[heap_[a]].deadline < slots_[heap_[b]].deadline;
  }

  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  std::vector<uint32_t> heap_;  // Slot indices, earliest deadline first.
  // Written by the owner only, as load and store (no locked instruction).
  std::atomic<size_t> live_{0};
  uint64_t tag_bits_ = 0;
  uint64_t charged_bytes_ = 0;  // The sum of the slots' `charged`,
  uint32_t charged_calls_ = 0;  // and how many are charged.
  uint32_t generation_mask_ = UINT32_MAX;
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_CLIENT_CALL_TABLE_H_
