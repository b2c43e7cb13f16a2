// The echo benchmark's size x load grid (--mode grid): calls/s at every
// message size and every number of calls outstanding on one connection,
// for rdmarpc, a raw socket pair and (--peer grpc) gRPC, in interleaved
// repetitions, with the check that raising the load never costs throughput.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <future>
#include <thread>

#include "tools/benchmarks/bench.h"

namespace rdmarpc::bench {
namespace {

using namespace std::chrono_literals;

// This process's CPU time, all threads, user and system. Time the
// hypervisor stole from this VM is not in it (the kernel's paravirtual
// steal clock keeps it apart); a vCPU that runs slower while the host is
// busy still shows, so it swings with the host's load too, if less. Beside
// it, counts no host load moves: page faults, and the times a thread went
// to sleep (voluntary context switches: each wait for a socket or a lock).
struct Usage {
  double cpu_s = 0;
  double faults = 0;
  double sleeps = 0;
};
Usage ProcessUsage() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6;
  };
  return {seconds(usage.ru_utime) + seconds(usage.ru_stime),
          static_cast<double>(usage.ru_minflt + usage.ru_majflt),
          static_cast<double>(usage.ru_nvcsw)};
}

// The machine's CPU time so far, and the part of it the hypervisor stole
// (/proc/stat's first line), in clock ticks.
struct CpuTicks {
  double total = 0, steal = 0;
};
CpuTicks MachineTicks() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  in >> cpu;
  CpuTicks ticks;
  for (int field = 0; field < 8; ++field) {
    double value = 0;
    if (!(in >> value)) break;
    ticks.total += value;
    if (field == 7) ticks.steal = value;
  }
  return ticks;
}

struct LoadResult {
  double calls_per_s = NAN;
  double cpu_us_per_call = NAN;  // Both sides: this process's CPU time.
  double faults_per_call = NAN;  // Both sides: page faults.
  double sleeps_per_call = NAN;  // Both sides: voluntary context switches.
  double p50_us = NAN;           // The median round trip, when k is 1.
};

// `k` echo calls of `size` bytes outstanding on `channel`, each completion
// starting the next on the channel's own thread, for `seconds` after
// `warmup` seconds: calls/s.
LoadResult RpcLoad(rpc::Channel& channel,
                   const transport::MemoryRegistration& arena, size_t size,
                   int k, double warmup, double seconds, uint64_t& errors) {
  struct Load {
    rpc::Channel* channel = nullptr;
    const transport::MemoryRegistration* arena = nullptr;
    size_t size = 0;
    std::atomic<uint64_t> completed{0}, failed{0};
    std::atomic<bool> stop{false};
    int running = 0;  // On the channel's thread only.
    std::promise<void> drained;
    // One call outstanding: its start, and the round trips once warm (the
    // channel's thread only; read once drained).
    bool one = false;
    std::atomic<bool> recording{false};
    Clock::time_point issued;
    std::vector<double> rtt_us;
    void Issue() {
      if (one) issued = Clock::now();
      channel->Call(
          kEcho, Payload(*arena, size), {},
          [this](const Status& status, Buffer response) {
            if (status.ok() && response.size() == size) {
              completed.fetch_add(1, std::memory_order_relaxed);
              if (recording.load(std::memory_order_relaxed)) {
                rtt_us.push_back(std::chrono::duration<double, std::micro>(
                                     Clock::now() - issued)
                                     .count());
              }
            } else {
              failed.fetch_add(1, std::memory_order_relaxed);
            }
            if (!stop.load(std::memory_order_relaxed)) {
              return Issue();
            }
            if (--running == 0) drained.set_value();
          });
    }
  } load;
  load.channel = &channel;
  load.arena = &arena;
  load.size = size;
  load.one = k == 1;
  boost::asio::post(channel.executor(), [&] {
    load.running = k;
    for (int i = 0; i < k; ++i) load.Issue();
  });
  std::this_thread::sleep_for(std::chrono::duration<double>(warmup));
  const uint64_t from = load.completed.load();
  const auto start = Clock::now();
  const Usage usage_from = ProcessUsage();
  load.recording = load.one;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  load.recording = false;
  const uint64_t to = load.completed.load();
  const Usage usage_to = ProcessUsage();
  const double elapsed =
      std::chrono::duration<double>(Clock::now() - start).count();
  load.stop = true;
  load.drained.get_future().wait();
  errors += load.failed.load();
  const double calls = static_cast<double>(to - from);
  const auto per_call = [&](double amount) {
    return calls > 0 ? amount / calls : NAN;
  };
  return {calls / elapsed, per_call((usage_to.cpu_s - usage_from.cpu_s) * 1e6),
          per_call(usage_to.faults - usage_from.faults),
          per_call(usage_to.sleeps - usage_from.sleeps),
          load.rtt_us.empty() ? NAN : Median(load.rtt_us)};
}

struct Cell {
  size_t size = 0;
  int load = 0;
  std::vector<double> rpc, raw, peer;          // calls/s, one per repetition
  std::vector<double> rpc_cpu;                 // rdmarpc's CPU us per call
  std::vector<double> rpc_faults, rpc_sleeps;  // Per call, both sides.
  std::vector<double> rpc_p50, peer_p50;       // One outstanding: round trips.
};

std::string Rate(double calls_per_s) {
  if (!std::isfinite(calls_per_s)) return "-";
  char text[32];
  std::snprintf(text, sizeof(text), "%.0f", calls_per_s);
  return text;
}

std::string Ratio(double a, double b) {
  if (!std::isfinite(a) || !std::isfinite(b) || b <= 0) return "-";
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", a / b);
  return text;
}

}  // namespace

int RunGrid(const Options& options, const GridOptions& grid,
            rpc::Channel& channel, const transport::MemoryRegistration& arena) {
  const bool tcp = options.uri.rfind("tcp://", 0) == 0;
  std::vector<Cell> cells;
  for (size_t size : options.sizes) {
    for (int load : grid.loads) {
      Cell cell;
      cell.size = size;
      cell.load = load;
      cells.push_back(std::move(cell));
    }
  }
  std::unique_ptr<PeerEcho> peer;
  if (!grid.peer.empty()) {
    peer = StartPeer(grid.peer, options.tls);
    if (!peer) return 1;
  }
  uint64_t errors = 0;
  const CpuTicks ticks_before = MachineTicks();
  // Repetitions interleave the systems and the cells, so that a slow spell
  // of this shared machine falls on one repetition of each, not on all of
  // one: the medians then agree with each other's conditions. Every other
  // repetition runs the cells in reverse, so that a drift over a repetition
  // (the host's load, the process's memory) does not always favour the
  // lower loads, which run first.
  for (int rep = 0; rep < grid.reps; ++rep) {
    for (size_t step = 0; step < cells.size(); ++step) {
      const size_t i = rep % 2 == 0 ? step : cells.size() - 1 - step;
      Cell& cell = cells[i];
      Progress("grid repetition " + std::to_string(rep + 1), step,
               cells.size());
      const LoadResult rpc = RpcLoad(channel, arena, cell.size, cell.load,
                                     grid.warmup, options.seconds, errors);
      cell.rpc.push_back(rpc.calls_per_s);
      cell.rpc_cpu.push_back(rpc.cpu_us_per_call);
      cell.rpc_faults.push_back(rpc.faults_per_call);
      cell.rpc_sleeps.push_back(rpc.sleeps_per_call);
      cell.rpc_p50.push_back(rpc.p50_us);
      if (options.raw && tcp) {
        cell.raw.push_back(
            RawTcpLoad(cell.size, cell.load, grid.warmup, options.seconds));
      }
      if (peer) {
        const PeerEcho::Result other =
            peer->Load(cell.size, cell.load, grid.warmup, options.seconds);
        cell.peer.push_back(other.calls_per_s);
        cell.peer_p50.push_back(other.p50_us);
      }
    }
  }
  Progress("grid", 1, 1);
  const CpuTicks ticks_after = MachineTicks();
  const double stolen = ticks_after.total > ticks_before.total
                            ? (ticks_after.steal - ticks_before.steal) /
                                  (ticks_after.total - ticks_before.total)
                            : 0;

  const std::string peer_name = grid.peer.empty() ? "peer" : grid.peer;
  std::printf(
      "\ncalls/s over %s, one connection, median of %d interleaved "
      "repetitions, %.1f s per cell\n\n",
      options.uri.c_str(), grid.reps, options.seconds);
  std::printf(
      "| size | outstanding | rdmarpc | raw socket | rdmarpc/raw | %s "
      "| rdmarpc/%s | goal met | rdmarpc CPU us/call | faults/call | "
      "sleeps/call |\n",
      peer_name.c_str(), peer_name.c_str());
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<std::string> cliffs, cpu_cliffs, missed;
  for (size_t i = 0; i < cells.size(); ++i) {
    const Cell& cell = cells[i];
    const double rpc = Median(cell.rpc), raw = Median(cell.raw),
                 other = Median(cell.peer);
    // The issue's goal: at least the lower of 1.5x the peer's calls/s and
    // 0.9x the raw socket's (whichever of them was measured).
    double goal = NAN;
    if (std::isfinite(raw)) goal = 0.9 * raw;
    if (std::isfinite(other)) {
      goal = std::isfinite(goal) ? std::min(goal, 1.5 * other) : 1.5 * other;
    }
    const bool met = !std::isfinite(goal) || rpc >= goal;
    const std::string where =
        SizeName(cell.size) + " x " + std::to_string(cell.load);
    if (!met) missed.push_back(where);
    const double cpu = Median(cell.rpc_cpu);
    std::printf(
        "| %s | %d | %s | %s | %s | %s | %s | %s | %.2f | %.2f | %.2f |\n",
        SizeName(cell.size).c_str(), cell.load, Rate(rpc).c_str(),
        Rate(raw).c_str(), Ratio(rpc, raw).c_str(), Rate(other).c_str(),
        Ratio(rpc, other).c_str(),
        !std::isfinite(goal) ? "-"
        : met                ? "yes"
                             : "no",
        cpu, Median(cell.rpc_faults), Median(cell.rpc_sleeps));
    // A cliff: more load, more than 5% fewer calls/s than the cell to the
    // left (the same size, the next lower load).
    if (i > 0 && cells[i - 1].size == cell.size) {
      const double left = Median(cells[i - 1].rpc);
      if (rpc < 0.95 * left) {
        char text[160];
        std::snprintf(text, sizeof(text),
                      "%s: %d outstanding %.0f calls/s, %.0f%% below %d's",
                      SizeName(cell.size).c_str(), cell.load, rpc,
                      100 * (1 - rpc / left), cells[i - 1].load);
        cliffs.push_back(text);
      }
      // The same in CPU per call: more load must not make each call dearer.
      const double left_cpu = Median(cells[i - 1].rpc_cpu);
      if (cpu > 1.05 * left_cpu) {
        char text[160];
        std::snprintf(text, sizeof(text),
                      "%s: %d outstanding %.2f us/call, %.0f%% above %d's",
                      SizeName(cell.size).c_str(), cell.load, cpu,
                      100 * (cpu / left_cpu - 1), cells[i - 1].load);
        cpu_cliffs.push_back(text);
      }
    }
  }
  std::printf("\n");
  // One call at a time: the median of each repetition's median round trip.
  if (!grid.peer.empty()) {
    std::printf(
        "| size | rdmarpc p50 us | %s p50 us | rdmarpc/%s | p50 <= %s's |\n",
        peer_name.c_str(), peer_name.c_str(), peer_name.c_str());
    std::printf("|---|---|---|---|---|\n");
    for (const Cell& cell : cells) {
      if (cell.load != 1) continue;
      const auto finite = [](std::vector<double> v) {
        std::erase_if(v, [](double x) { return !std::isfinite(x); });
        return Median(std::move(v));
      };
      const double ours = finite(cell.rpc_p50), theirs = finite(cell.peer_p50);
      if (!(ours <= theirs)) missed.push_back(SizeName(cell.size) + " p50");
      std::printf("| %s | %.1f | %.1f | %s | %s |\n",
                  SizeName(cell.size).c_str(), ours, theirs,
                  Ratio(ours, theirs).c_str(), ours <= theirs ? "yes" : "no");
    }
    std::printf("\n");
  }
  if (errors > 0) {
    std::printf("errors: %llu calls failed\n",
                static_cast<unsigned long long>(errors));
  }
  for (const std::string& cliff : cliffs) {
    std::printf("cliff: %s\n", cliff.c_str());
  }
  std::printf(
      "GRIDCHECK no cliff (each cell within 5%% of the one to its "
      "left) %s\n",
      cliffs.empty() ? "PASSED" : "FAILED");
  for (const std::string& cliff : cpu_cliffs) {
    std::printf("CPU cliff: %s\n", cliff.c_str());
  }
  std::printf(
      "CPUCHECK no CPU cliff (CPU per call never more than 5%% above the "
      "cell to its left) %s\n",
      cpu_cliffs.empty() ? "PASSED" : "FAILED");
  // On a shared host, calls/s swing from one repetition to the next with
  // the time the hypervisor takes: say how much it took.
  std::printf(
      "steal: the hypervisor took %.0f%% of this machine's CPU time during "
      "the grid\n",
      100 * stolen);
  if (!missed.empty()) {
    std::string list;
    for (const std::string& where : missed) list += " " + where;
    std::printf("goal missed at:%s\n", list.c_str());
  }
  if (!options.json.empty()) {
    std::ofstream out(options.json);
    out << "[\n";
    for (size_t i = 0; i < cells.size(); ++i) {
      const Cell& cell = cells[i];
      const auto list = [](const std::vector<double>& v,
                           const char* format = "%.0f") {
        std::string text = "[";
        for (size_t j = 0; j < v.size(); ++j) {
          char value[32] = "null";
          if (std::isfinite(v[j])) {
            std::snprintf(value, sizeof(value), format, v[j]);
          }
          text += (j ? ", " : "") + std::string(value);
        }
        return text + "]";
      };
      out << "  {\"size\": " << cell.size << ", \"outstanding\": " << cell.load
          << ", \"rdmarpc\": " << list(cell.rpc)
          << ", \"rdmarpc_cpu_us\": " << list(cell.rpc_cpu, "%.2f")
          << ", \"rdmarpc_faults\": " << list(cell.rpc_faults, "%.2f")
          << ", \"rdmarpc_sleeps\": " << list(cell.rpc_sleeps, "%.2f")
          << ", \"rdmarpc_p50_us\": " << list(cell.rpc_p50, "%.1f") << ", \""
          << peer_name << "_p50_us\": " << list(cell.peer_p50, "%.1f")
          << ", \"raw\": " << list(cell.raw) << ", \"" << peer_name
          << "\": " << list(cell.peer) << "}"
          << (i + 1 < cells.size() ? ",\n" : "\n");
    }
    out << "]\n";
  }
  return errors == 0 && cliffs.empty() ? 0 : 1;
}

}  // namespace rdmarpc::bench
