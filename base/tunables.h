// Every tunable default of rdmarpc, in one place, with its invariants checked
// at compile time. Options structs take their defaults from here.
#ifndef RDMARPC_BASE_TUNABLES_H_
#define RDMARPC_BASE_TUNABLES_H_

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace rdmarpc::tunables {

// --- Framing ---------------------------------------------------------------
// Fixed frame prefix: magic, version, type, header and payload lengths.
inline constexpr size_t kFramePrefixSize = 16;
// A call header carries names, a status message and descriptors: small. A
// larger one is a malformed frame, not a large message.
inline constexpr uint32_t kMaxCallHeaderSize = 64 * 1024;
// Largest payload a receiver accepts by default (the KV example stores 64 MiB
// values). A frame's payload length is a u32 on the wire.
inline constexpr uint64_t kDefaultMaxPayloadSize = 64ull << 20;
inline constexpr uint64_t kMaxPayloadSizeLimit = (1ull << 32) - 1;
// Slices in one outgoing frame's payload (scatter/gather without a copy).
inline constexpr size_t kMaxPayloadSlices = 4;

static_assert(kMaxCallHeaderSize >= 1024, "headers must fit long names");
static_assert(kDefaultMaxPayloadSize <= kMaxPayloadSizeLimit,
              "payload length must fit the u32 prefix field");

// --- TCP transport ---------------------------------------------------------
// Receive staging area: one read() can bring in many small frames.
inline constexpr size_t kTcpReceiveChunk = 64 * 1024;
// Frames at most this large are copied out of the staging area; larger ones
// are read straight into their own block.
inline constexpr size_t kTcpCopyOutLimit = 16 * 1024;

static_assert(kTcpReceiveChunk >= kFramePrefixSize + kTcpCopyOutLimit,
              "a copied-out frame must fit the staging area");

// Close() first writes what is already queued; a peer that does not read is
// cut off after this long.
inline constexpr std::chrono::milliseconds kCloseFlushTimeout{1000};

// --- Channel ---------------------------------------------------------------
inline constexpr std::chrono::milliseconds kInitialReconnectBackoff{100};
inline constexpr std::chrono::milliseconds kMaxReconnectBackoff{5000};
inline constexpr double kReconnectBackoffMultiplier = 1.6;
inline constexpr std::chrono::milliseconds kConnectTimeout{5000};

static_assert(kInitialReconnectBackoff <= kMaxReconnectBackoff);
static_assert(kReconnectBackoffMultiplier > 1.0);

// --- Server ----------------------------------------------------------------
inline constexpr int kDefaultServerWorkers = 2;
inline constexpr std::chrono::milliseconds kDefaultShutdownGrace{5000};

static_assert(kDefaultServerWorkers >= 1);

}  // namespace rdmarpc::tunables

#endif  // RDMARPC_BASE_TUNABLES_H_
