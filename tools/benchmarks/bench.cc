// The rdmarpc echo benchmark, measured against the raw link in the same run.
//
//   bench --mode latency|throughput|bandwidth|stream|grid [--uri URI]
//         [--sizes 16,4096]
//         [--iters N] [--warmup N] [--outstanding K] [--connections C]
//         [--seconds S] [--poll event|busy|hybrid] [--json FILE]
//         [--plot FILE.png] [--raw 0] [--pin 0] [--metrics 0] [--stats 1]
//         [--by-name 1] [--handler-threads N] [--callback-threads N]
//         [--window BYTES]
//   bench --serve URI [--poll event|busy|hybrid]
//         a standalone server for another machine's bench
//   bench --cpu-window N --uri URI [--outstanding K] [--size B]
//         [--path generic|typed] [--extra-per-call N]
//         warm up, then N echo calls with K outstanding inside a measurement
//         window: callgrind instrumentation on in both processes (the server
//         is told by a Window call) and marker syscalls for strace
//         (tools/bench-cpu runs both sides under valgrind or strace;
//         cpu_window.cc)
//
// A URI whose port is 0 (the default, tcp://127.0.0.1:0) starts a server in
// this process; any other URI targets a running `bench --serve`. The raw
// baseline runs on the same link: a TCP ping-pong (latency) or one-way
// stream (bandwidth) between two threads for tcp://, the raw-verbs SEND/RECV
// ping-pong and RDMA WRITE bandwidth (verbs_baseline) for rdma://. With
// --poll busy|hybrid the raw TCP ping-pong polls its non-blocking socket as
// rdmarpc's loops then do (the raw verbs ping-pong always polls). TCP event-
// mode latency also measures two floors: the same ping-pong as a plain epoll
// loop without Asio (what any event-driven program must do: wait, then read)
// and as an Asio loop (the floor for a stack on Asio). Together they split the
// ratio into the kernel's event path, Asio's share and rdmarpc's. TCP latency
// (except busy mode) and bandwidth and event-mode RDMA bandwidth alternate
// rounds of RPC and raw, so that the shared machine's slow spells fall on
// both alike; elsewhere the raw baseline runs first, before any RPC loop can
// spin.
//
// Modes:
//   latency     one call outstanding, closed loop: p50, p99, p999, max
//   throughput  K calls outstanding on each of C connections (each with its
//               own client event loop) for S seconds: calls/s
//   bandwidth   sizes up to 64 MiB sent from registered memory to a method
//               that answers with nothing, 2 outstanding: GB/s one way
//   grid        every size (16 B to 4 MiB by default) x every load (--loads
//               1,8,32,128 calls outstanding on one connection), --reps 3
//               interleaved repetitions of --seconds 1 each: median calls/s
//               for rdmarpc, the raw socket pair (tcp://) and, with --peer
//               grpc, gRPC C++ (grid.cc); fails if more load ever lowers
//               rdmarpc's calls/s by more than 5%
//   stream      one client-streaming call of N messages (1 MiB by default)
//               from registered memory, each written as soon as flow
//               control lets it: GB/s one way, against the raw WRITE stream
//               (rdma://) or the raw one-way socket stream (tcp://)
//
// Calls name their method by id (include/rdmarpc/method_ref.h), as generated
// stubs do;
// --by-name 1 makes the latency loop send the service and method names
// instead, to measure what the longer request costs. --handler-threads N
// runs the in-process server's handlers on a pool of N threads instead of
// its worker (ServerOptions::handler_threads); --callback-threads N runs
// the channel's callbacks on a pool of N (ChannelOptions::callback_threads).
// --window BYTES sets the channel's request window
// (ChannelOptions::max_request_bytes_in_flight; 0 turns it off).
#include "tools/benchmarks/bench.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <future>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/flags.h"
#include "base/log.h"
#include "examples/echo/echo_service.h"
#include "tools/benchmarks/poll_flag.h"
#include "transport/uri.h"

namespace rdmarpc::bench {
namespace {

int Serve(const std::string& uri, transport::PollMode poll,
          const Options::TlsFiles& tls) {
  rpc::ServerOptions server_options;
  server_options.workers = 1;
  server_options.transport.tls = ServerTls(tls);
  server_options.transport.poll_mode = poll;
  server_options.transport.max_payload_size = 1ull << 30;
  server_options.transport.max_queued_bytes = 1ull << 30;
  server_options.max_response_size = 1ull << 30;
  rpc::Server server(server_options);
  BenchService service;
  server.RegisterService(&service);
  examples::EchoImpl echo;  // The typed path of tools/bench-cpu.
  server.RegisterService(&echo);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  auto bound = server.Listen(uri);
  if (!bound.ok()) {
    std::fprintf(stderr, "bench: %s\n", bound.status().ToString().c_str());
    return 1;
  }
  std::printf("bench server listening on %s\n", bound->c_str());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&signals, &signal);
  return 0;
}

bool IsRdma(const Options& options) {
  return options.uri.rfind("rdma://", 0) == 0;
}
bool IsBulk(const Options& options) {
  return options.mode == "pull" || options.mode == "push";
}

bool IsBandwidth(const Options& options) {
  return options.mode == "bandwidth" || options.mode == "stream" ||
         IsBulk(options);
}
// Where the RPC side's loops sleep between calls, rounds alternate RPC and
// raw, so that a slow spell of this shared machine falls on both alike: TCP
// latency and bandwidth, and RDMA bandwidth in event mode.
bool AlternateBandwidth(const Options& options) {
  return IsBandwidth(options) && options.raw &&
         (!IsRdma(options) || options.poll == transport::PollMode::kEvent);
}

// The measuring run's options from the command line; false (after saying
// why) on a bad one.
bool ParseOptions(const rdmarpc::Flags& flags, Options* options,
                  GridOptions* grid_options) {
  options->uri = flags.Get("uri", options->uri);
  options->mode = flags.Get("mode", options->mode);
  const bool stream = options->mode == "stream";
  const bool bandwidth = IsBandwidth(*options);
  const bool grid = options->mode == "grid";
  std::string sizes =
      flags.Get("sizes", stream      ? "1048576"
                         : bandwidth ? "65536,1048576,4194304,67108864"
                         : grid      ? "16,4096,65536,1048576,4194304"
                                     : "16,4096,65536");
  for (std::stringstream in(sizes); std::getline(in, sizes, ',');) {
    options->sizes.push_back(std::stoull(sizes));
  }
  options->iters =
      static_cast<int>(flags.GetInt("iters", bandwidth ? 32 : 20000));
  options->warmup =
      static_cast<int>(flags.GetInt("warmup", options->iters / 10));
  options->outstanding = static_cast<int>(flags.GetInt("outstanding", 32));
  options->connections = static_cast<int>(flags.GetInt("connections", 1));
  options->seconds = std::stod(flags.Get("seconds", grid ? "1" : "3"));
  if (std::string loads = flags.Get("loads", ""); !loads.empty()) {
    grid_options->loads.clear();
    for (std::stringstream in(loads); std::getline(in, loads, ',');) {
      grid_options->loads.push_back(std::stoi(loads));
    }
  }
  grid_options->reps =
      static_cast<int>(flags.GetInt("reps", grid_options->reps));
  grid_options->peer = flags.Get("peer", "");
  const std::string poll = flags.Get("poll", "event");
  options->poll = PollModeOrExit(poll, "bench");
  options->raw = flags.GetInt("raw", 1) != 0;
  options->pooled_grants = flags.GetInt("pooled-grants", 1) != 0;
  options->by_name = flags.GetInt("by-name", 0) != 0;
  options->lend = static_cast<uint64_t>(flags.GetInt("lend", 0));
  options->tls = TlsFromFlags(flags);
  options->json = flags.Get("json", "");
  options->plot = flags.Get("plot", "");
  options->stats = flags.GetInt("stats", 0) != 0;
  options->metrics = flags.GetInt("metrics", 1) != 0;
  options->handler_threads =
      static_cast<int>(flags.GetInt("handler-threads", 0));
  options->callback_threads =
      static_cast<int>(flags.GetInt("callback-threads", 0));
  options->window = static_cast<uint64_t>(flags.GetInt(
      "window",
      static_cast<long long>(tunables::kDefaultMaxRequestBytesInFlight)));
  pin_sides = flags.GetInt(
                  "pin", std::thread::hardware_concurrency() >= 2 ? 1 : 0) != 0;
  if (options->mode != "latency" && options->mode != "throughput" &&
      !bandwidth && !grid) {
    std::fprintf(
        stderr,
        "bench: --mode latency|throughput|bandwidth|stream|pull|push|grid\n");
    return false;
  }
  return true;
}

// The raw baselines measured before any RPC event loop runs (a busy-polling
// loop left spinning would take a core from them), one per size: NaN where
// not measured here (or measured in alternating rounds later).
std::vector<Result> RawBaselines(const Options& options, const char* self) {
  const bool rdma = IsRdma(options);
  const bool bandwidth = IsBandwidth(options);
  std::vector<Result> raw(options.sizes.size());
  for (size_t i = 0; i < options.sizes.size(); ++i) {
    const size_t size = options.sizes[i];
    Result& r = raw[i];
    r.raw_p50 = r.raw_p99 = r.raw_gbps = NAN;
    if (!options.raw) continue;
    if (options.mode == "latency" && rdma &&
        options.poll != transport::PollMode::kHybrid) {
      r.raw_p50 = RawVerbs(self, HostOf(options.uri), "pingpong", size,
                           options.iters, "p50 ");
    } else if (options.mode == "latency" &&
               options.poll == transport::PollMode::kBusy) {
      const auto base = RawTcpPingPong(RawTcpLoop::kBusy, size, options.warmup,
                                       options.iters);
      r.raw_p50 = Percentile(base, 0.5);
      r.raw_p99 = Percentile(base, 0.99);
    } else if (bandwidth && !AlternateBandwidth(options)) {
      r.raw_gbps = RawVerbs(self, HostOf(options.uri),
                            options.mode == "pull" ? "read-bw" : "write-bw",
                            size, options.iters, "outstanding: ");
    }
  }
  return raw;
}

// A server of its own for the run (`options.uri`'s port is 0), serving
// `service`; `options.uri` becomes the address it listens on.
StatusOr<std::unique_ptr<rpc::Server>> StartServer(Options& options,
                                                   BenchService& service) {
  std::unique_ptr<rpc::Server> server;
  rpc::ServerOptions server_options;
  server_options.workers = 1;
  server_options.handler_threads = options.handler_threads;
  server_options.enable_metrics = options.metrics;
  server_options.transport.poll_mode = options.poll;
  server_options.transport.rdma_pooled_grants = options.pooled_grants;
  server_options.transport.max_payload_size = 1ull << 30;
  // 128 responses of 4 MiB in flight (the grid) fit its send queue.
  server_options.transport.max_queued_bytes = 1ull << 30;
  server_options.max_response_size = 1ull << 30;
  server_options.transport.tls = ServerTls(options.tls);
  server = std::make_unique<rpc::Server>(server_options);
  server->RegisterService(&service);
  auto bound = server->Listen(options.uri);
  if (!bound.ok()) return bound.status();
  options.uri = *bound;
  return server;
}

// Latency in rounds that alternate RPC and raw ping-pongs (over TCP in event
// mode also the epoll and bare-Asio floors), so that a slow spell of this
// shared machine falls on all alike. A hybrid loop stops spinning between
// rounds; a busy one would not, so busy mode measured its raw baseline
// first. In hybrid mode the raw TCP ping-pong polls too; the raw verbs
// ping-pong always does.
void AlternatingLatency(const Options& options, rpc::Channel& channel,
                        const transport::MemoryRegistration& arena, size_t size,
                        const char* self, Result& r) {
  const bool rdma = IsRdma(options);
  constexpr int kRounds = 10;
  std::vector<double> raw_samples, epoll_samples, asio_samples;
  std::vector<double> raw_verbs_p50s;
  std::vector<double> round_ratios, epoll_ratios, asio_ratios;
  for (int round = 0; round < kRounds; ++round) {
    const int n = RoundShare(options.iters, kRounds, round);
    const auto rpc =
        RpcLatency(channel, arena, size, round == 0 ? options.warmup : 0, n,
                   options.by_name, r.errors);
    r.samples.insert(r.samples.end(), rpc.begin(), rpc.end());
    if (options.raw && rdma) {
      const double base =
          RawVerbs(self, HostOf(options.uri), "pingpong", size, n, "p50 ");
      if (!rpc.empty() && std::isfinite(base)) {
        raw_verbs_p50s.push_back(base);
        round_ratios.push_back(Median(rpc) / base);
      }
    } else if (options.raw) {
      const int warm = round == 0 ? options.warmup : 0;
      const auto base =
          options.poll == transport::PollMode::kHybrid
              ? RawTcpPingPong(RawTcpLoop::kBusy, size, warm, n)
              : RawTcpPingPong(RawTcpLoop::kBlocking, size, warm, n);
      raw_samples.insert(raw_samples.end(), base.begin(), base.end());
      if (!rpc.empty() && !base.empty()) {
        round_ratios.push_back(Median(rpc) / Median(base));
      }
      if (options.poll != transport::PollMode::kEvent) continue;
      const auto epoll = RawTcpPingPong(RawTcpLoop::kEpoll, size, warm, n);
      epoll_samples.insert(epoll_samples.end(), epoll.begin(), epoll.end());
      const auto floor = AsioTcpPingPong(size, warm, n);
      asio_samples.insert(asio_samples.end(), floor.begin(), floor.end());
      if (!base.empty() && !epoll.empty() && !floor.empty()) {
        epoll_ratios.push_back(Median(epoll) / Median(base));
        asio_ratios.push_back(Median(floor) / Median(base));
      }
    }
  }
  std::sort(r.samples.begin(), r.samples.end());
  std::sort(raw_samples.begin(), raw_samples.end());
  std::sort(epoll_samples.begin(), epoll_samples.end());
  std::sort(asio_samples.begin(), asio_samples.end());
  if (options.raw && rdma) {
    r.raw_p50 = Median(raw_verbs_p50s);  // NaN if none ran.
  } else if (options.raw) {
    r.raw_p50 = Percentile(raw_samples, 0.5);
    r.raw_p99 = Percentile(raw_samples, 0.99);
    if (!epoll_samples.empty()) {
      r.epoll_p50 = Percentile(epoll_samples, 0.5);
      r.asio_p50 = Percentile(asio_samples, 0.5);
    }
    if (!epoll_ratios.empty()) {
      r.epoll_round_ratio = Median(epoll_ratios);
      r.asio_round_ratio = Median(asio_ratios);
    }
  }
  if (!round_ratios.empty()) {
    std::sort(round_ratios.begin(), round_ratios.end());
    r.round_ratio_median = Percentile(round_ratios, 0.5);
    r.round_ratio_min = round_ratios.front();
    r.round_ratio_max = round_ratios.back();
  }
}

// Bandwidth in rounds that alternate RPC and the raw stream or WRITEs, as
// for latency.
void AlternatingBandwidth(const Options& options, rpc::Channel& channel,
                          const transport::MemoryRegistration& arena,
                          size_t size, const char* self, Result& r) {
  const bool rdma = IsRdma(options);
  const bool stream = options.mode == "stream";
  const bool pull = options.mode == "pull";
  const auto raw_gbps = [&](int n) {
    return rdma ? RawVerbs(self, HostOf(options.uri),
                           pull ? "read-bw" : "write-bw", size, n,
                           "outstanding: ")
                : RawTcpBandwidth(size, n, /*ack_each=*/!stream);
  };
  const auto rpc_gbps = [&](int n) {
    if (IsBulk(options)) {
      return RpcBulkBandwidth(channel, arena, size, n, pull, r.errors);
    }
    return stream ? RpcStreamBandwidth(channel, arena, size, n, r.errors)
                  : RpcBandwidth(channel, arena, size, n, r.errors);
  };
  constexpr int kRounds = 4;
  double rpc_seconds = 0, raw_seconds = 0;
  for (int round = 0; round < kRounds; ++round) {
    const int n = RoundShare(options.iters, kRounds, round);
    if (n == 0) continue;
    const double bytes = static_cast<double>(size) * n;
    raw_seconds += bytes / 1e9 / raw_gbps(n);
    rpc_seconds += bytes / 1e9 / rpc_gbps(n);
  }
  const double bytes = static_cast<double>(size) * options.iters;
  r.gbps = bytes / rpc_seconds / 1e9;
  r.raw_gbps = bytes / raw_seconds / 1e9;
}

// One size's row.
Result Measure(const Options& options, rpc::Channel& channel,
               const transport::MemoryRegistration& arena, size_t size,
               const Result& raw, const char* self) {
  const bool rdma = IsRdma(options);
  const bool stream = options.mode == "stream";
  Result r;
  r.mode = options.mode;
  r.size = size;
  r.raw_p50 = raw.raw_p50;
  r.raw_p99 = raw.raw_p99;
  r.raw_gbps = raw.raw_gbps;
  if (options.mode == "latency" &&
      (rdma ? options.poll == transport::PollMode::kHybrid
            : options.poll != transport::PollMode::kBusy)) {
    AlternatingLatency(options, channel, arena, size, self, r);
  } else if (options.mode == "latency") {
    r.samples = RpcLatency(channel, arena, size, options.warmup, options.iters,
                           options.by_name, r.errors);
  }
  if (options.mode == "latency") {
    r.p50 = Percentile(r.samples, 0.5);
    r.p99 = Percentile(r.samples, 0.99);
    r.p999 = Percentile(r.samples, 0.999);
    r.max = r.samples.empty() ? 0 : r.samples.back();
  } else if (options.mode == "throughput") {
    const BulkCosts before = ReadBulkCosts();
    uint64_t calls = 0;
    r.calls_per_s = RpcThroughput(options, arena, size, r.errors, &calls);
    if (options.lend > 0 && calls > 0) {
      r.local_op_waits_per_call =
          static_cast<double>(ReadBulkCosts().local_op_waits -
                              before.local_op_waits) /
          static_cast<double>(calls);
    }
  } else if (AlternateBandwidth(options)) {
    AlternatingBandwidth(options, channel, arena, size, self, r);
  } else if (IsBulk(options)) {
    r.gbps = RpcBulkBandwidth(channel, arena, size, options.iters,
                              options.mode == "pull", r.errors);
  } else {
    r.gbps =
        stream
            ? RpcStreamBandwidth(channel, arena, size, options.iters, r.errors)
            : RpcBandwidth(channel, arena, size, options.iters, r.errors);
  }
  return r;
}

int Run(int argc, char** argv) {
  const rdmarpc::Flags flags(argc, argv);
  if (std::getenv("RDMARPC_LOG") == nullptr) {
    Log().set_level(spdlog::level::warn);
  }
  if (flags.Get("serve", "") != "") {
    return Serve(flags.Get("serve", ""),
                 PollModeOrExit(flags.Get("poll", "event"), "bench"),
                 TlsFromFlags(flags));
  }
  if (flags.Get("cpu-window", "") != "") return CpuWindow(flags);
  Options options;
  GridOptions grid_options;
  if (!ParseOptions(flags, &options, &grid_options)) return 64;
  const std::vector<Result> raw = RawBaselines(options, argv[0]);
  const bool rdma = IsRdma(options);
  auto parsed = transport::ParseUri(options.uri);
  if (!parsed.ok()) {
    std::fprintf(stderr, "bench: %s\n", parsed.status().ToString().c_str());
    return 64;
  }
  BenchService service;
  std::unique_ptr<rpc::Server> server;  // Our own when the port is 0.
  if (parsed->port == 0) {
    auto started = StartServer(options, service);
    if (!started.ok()) {
      std::fprintf(stderr, "bench: %s\n", started.status().ToString().c_str());
      return 1;
    }
    server = std::move(*started);
  }
  const size_t largest =
      *std::max_element(options.sizes.begin(), options.sizes.end());
  auto arena = Arena(largest);
  rpc::Channel channel(options.uri, ChannelOptionsFor(options));
  if (pin_sides) {  // The channel's loop on CPU 0, the server's on CPU 1.
    std::promise<void> pinned;
    boost::asio::post(channel.executor(), [&] {
      PinTo(0);
      pinned.set_value();
    });
    pinned.get_future().wait();
    RunCalls(channel, 1, 1, kPin, [] { return Buffer(); });
  }
  if (options.mode == "grid") {
    return RunGrid(options, grid_options, channel, *arena);
  }
  std::vector<Result> results;
  uint64_t total_errors = 0;
  for (size_t i = 0; i < options.sizes.size(); ++i) {
    Result r =
        Measure(options, channel, *arena, options.sizes[i], raw[i], argv[0]);
    total_errors += r.errors;
    if (options.stats && server) PrintServerStats(*server, r);
    results.push_back(std::move(r));
  }
  PrintReport(options, flags.Get("poll", "event"), rdma, results);
  if (total_errors > 0)
    std::printf("errors: %llu calls failed\n",
                static_cast<unsigned long long>(total_errors));
  if (!options.json.empty()) WriteJson(options, results);
  if (!options.plot.empty()) Plot(options, results);
  return total_errors == 0 ? 0 : 1;
}

}  // namespace
}  // namespace rdmarpc::bench

int main(int argc, char** argv) { return rdmarpc::bench::Run(argc, argv); }
