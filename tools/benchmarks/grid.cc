// The echo benchmark's size x load grid (--mode grid): calls/s at every
// message size and every number of calls outstanding on one connection,
// for rdmarpc, a raw socket pair and (--peer grpc) gRPC, in interleaved
// repetitions, with the check that raising the load never costs throughput.
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

// `k` echo calls of `size` bytes outstanding on `channel`, each completion
// starting the next on the channel's own thread, for `seconds` after
// `warmup` seconds: calls/s.
double RpcLoad(rpc::Channel& channel,
               const transport::MemoryRegistration& arena, size_t size, int k,
               double warmup, double seconds, uint64_t& errors) {
  struct Load {
    rpc::Channel* channel = nullptr;
    const transport::MemoryRegistration* arena = nullptr;
    size_t size = 0;
    std::atomic<uint64_t> completed{0}, failed{0};
    std::atomic<bool> stop{false};
    int running = 0;  // On the channel's thread only.
    std::promise<void> drained;
    void Issue() {
      channel->Call(kEcho, Payload(*arena, size), {},
                    [this](const Status& status, Buffer response) {
                      if (status.ok() && response.size() == size) {
                        completed.fetch_add(1, std::memory_order_relaxed);
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
  boost::asio::post(channel.executor(), [&] {
    load.running = k;
    for (int i = 0; i < k; ++i) load.Issue();
  });
  std::this_thread::sleep_for(std::chrono::duration<double>(warmup));
  const uint64_t from = load.completed.load();
  const auto start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const uint64_t to = load.completed.load();
  const double elapsed =
      std::chrono::duration<double>(Clock::now() - start).count();
  load.stop = true;
  load.drained.get_future().wait();
  errors += load.failed.load();
  return static_cast<double>(to - from) / elapsed;
}

struct Cell {
  size_t size = 0;
  int load = 0;
  std::vector<double> rpc, raw, peer;  // calls/s, one per repetition
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
    for (int load : grid.loads) cells.push_back({size, load, {}, {}, {}});
  }
  std::unique_ptr<PeerEcho> peer;
  if (!grid.peer.empty()) {
    peer = StartPeer(grid.peer, grid.self);
    if (!peer) return 1;
  }
  uint64_t errors = 0;
  // Repetitions interleave the systems and the cells, so that a slow spell
  // of this shared machine falls on one repetition of each, not on all of
  // one: the medians then agree with each other's conditions.
  for (int rep = 0; rep < grid.reps; ++rep) {
    for (size_t i = 0; i < cells.size(); ++i) {
      Cell& cell = cells[i];
      Progress("grid repetition " + std::to_string(rep + 1), i, cells.size());
      cell.rpc.push_back(RpcLoad(channel, arena, cell.size, cell.load,
                                 grid.warmup, options.seconds, errors));
      if (options.raw && tcp) {
        cell.raw.push_back(
            RawTcpLoad(cell.size, cell.load, grid.warmup, options.seconds));
      }
      if (peer) {
        cell.peer.push_back(
            peer->Load(cell.size, cell.load, grid.warmup, options.seconds));
      }
    }
  }
  Progress("grid", 1, 1);

  const std::string peer_name = grid.peer.empty() ? "peer" : grid.peer;
  std::printf(
      "\ncalls/s over %s, one connection, median of %d interleaved "
      "repetitions, %.1f s per cell\n\n",
      options.uri.c_str(), grid.reps, options.seconds);
  std::printf(
      "| size | outstanding | rdmarpc | raw socket | rdmarpc/raw | %s "
      "| rdmarpc/%s | goal met |\n",
      peer_name.c_str(), peer_name.c_str());
  std::printf("|---|---|---|---|---|---|---|---|\n");
  std::vector<std::string> cliffs, missed;
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
    std::printf("| %s | %d | %s | %s | %s | %s | %s | %s |\n",
                SizeName(cell.size).c_str(), cell.load, Rate(rpc).c_str(),
                Rate(raw).c_str(), Ratio(rpc, raw).c_str(), Rate(other).c_str(),
                Ratio(rpc, other).c_str(),
                !std::isfinite(goal) ? "-"
                : met                ? "yes"
                                     : "no");
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
    }
  }
  std::printf("\n");
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
      const auto list = [](const std::vector<double>& v) {
        std::string text = "[";
        for (size_t j = 0; j < v.size(); ++j) {
          text += (j ? ", " : "") + Rate(v[j]);
        }
        return text + "]";
      };
      out << "  {\"size\": " << cell.size << ", \"outstanding\": " << cell.load
          << ", \"rdmarpc\": " << list(cell.rpc)
          << ", \"raw\": " << list(cell.raw) << ", \"" << peer_name
          << "\": " << list(cell.peer) << "}"
          << (i + 1 < cells.size() ? ",\n" : "\n");
    }
    out << "]\n";
  }
  return errors == 0 && cliffs.empty() ? 0 : 1;
}

}  // namespace rdmarpc::bench
