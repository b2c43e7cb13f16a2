// Requests whose every byte can be checked end to end, for the fault table's
// load (fault_load.cc) and the soak (soak.cc).
//
// A request is a 24-byte Header (client id, sequence number, payload length,
// checksum of the payload) and the payload: bytes derived from the sequence
// number. A server checks the checksum before it echoes the request; the
// client checks that the echo is its own request, byte for byte.
#ifndef RDMARPC_TOOLS_FAULTS_CHECKED_PAYLOAD_H_
#define RDMARPC_TOOLS_FAULTS_CHECKED_PAYLOAD_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>

#include "rdmarpc/buffer.h"

namespace rdmarpc::tools {

struct Header {
  uint64_t client = 0;
  uint64_t seq = 0;
  uint32_t length = 0;
  uint32_t checksum = 0;
};
static_assert(sizeof(Header) == 24);

// FNV-1a over 8-byte words, folded to 32 bits: cheap on 4 MiB, and any
// flipped, lost or reordered byte changes it.
inline uint32_t Checksum(const std::byte* data, size_t size) {
  uint64_t h = 1469598103934665603ull;
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t word;
    std::memcpy(&word, data + i, 8);
    h = (h ^ word) * 1099511628211ull;
  }
  for (; i < size; ++i) {
    h = (h ^ static_cast<uint8_t>(data[i])) * 1099511628211ull;
  }
  return static_cast<uint32_t>(h ^ (h >> 32));
}

// Payload sizes in a fixed rotation by sequence number: mostly small calls,
// some large, 16 B to 4 MiB.
inline size_t SizeFor(uint64_t seq, size_t max_size) {
  static constexpr size_t kSizes[] = {16,    16,     256,     256,
                                      1024,  4096,   4096,    16384,
                                      65536, 262144, 1 << 20, 4 << 20};
  const size_t size = kSizes[seq % std::size(kSizes)];
  return std::min(size, max_size);
}

inline Buffer MakeRequest(uint64_t client, uint64_t seq, size_t size) {
  Buffer request = Buffer::Allocate(sizeof(Header) + size);
  std::byte* payload = request.data() + sizeof(Header);
  std::mt19937_64 bytes(seq * 0x9E3779B97F4A7C15ull + client);
  for (size_t i = 0; i < size; i += 8) {
    const uint64_t word = bytes();
    std::memcpy(payload + i, &word, std::min<size_t>(8, size - i));
  }
  Header header{client, seq, static_cast<uint32_t>(size),
                Checksum(payload, size)};
  std::memcpy(request.data(), &header, sizeof(header));
  return request;
}

// Whether `request` is well formed and its payload matches its checksum.
inline bool RequestIntact(const Buffer& request, Header* header) {
  if (request.size() < sizeof(Header)) return false;
  std::memcpy(header, request.data(), sizeof(*header));
  return request.size() == sizeof(Header) + header->length &&
         Checksum(request.data() + sizeof(Header), header->length) ==
             header->checksum;
}

}  // namespace rdmarpc::tools

#endif  // RDMARPC_TOOLS_FAULTS_CHECKED_PAYLOAD_H_
