#include "rdmarpc/memory.h"

#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

namespace rdmarpc {

// Every live registration by start address, and who to tell when one ends.
class MemoryRegistry {
 public:
  static StatusOr<std::shared_ptr<MemoryRegistration>> Add(std::byte* data,
                                                           size_t size,
                                                           bool owned);

  struct Entry {
    uintptr_t end;
    MemoryRegistration* registration;
    std::weak_ptr<MemoryRegistration> weak;
  };
  std::mutex mu;
  std::map<uintptr_t, Entry> entries;
  std::vector<MemoryRegistration::Observer*> observers;
  uint64_t next_id = 1;
};

namespace {

MemoryRegistry& TheRegistry() {
  static auto* registry =
      new MemoryRegistry;  // Never destroyed: no exit order.
  return *registry;
}

void ReleaseSlice(void* context, std::byte* /*block*/) noexcept {
  delete static_cast<std::shared_ptr<MemoryRegistration>*>(context);
}

}  // namespace

StatusOr<std::shared_ptr<MemoryRegistration>> MemoryRegistry::Add(
    std::byte* data, size_t size, bool owned) {
  if (size == 0 || data == nullptr) {
    return Status(StatusCode::kInvalidArgument,
                  "cannot register an empty range of memory");
  }
  const auto start = reinterpret_cast<uintptr_t>(data);
  const uintptr_t end = start + size;
  MemoryRegistry& registry = TheRegistry();
  std::lock_guard lock(registry.mu);
  auto after = registry.entries.upper_bound(start);
  if (after != registry.entries.begin()) {
    auto before = std::prev(after);
    // (Never let a locked shared_ptr die here: its destructor takes the
    // lock this function holds.)
    if (before->second.end > start && !before->second.weak.expired()) {
      // Fresh memory inside a live registration: someone freed registered
      // memory while it was registered.
      if (before->second.end < end || owned) {
        return Status(StatusCode::kInvalidArgument,
                      "memory overlaps a registration only partly");
      }
      if (auto live = before->second.weak.lock()) return live;  // Cache hit.
    }
  }
  for (auto it = after; it != registry.entries.end() && it->first < end;) {
    if (!it->second.weak.expired()) {
      return Status(StatusCode::kInvalidArgument,
                    "memory overlaps a registration only partly");
    }
    it = registry.entries.erase(it);  // Ending right now: forget it here.
  }
  auto registration = std::make_shared<MemoryRegistration>(
      MemoryRegistration::Key(), data, size, owned, registry.next_id++);
  registry.entries.insert_or_assign(
      start, MemoryRegistry::Entry{end, registration.get(), registration});
  return registration;
}

MemoryRegistration::MemoryRegistration(Key, std::byte* data, size_t size,
                                       bool owned, uint64_t id)
    : data_(data), size_(size), owned_(owned), id_(id) {}

StatusOr<std::shared_ptr<MemoryRegistration>> MemoryRegistration::Register(
    std::span<std::byte> memory) {
  return MemoryRegistry::Add(memory.data(), memory.size(), /*owned=*/false);
}

StatusOr<std::shared_ptr<MemoryRegistration>> MemoryRegistration::Allocate(
    size_t size) {
  if (size == 0) {
    return Status(StatusCode::kInvalidArgument,
                  "cannot register an empty range of memory");
  }
  // Page-aligned and page-sized: the pages pinned are exactly its own.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (size > SIZE_MAX - page) {
    return Status(StatusCode::kResourceExhausted,
                  "cannot allocate " + std::to_string(size) + " bytes");
  }
  const size_t rounded = (size + page - 1) / page * page;
  auto* data = static_cast<std::byte*>(std::aligned_alloc(page, rounded));
  if (data == nullptr) {
    return Status(StatusCode::kResourceExhausted,
                  "cannot allocate " + std::to_string(size) +
                      " bytes of registered memory");
  }
  auto registration = MemoryRegistry::Add(data, size, /*owned=*/true);
  if (!registration.ok()) std::free(data);
  return registration;
}

std::shared_ptr<MemoryRegistration> MemoryRegistration::Find(
    std::span<const std::byte> bytes) {
  const auto start = reinterpret_cast<uintptr_t>(bytes.data());
  MemoryRegistry& registry = TheRegistry();
  std::lock_guard lock(registry.mu);
  auto after = registry.entries.upper_bound(start);
  if (after == registry.entries.begin()) return nullptr;
  const MemoryRegistry::Entry& entry = std::prev(after)->second;
  if (entry.end < start + bytes.size()) return nullptr;
  return entry.weak.lock();
}

MemoryRegistration::~MemoryRegistration() {
  {
    MemoryRegistry& registry = TheRegistry();
    std::lock_guard lock(registry.mu);
    auto it = registry.entries.find(reinterpret_cast<uintptr_t>(data_));
    if (it != registry.entries.end() && it->second.registration == this) {
      registry.entries.erase(it);
    }
    for (Observer* observer : registry.observers) observer->OnUnregistered(id_);
  }
  if (owned_) std::free(data_);
}

Buffer MemoryRegistration::Slice(size_t offset, size_t size) {
  assert(offset <= size_ && size <= size_ - offset);
  offset = std::min(offset, size_);
  size = std::min(size, size_ - offset);
  return Buffer(data_ + offset, size, &ReleaseSlice,
                new std::shared_ptr<MemoryRegistration>(shared_from_this()));
}

void MemoryRegistration::AddObserver(Observer* observer) {
  MemoryRegistry& registry = TheRegistry();
  std::lock_guard lock(registry.mu);
  registry.observers.push_back(observer);
}

void MemoryRegistration::RemoveObserver(Observer* observer) {
  MemoryRegistry& registry = TheRegistry();
  std::lock_guard lock(registry.mu);
  std::erase(registry.observers, observer);
}

size_t MemoryRegistration::LiveCount() {
  MemoryRegistry& registry = TheRegistry();
  std::lock_guard lock(registry.mu);
  size_t live = 0;
  for (const auto& [start, entry] : registry.entries) {
    if (!entry.weak.expired()) ++live;
  }
  return live;
}

}  // namespace rdmarpc
