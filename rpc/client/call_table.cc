#include "rpc/client/call_table.h"

#include <algorithm>

namespace rdmarpc::rpc {

uint64_t CallTable::Add(ResponseCallback&& done,
                        std::optional<Clock::time_point> deadline,
                        const std::shared_ptr<ResponseMetadata>& metadata) {
  uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    index = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& slot = slots_[index];
  slot.done = std::move(done);
  if (metadata) [[unlikely]] {
    slot.metadata = metadata;
  }
  slot.in_use = true;
  // Generation 0 is never used, so no id is 0.
  slot.generation = (slot.generation + 1) & generation_mask_;
  if (slot.generation == 0) slot.generation = 1;
  live_.store(live_.load(std::memory_order_relaxed) + 1,
              std::memory_order_relaxed);
  if (deadline) {
    slot.deadline = *deadline;
    HeapPush(index);
  }
  return MakeId(index, slot.generation);
}

CallTable::Slot* CallTable::Find(uint64_t id) {
  const auto index = static_cast<uint32_t>(id);
  if (index >= slots_.size()) return nullptr;
  Slot& slot = slots_[index];
  if (!slot.in_use || (tag_bits_ | (uint64_t{slot.generation} << 32)) !=
                          (id & ~uint64_t{UINT32_MAX})) {
    return nullptr;
  }
  return &slot;
}

bool CallTable::Contains(uint64_t id) const {
  return const_cast<CallTable*>(this)->Find(id) != nullptr;
}

void CallTable::Release(uint32_t index, ResponseCallback* done) {
  Slot& slot = slots_[index];
  if (slot.heap_pos != kNotInHeap) HeapRemove(slot.heap_pos);
  slot.in_use = false;
  slot.loans = nullptr;
  if (slot.charged != 0) {
    charged_bytes_ -= slot.charged;
    --charged_calls_;
    slot.charged = 0;
  }
  live_.store(live_.load(std::memory_order_relaxed) - 1,
              std::memory_order_relaxed);
  free_.push_back(index);
  *done = std::move(slot.done);
  if (slot.metadata) [[unlikely]] {
    slot.metadata.reset();
  }
}

void CallTable::Charge(uint64_t id, uint64_t bytes) {
  Slot* slot = Find(id);
  if (slot == nullptr || slot->charged != 0 || bytes == 0) return;
  slot->charged = bytes;
  charged_bytes_ += bytes;
  ++charged_calls_;
}

std::optional<ResponseCallback> CallTable::Take(uint64_t id) {
  std::optional<ResponseCallback> done;
  if (Find(id) != nullptr) Release(static_cast<uint32_t>(id), &done.emplace());
  return done;
}

bool CallTable::Take(uint64_t id, ResponseCallback* done,
                     std::shared_ptr<ResponseMetadata>* metadata) {
  Slot* slot = Find(id);
  if (slot == nullptr) return false;
  if (slot->metadata) *metadata = std::move(slot->metadata);
  Release(static_cast<uint32_t>(id), done);
  return true;
}

void CallTable::TakeExpired(
    Clock::time_point now, std::vector<Entry>* out,
    std::vector<std::pair<uint64_t, BulkLoans*>>* lending) {
  while (!heap_.empty() && slots_[heap_[0]].deadline <= now) {
    const uint32_t index = heap_[0];
    const uint64_t id = MakeId(index, slots_[index].generation);
    if (slots_[index].loans != nullptr && lending != nullptr) {
      lending->emplace_back(id, slots_[index].loans);
    }
    Release(index, &out->emplace_back(id, nullptr).second);
  }
}

void CallTable::TakeAll(std::vector<Entry>* out) {
  for (uint32_t index = 0; index < slots_.size(); ++index) {
    if (slots_[index].in_use) {
      const uint64_t id = MakeId(index, slots_[index].generation);
      Release(index, &out->emplace_back(id, nullptr).second);
    }
  }
}

void CallTable::TakeAllExcept(const std::vector<uint64_t>& keep,
                              std::vector<Entry>* out) {
  for (uint32_t index = 0; index < slots_.size(); ++index) {
    if (!slots_[index].in_use) continue;
    const uint64_t id = MakeId(index, slots_[index].generation);
    if (std::find(keep.begin(), keep.end(), id) != keep.end()) continue;
    Release(index, &out->emplace_back(id, nullptr).second);
  }
}

std::optional<Clock::time_point> CallTable::NextDeadline() const {
  if (heap_.empty()) return std::nullopt;
  return slots_[heap_[0]].deadline;
}

void CallTable::HeapPush(uint32_t index) {
  const auto pos = static_cast<uint32_t>(heap_.size());
  heap_.push_back(index);
  slots_[index].heap_pos = pos;
  SiftUp(pos);
}

void CallTable::HeapRemove(uint32_t pos) {
  const uint32_t last = static_cast<uint32_t>(heap_.size()) - 1;
  slots_[heap_[pos]].heap_pos = kNotInHeap;
  if (pos != last) {
    heap_[pos] = heap_[last];
    slots_[heap_[pos]].heap_pos = pos;
  }
  heap_.pop_back();
  if (pos < heap_.size()) {
    SiftUp(pos);
    SiftDown(pos);
  }
}

void CallTable::HeapSwap(uint32_t a, uint32_t b) {
  std::swap(heap_[a], heap_[b]);
  slots_[heap_[a]].heap_pos = a;
  slots_[heap_[b]].heap_pos = b;
}

void CallTable::SiftUp(uint32_t pos) {
  while (pos > 0) {
    const uint32_t parent = (pos - 1) / 2;
    if (!Earlier(pos, parent)) break;
    HeapSwap(pos, parent);
    pos = parent;
  }
}

void CallTable::SiftDown(uint32_t pos) {
  const auto size = static_cast<uint32_t>(heap_.size());
  for (;;) {
    const uint32_t left = 2 * pos + 1;
    const uint32_t right = left + 1;
    uint32_t best = pos;
    if (left < size && Earlier(left, best)) best = left;
    if (right < size && Earlier(right, best)) best = right;
    if (best == pos) return;
    HeapSwap(pos, best);
    pos = best;
  }
}

}  // namespace rdmarpc::rpc
