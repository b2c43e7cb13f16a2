// Registered memory: zero-copy sends of large payloads.
//
// RDMA hardware reads only memory registered with it. Register the memory
// your large payloads live in, once; from then on any Buffer whose bytes lie
// inside a live registration is written to the peer straight from that memory
// (RDMA WRITE, no copy). Bytes outside every registration are copied through
// a registered bounce pool instead, so unregistered memory works too, at the
// price of one copy. Over TCP registration changes nothing.
//
//   auto arena = rdmarpc::MemoryRegistration::Allocate(64 << 20);
//   std::memcpy((*arena)->data(), value, n);
//   channel.Call("kv.KV", "Put", (*arena)->Slice(0, n), options, done);
//
// Lifetime: a registration lasts while any shared_ptr to it is held; every
// Buffer from Slice() holds one, and so does a transfer reading from it. When
// the last one goes, every connection's memory region for it is deregistered
// at once, so memory freed afterwards can never be reached through a stale
// registration (the classic registration-cache bug: caching by address pins
// pages the allocator has since handed to someone else).
//
// The cache: connections register a registration's memory with their own
// protection domain on first use and keep that memory region until the
// registration or the connection goes away; later sends from the same memory
// cost a lookup, not an ibv_reg_mr. (Each connection has its own protection
// domain so that a peer's remote writes are confined to its own connection's
// grants; see transport/rdma/protocol.h.)
#ifndef RDMARPC_MEMORY_H_
#define RDMARPC_MEMORY_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "rdmarpc/buffer.h"
#include "rdmarpc/status.h"

namespace rdmarpc {

class MemoryRegistration
    : public std::enable_shared_from_this<MemoryRegistration> {
 public:
  // Registers memory the caller owns and keeps allocated (and does not
  // unmap) for as long as the registration lives. A range inside a live
  // registration returns that registration (a cache hit); a range that
  // overlaps one only partially is INVALID_ARGUMENT.
  static StatusOr<std::shared_ptr<MemoryRegistration>> Register(
      std::span<std::byte> memory);

  // Allocates `size` page-aligned bytes owned by the registration.
  static StatusOr<std::shared_ptr<MemoryRegistration>> Allocate(size_t size);

  // Looks up the live registration containing all of `bytes`; null if none.
  static std::shared_ptr<MemoryRegistration> Find(
      std::span<const std::byte> bytes);

  ~MemoryRegistration();
  MemoryRegistration(const MemoryRegistration&) = delete;
  MemoryRegistration& operator=(const MemoryRegistration&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  // Unique for the life of the process, never reused.
  uint64_t id() const { return id_; }

  // A Buffer over [offset, offset + size) that keeps this registration alive.
  Buffer Slice(size_t offset, size_t size);

  // Told when a registration ends, so a connection can deregister its memory
  // region for it. Called with the registry's lock held: the observer must
  // not call back into MemoryRegistration.
  class Observer {
   public:
    virtual void OnUnregistered(uint64_t id) noexcept = 0;

   protected:
    ~Observer() = default;
  };
  static void AddObserver(Observer* observer);
  static void RemoveObserver(Observer* observer);  // Waits out a running call.

  // Live registrations in the process (for tests and statistics).
  static size_t LiveCount();

  // Only the registry constructs: use Register or Allocate.
  class Key {
    friend class MemoryRegistry;
    Key() = default;
  };
  MemoryRegistration(Key, std::byte* data, size_t size, bool owned,
                     uint64_t id);

 private:
  std::byte* data_;
  size_t size_;
  bool owned_;
  uint64_t id_;
};

// Deprecated: the name this had before it moved to rdmarpc::; it goes in
// the next release.
namespace transport {
using rdmarpc::MemoryRegistration;
}  // namespace transport

}  // namespace rdmarpc

#endif  // RDMARPC_MEMORY_H_
