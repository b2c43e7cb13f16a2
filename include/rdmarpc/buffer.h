// rdmarpc::Buffer: the bytes of a request, a response or a frame.
//
// A Buffer owns or borrows its bytes and runs a release hook when the last
// reference goes, so registered memory can be sent from and received into
// without copies:
//   Buffer::CopyOf("bytes")          a fresh copy;
//   Buffer::Borrow(std::span{...})   bytes the caller keeps alive until the
//                                    call completes (no copy, no allocation);
//   registration->Slice(offset, n)   bytes inside a MemoryRegistration
//                                    (rdmarpc/memory.h), sent zero-copy over
//                                    RDMA.
#ifndef RDMARPC_BUFFER_H_
#define RDMARPC_BUFFER_H_

#include "base/buffer.h"  // IWYU pragma: export

#endif  // RDMARPC_BUFFER_H_
