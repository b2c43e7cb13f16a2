// Registered memory for zero-copy sends over RDMA.
//
//   rdmarpc::MemoryRegistration
//       Allocate(bytes)              fresh memory, registered once;
//       Register(std::span<std::byte>)  your own memory, registered once;
//       Slice(offset, n)             a Buffer inside it, for a request or a
//                                    response.
//
// A payload whose bytes lie inside a live registration is written by the NIC
// straight from it; any other bytes are copied through a registered bounce
// pool. Each connection registers a MemoryRegistration with its own
// protection domain on first use and keeps it until the registration ends.
// Over TCP the same Buffers are simply written.
#ifndef RDMARPC_MEMORY_H_
#define RDMARPC_MEMORY_H_

#include "rdmarpc/buffer.h"    // IWYU pragma: export
#include "transport/memory.h"  // IWYU pragma: export

// One namespace for what an application names: rdmarpc::X is the same
// entity as the rdmarpc::rpc::X or rdmarpc::transport::X the implementation
// declares (either spelling compiles; write rdmarpc::X).
namespace rdmarpc {
using transport::MemoryRegistration;
}  // namespace rdmarpc

#endif  // RDMARPC_MEMORY_H_
