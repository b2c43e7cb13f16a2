// What the server saw on the wire: its own counters (rdmarpc.Introspection's
// GetMetrics) for the connections it has open, fetched over `channel`. On
// rdma:// they show how frames travelled: SENDs (inline or from the send
// ring) for small frames, WRITE WITH IMMEDIATE transfers for large ones, and
// whether their bytes came from registered memory or through the bounce
// pool. tools/demo --rdma prints them.
#ifndef RDMARPC_EXAMPLES_COMMON_WIRE_H_
#define RDMARPC_EXAMPLES_COMMON_WIRE_H_

#include <boost/asio/use_future.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "rdmarpc/introspection.h"

namespace rdmarpc::examples {

inline std::string WireBytes(uint64_t n) {
  char out[32];
  if (n >= (1ull << 20)) {
    std::snprintf(out, sizeof(out), "%.1f MiB", n / double(1ull << 20));
  } else if (n >= (1ull << 10)) {
    std::snprintf(out, sizeof(out), "%.1f KiB", n / double(1ull << 10));
  } else {
    std::snprintf(out, sizeof(out), "%llu B",
                  static_cast<unsigned long long>(n));
  }
  return out;
}

// Prints the server's per-connection counters; returns 0, or 1 when the
// server could not be asked (its status is printed).
inline int PrintWire(std::shared_ptr<rpc::Channel> channel) {
  rdmarpc::Introspection::Stub stub(std::move(channel));
  auto [status, metrics] =
      stub.async_GetMetrics(
              {}, rpc::CallOptions::WithTimeout(std::chrono::seconds(30)),
              boost::asio::use_future)
          .get();
  if (!status.ok()) {
    std::printf("  wire: %s\n", status.ToString().c_str());
    return 1;
  }
  for (const auto& c : metrics.connections()) {
    const bool rdma = c.peer().rfind("rdma://", 0) == 0;
    std::printf("  on the wire, as the server counted connection %s:\n",
                c.peer().c_str());
    std::printf("    frames in %llu (%s), out %llu (%s)\n",
                static_cast<unsigned long long>(c.frames_received()),
                WireBytes(c.bytes_received()).c_str(),
                static_cast<unsigned long long>(c.frames_sent()),
                WireBytes(c.bytes_sent()).c_str());
    if (!rdma) {
      std::printf("    TCP: %llu writes, %llu reads\n",
                  static_cast<unsigned long long>(c.write_calls()),
                  static_cast<unsigned long long>(c.read_calls()));
      continue;
    }
    const uint64_t writes = c.rdma_writes();
    const uint64_t sends = c.frames_sent() - writes;
    std::printf(
        "    sent as RDMA SEND: %llu frames; %llu SENDs inline (frames and "
        "control messages), %llu of them CREDIT messages\n",
        static_cast<unsigned long long>(sends),
        static_cast<unsigned long long>(c.inline_sends()),
        static_cast<unsigned long long>(c.credit_messages()));
    std::printf(
        "    sent as RDMA WRITE WITH IMMEDIATE: %llu frames (%s written from "
        "registered memory, %s through the bounce pool)\n",
        static_cast<unsigned long long>(writes),
        WireBytes(c.zero_copy_bytes()).c_str(),
        WireBytes(c.staged_bytes()).c_str());
    std::printf(
        "    completion queue: %llu events, %llu polls; credit stalls %llu, "
        "RNR errors %llu\n",
        static_cast<unsigned long long>(c.cq_events()),
        static_cast<unsigned long long>(c.cq_polls()),
        static_cast<unsigned long long>(c.credit_stalls()),
        static_cast<unsigned long long>(c.rnr_errors()));
  }
  return 0;
}

}  // namespace rdmarpc::examples

#endif  // RDMARPC_EXAMPLES_COMMON_WIRE_H_
