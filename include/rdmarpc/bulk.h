// Bulk data: the server pulls a request's bulk from, and pushes a response's
// bulk into, memory the client lent to the call.
//
// A client lends parts of its registered memory (memory.h) to one call:
//
//   auto arena = rdmarpc::MemoryRegistration::Allocate(64 << 20);
//   rdmarpc::CallOptions options;
//   options.bulk.push_back({(*arena)->data(), n, rdmarpc::BulkAccess::kRead});
//   channel.Call("kv.KV", "Put", request, options, done);
//
// The server's handler sees each loan as a BulkDescriptor, in the order
// lent, and moves the bytes itself, when it wants, straight between its own
// memory and the client's:
//
//   const rdmarpc::BulkDescriptor& value = call->bulk()[0];
//   call->Pull(value, 0, destination, [call](const rdmarpc::Status& s) {
//     call->Finish(s);
//   });
//
// A client can also have the response's attachment land in its memory
// (CallOptions::ResponseInto): the server's library then writes the
// attachment there itself, and the client's response attachment is a Buffer
// borrowing the destination's first bytes.
//
// A loan lives for its call: it is valid on the call's connection only, from
// when the request leaves until the call ends (its response arrives, or it
// fails, is cancelled or passes its deadline). The client revokes it before
// the call's completion runs, so once the application sees the call end, the
// server can neither read nor write the memory. A call cancelled or past its
// deadline therefore completes, over RDMA, once the server has answered that
// its transfers are over (at most tunables::kBulkReleaseGrace later), so
// that none of them fails its connection. Over RDMA a loan is a memory
// window bound to the connection's queue pair, and the server's Pull and
// Push are RDMA READs and WRITEs; over TCP the bytes go over the socket. A loan
// of memory that is not inside one live registration fails the call
// INVALID_ARGUMENT, never a silent copy. How each transport moves the bytes,
// and what a descriptor exposes and for how long: docs/protocol.md ("Bulk") and
// docs/security.md.
#ifndef RDMARPC_BULK_H_
#define RDMARPC_BULK_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "rdmarpc/tunables.h"

namespace rdmarpc {

// What the borrower may do with lent memory.
enum class BulkAccess : uint8_t {
  kRead = 1,       // Pull from it (the client's request bulk).
  kWrite = 2,      // Push into it (where the response's bulk lands).
  kReadWrite = 3,  // Both.
};

// Memory the client lends to one call (CallOptions::bulk).
struct BulkRegion {
  std::byte* data = nullptr;
  size_t size = 0;
  BulkAccess access = BulkAccess::kRead;
  // Where the response's attachment lands (CallOptions::ResponseInto): a
  // write loan that the server's library fills, not its handler. At most
  // one per call.
  bool response_destination = false;
};

// A loan as the borrower sees it: a handle, not the memory. Its key is
// valid for one connection and one call.
struct BulkDescriptor {
  uint64_t key = 0;      // Names the loan on its connection.
  uint64_t address = 0;  // RDMA: the lent bytes' address; TCP: 0.
  uint64_t length = 0;   // Bytes lent.
  uint32_t rkey = 0;     // RDMA: the memory window's key; TCP: 0.
  BulkAccess access = BulkAccess::kRead;
  // The client's destination for the response's attachment (BulkRegion);
  // ServerCall::bulk() never lists it.
  bool response_destination = false;

  // On a connection of several rails (several queue pairs, on several NICs:
  // TransportOptions, "rails="), the loan is lent on each rail: its key
  // and window there, by rail number. `rails` lists them; empty for a loan
  // on one queue pair.
  struct RailKey {
    uint8_t rail = 0;
    uint16_t epoch = 0;  // Which of the rail's connections lent it.
    uint32_t rkey = 0;
    uint64_t key = 0;
  };
  uint8_t rail_count = 0;  // Entries of `rails` in use.
  std::array<RailKey, tunables::kMaxRails> rails{};

  bool readable() const { return (static_cast<uint8_t>(access) & 1) != 0; }
  bool writable() const { return (static_cast<uint8_t>(access) & 2) != 0; }

  // The wire form, little-endian (docs/protocol.md, "Bulk"): 32 bytes, then
  // 16 per rail entry:
  //   0 u8 format       1 u8 access   2 u8 flags   3 u8 rail entries
  //   4 u32 rkey        8 u64 key    16 u64 address 24 u64 length
  //   per entry: 0 u8 rail  1 u8 zero  2 u16 epoch  4 u32 rkey  8 u64 key
  // Format 1 has no entries (byte 3 zero); format 2, 1 to kMaxRails of
  // them, distinct rails in increasing order. Flags: bit 0,
  // response_destination; the others zero.
  static constexpr size_t kEncodedSize = 32;  // Format 1.
  static constexpr size_t kRailEntrySize = 16;
  static constexpr size_t kMaxEncodedSize =
      kEncodedSize + kRailEntrySize * tunables::kMaxRails;
  struct Encoded {
    std::array<std::byte, kMaxEncodedSize> bytes;
    size_t length = 0;
    const std::byte* data() const { return bytes.data(); }
    size_t size() const { return length; }
    const std::byte* begin() const { return bytes.data(); }
    const std::byte* end() const { return bytes.data() + length; }
  };
  Encoded Encode() const;
  // The size of the descriptor that `bytes` starts with, from its format
  // and entry count; 0 if those are not a known format's.
  static size_t EncodedSizeAt(std::span<const std::byte> bytes);
  // Nullopt unless `bytes` is exactly one well-formed descriptor: a known
  // format, a known access, known flags, zero padding, a length of 1 byte
  // to 2^48, rail entries as above.
  static std::optional<BulkDescriptor> Decode(std::span<const std::byte> bytes);
};

// What bulk data has cost this process so far, for an application that
// checks its path is zero-copy (the KV example's `load` prints these per
// call). Any thread.
struct BulkCosts {
  // Response attachments the client copied into their destination
  // (CallOptions::ResponseInto): over TCP, or from a server's unregistered
  // memory. Over RDMA from registered memory, none.
  uint64_t response_copies = 0;
  // Registrations with RDMA devices (ibv_reg_mr), for every use: a loan's,
  // a pull's, a send's, the pools'.
  uint64_t registrations = 0;
  // Window binds and invalidations (a loan's two) that waited for their
  // connection's send queue to drain first: Soft-RoCE's rule
  // (docs/protocol.md section 4); 0 on other devices.
  uint64_t local_op_waits = 0;
};
BulkCosts ReadBulkCosts();

}  // namespace rdmarpc

#endif  // RDMARPC_BULK_H_
