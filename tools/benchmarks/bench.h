// Shared by the echo benchmark's parts (bench.cc is the entry point and
// documents the flags): its options and results, the benchmark service, and
// one harness per file: raw_tcp.cc (raw TCP baselines), raw_verbs.cc (raw
// verbs baselines, through verbs_baseline), rpc_harness.cc (the RPC side),
// report.cc (printing, JSON, plots).
#ifndef RDMARPC_TOOLS_BENCHMARKS_BENCH_H_
#define RDMARPC_TOOLS_BENCHMARKS_BENCH_H_

#include <atomic>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/flags.h"
#include "rdmarpc/buffer.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/memory.h"
#include "rdmarpc/method_ref.h"
#include "rdmarpc/server.h"
#include "rdmarpc/service.h"

namespace rdmarpc::bench {

using Clock = std::chrono::steady_clock;

inline constexpr char kService[] = "rdmarpc.bench.Bench";
inline constexpr rpc::MethodRef kEcho(kService, "Echo");
inline constexpr rpc::MethodRef kSink(kService, "Sink");
inline constexpr rpc::MethodRef kPin(kService, "Pin");
inline constexpr rpc::MethodRef kWindow(kService, "Window");
inline constexpr rpc::MethodRef kDrain(kService, "Drain");
// Bulk (include/rdmarpc/bulk.h): the handler pulls the client's loan 0 into
// its own registered memory, or pushes that memory into it.
inline constexpr rpc::MethodRef kPull(kService, "Pull");
inline constexpr rpc::MethodRef kPush(kService, "Push");

// Echo answers with the request's own buffer (no copy); Sink with nothing;
// Drain, client-streaming, reads every message and answers with nothing;
// Pin pins the server's loop thread (PinTo(1)); Window switches callgrind's
// instrumentation in this process (bench-cpu).
class BenchService : public rpc::Service {
 public:
  BenchService();

 private:
  // Pull's and Push's registered memory, grown to the largest loan.
  std::span<std::byte> BulkMemory(size_t size);
  std::mutex mu_;
  std::shared_ptr<transport::MemoryRegistration> bulk_;  // Guarded.
};

struct Options {
  std::string uri = "tcp://127.0.0.1:0";
  std::string mode = "latency";
  std::vector<size_t> sizes;
  int iters = 0;
  int warmup = 0;
  int outstanding = 1;
  int connections = 1;
  double seconds = 3;
  transport::PollMode poll = transport::PollMode::kEvent;
  // RDMA: large frames land in the grant pool (false: a region registered
  // per frame, TransportOptions::rdma_pooled_grants), both ends.
  bool pooled_grants = true;
  bool raw = true;
  std::string json;
  std::string plot;
  bool stats = false;
  bool metrics = true;   // The in-process server's per-method metrics.
  bool by_name = false;  // Latency calls name the method, not its id.
  // The in-process server's handler pool (0: handlers run inline, on its
  // worker; ServerOptions::handler_threads).
  int handler_threads = 0;
  // The channel's callback pool (0: callbacks run inline, on its event
  // loop; ChannelOptions::callback_threads).
  int callback_threads = 0;
  // The channel's request window (ChannelOptions::
  // max_request_bytes_in_flight; 0: none).
  uint64_t window = tunables::kDefaultMaxRequestBytesInFlight;
  // TLS (--tls-cert, --tls-key, --tls-ca; tools/bench --tls makes them):
  // the server's certificate and key, the CA its clients trust. All empty:
  // none. With them a tcp:// run is TLS 1.3, an rdma:// run authenticated.
  struct TlsFiles {
    std::string cert, key, ca;
    bool empty() const { return cert.empty() && ca.empty(); }
  } tls;
  // Throughput mode: each call also lends this many bytes of registered
  // memory (include/rdmarpc/bulk.h), unused by the handler: what a loan's
  // bind and invalidation cost a call.
  uint64_t lend = 0;
};

struct Result {
  std::string mode;
  size_t size = 0;
  double local_op_waits_per_call = NAN;  // Throughput with --lend.
  // latency (µs)
  double p50 = 0, p99 = 0, p999 = 0, max = 0;
  double raw_p50 = 0, raw_p99 = 0;
  double epoll_p50 = NAN;  // The plain epoll loop (TCP only).
  double asio_p50 = NAN;   // The Asio loop (TCP only).
  // Latency in alternating rounds: each round's RPC p50 over its raw p50; their
  // median and range. A slow spell moves one round, not the median.
  double round_ratio_median = NAN, round_ratio_min = NAN, round_ratio_max = NAN;
  // TCP event mode: the same per-round medians for the floors, over raw.
  double epoll_round_ratio = NAN, asio_round_ratio = NAN;
  std::vector<double> samples;  // For the CDF plot.
  // throughput
  double calls_per_s = 0;
  // bandwidth (GB/s)
  double gbps = 0, raw_gbps = 0;
  uint64_t errors = 0;
};

// ---- Helpers (bench_util.cc).

// Opens or closes this process's measurement window: callgrind
// instrumentation, and a marker syscall that strace output is cut at.
void Window(bool open);
// --pin 1 (the default on two or more CPUs): the client side on CPU 0 and the
// server side on CPU 1 (pin.h), for the RPC's event loops and the raw
// baseline's threads alike.
extern bool pin_sides;
void PinTo(int cpu);
// A progress line on a terminal's stderr.
void Progress(const std::string& what, uint64_t done, uint64_t total);
// The q-quantile of sorted samples (0 when empty).
double Percentile(const std::vector<double>& sorted, double q);
// The median of unsorted values (NaN when empty).
double Median(std::vector<double> values);
// Round `round`'s share of `iters` spread over `rounds` alternating rounds.
int RoundShare(int iters, int rounds, int round);
std::string HostOf(const std::string& uri);
// A registered arena the payloads come from, so RDMA sends are zero-copy.
std::shared_ptr<transport::MemoryRegistration> Arena(size_t size);
Buffer Payload(const transport::MemoryRegistration& arena, size_t size);
std::string SizeName(size_t size);

// ---- Raw TCP baselines (raw_tcp.cc).

// How each side of the raw ping-pong waits for the next message.
enum class RawTcpLoop {
  kBlocking,  // Blocking read and write: the plain baseline.
  kBusy,      // Non-blocking, read again at once: for --poll busy|hybrid.
  kEpoll,     // Edge-triggered epoll without Asio: the kernel's event path.
};
// Round trips of `size` bytes each way over a fresh loopback pair, in µs,
// sorted.
std::vector<double> RawTcpPingPong(RawTcpLoop loop, size_t size, int warmup,
                                   int iters);
// The same ping-pong on Asio alone, as rdmarpc's transport uses it: the floor
// for an event-driven stack on Asio.
std::vector<double> AsioTcpPingPong(size_t size, int warmup, int iters);
// `iters` messages of `size` bytes one way: GB/s. With `ack_each`, each
// is acknowledged before the next (one outstanding, as a unary call);
// without, they go back to back with one acknowledgement at the end (the
// raw socket stream a streaming call is measured against).
double RawTcpBandwidth(size_t size, int iters, bool ack_each);
// `k` messages of `size` bytes in flight on one connection, echoed as they
// come, for `seconds` after `warmup` seconds: completions per second.
double RawTcpLoad(size_t size, int k, double warmup, double seconds);

// ---- Raw verbs baselines (raw_verbs.cc).

// Runs verbs_baseline (next to `self`, this binary) and returns its first
// number after `key` ("p50 " or "outstanding: "), or NaN.
double RawVerbs(const std::string& self, const std::string& ip,
                const std::string& mode, size_t size, int iters,
                const std::string& key);

// ---- The RPC side (rpc_harness.cc).

// The client of tools/bench-cpu (cpu_window.cc): --cpu-window N calls inside
// the measurement window. Returns the process's exit code.
int CpuWindow(const rdmarpc::Flags& flags);

rpc::ChannelOptions ChannelOptionsFor(const Options& options);
// Closed loop, one call outstanding: round trips in µs, sorted.
std::vector<double> RpcLatency(rpc::Channel& channel,
                               const transport::MemoryRegistration& arena,
                               size_t size, int warmup, int iters, bool by_name,
                               uint64_t& errors);
// K outstanding on each of C channels for `seconds`: calls/s.
// `*calls`, if given, counts the calls completed in all.
double RpcThroughput(const Options& options,
                     const transport::MemoryRegistration& arena, size_t size,
                     uint64_t& errors, uint64_t* calls = nullptr);
// The closed loop every call benchmark runs: `n` calls, `k` outstanding,
// each completion starting the next on `channel`'s thread. `start(end)`
// starts one call whose completion runs end(status); `on_done` sees the
// running count of completions. Returns how many calls failed.
template <typename Start>
uint64_t ClosedLoop(rpc::Channel& channel, long long n, int k,
                    const Start& start,
                    const std::function<void(long long)>& on_done = {}) {
  std::atomic<long long> issued{0}, done{0};
  std::atomic<uint64_t> failed{0};
  std::promise<void> finished;
  std::function<void()> issue;
  const auto end = [&](const Status& status) {
    if (!status.ok()) failed++;
    const long long count = ++done;
    if (on_done) on_done(count);
    if (count == n) return finished.set_value();
    issue();
  };
  issue = [&] {
    if (issued.fetch_add(1) < n) start(end);
  };
  boost::asio::post(channel.executor(), [&] {
    for (int i = 0; i < k; ++i) issue();
  });
  finished.get_future().wait();
  return failed.load();
}
// ClosedLoop over Channel::Call of `method` with `payload()`'s bytes.
uint64_t RunCalls(rpc::Channel& channel, long long n, int k,
                  const rpc::MethodRef& method,
                  const std::function<Buffer()>& payload,
                  const rpc::CallOptions& options = {},
                  const std::function<void(long long)>& on_done = {});
// `iters` Sink calls of `size` bytes, 2 outstanding: GB/s one way.
double RpcBandwidth(rpc::Channel& channel,
                    const transport::MemoryRegistration& arena, size_t size,
                    int iters, uint64_t& errors);
// One client-streaming Drain call of `iters` messages of `size` bytes, each
// written as soon as the one before it went (flow control decides): GB/s one
// way, until the server's answer that it read them all.
// `iters` calls of kPull (`pull`) or kPush, each moving `size` bytes of
// `arena` lent to it, 2 outstanding: GB/s.
double RpcBulkBandwidth(rpc::Channel& channel,
                        const transport::MemoryRegistration& arena, size_t size,
                        int iters, bool pull, uint64_t& errors);
double RpcStreamBandwidth(rpc::Channel& channel,
                          const transport::MemoryRegistration& arena,
                          size_t size, int iters, uint64_t& errors);

// ---- The size x load grid (grid.cc) and a mainstream peer (peer.cc).

struct GridOptions {
  std::vector<int> loads = {1, 8, 32, 128};  // Calls outstanding.
  int reps = 3;         // Interleaved repetitions of every cell.
  double warmup = 0.3;  // Seconds of each cell not counted.
  std::string peer;     // "grpc": gRPC C++'s echo beside each cell.
};

// Every size x load cell for rdmarpc (one connection), the raw socket pair
// (tcp://) and the peer; prints the table and the no-cliff check. Returns
// non-zero on a failed call or a cliff.
int RunGrid(const Options& options, const GridOptions& grid,
            rpc::Channel& channel, const transport::MemoryRegistration& arena);

// A peer's echo server, in a child process pinned to CPU 1; its clients
// run in child processes pinned to CPU 0.
class PeerEcho {
 public:
  virtual ~PeerEcho() = default;
  struct Result {
    double calls_per_s = NAN;  // NaN if the client failed.
    double p50_us = NAN;       // With one call outstanding only.
  };
  // `k` calls of `size` bytes outstanding on one connection, for `seconds`
  // after `warmup` seconds.
  virtual Result Load(size_t size, int k, double warmup, double seconds) = 0;
};
// "grpc" (tools/benchmarks/grpc_peer); nullptr, having said why, otherwise
// or if it cannot start.
// (tools/benchmarks/grpc_clients.h starts its server, pinned to CPU 1 when
// the sides are pinned).
// With `tls`, over TLS (the same certificate and CA as rdmarpc's).
std::unique_ptr<PeerEcho> StartPeer(const std::string& name,
                                    const Options::TlsFiles& tls);
// Options::tls from the flags.
Options::TlsFiles TlsFromFlags(const rdmarpc::Flags& flags);
// The server's and the client's TLS options for `tls` (nullopt if empty).
std::optional<TlsOptions> ServerTls(const Options::TlsFiles& tls);
std::optional<TlsOptions> ClientTls(const Options::TlsFiles& tls);

// ---- The report (report.cc).

void PrintServerStats(const rpc::Server& server, const Result& r);
// The results table, each ratio, and the targets this run measured.
void PrintReport(const Options& options, const std::string& poll, bool rdma,
                 const std::vector<Result>& results);
void WriteJson(const Options& options, const std::vector<Result>& results);
void Plot(const Options& options, const std::vector<Result>& results);

}  // namespace rdmarpc::bench

#endif  // RDMARPC_TOOLS_BENCHMARKS_BENCH_H_
