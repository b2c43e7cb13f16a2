// The scale benchmark (tools/bench --mode scale): one server in this
// process, N connections to it from P client processes, and K calls of B
// bytes outstanding in all, spread over the N connections. One row for each
// N and each K (--connections and --outstanding take lists). For each it
// reports:
//   - calls/s, and p50/p99/p999 call latency over every client;
//   - the server's CPU time per call (this process does nothing else), and
//     its inverse, the calls/s one server core would carry;
//   - per connection, what the server holds for it once every connection is
//     open and idle: pinned bytes (the kernel's VmPin), file descriptors,
//     threads, and queue pairs (`rdma resource show qp` for this pid).
//
//   scale --uri rdma://IP:0 [--connections 8,64,256,1000] [--processes 4]
//         [--outstanding 256] [--size 16] [--seconds 5] [--json FILE]
//         [--plot FILE.png] [--check 1] [--workers N]
//         [--poll event|busy|hybrid] [--peer grpc] [--raw 0|1]
//         [--keepalive-ms MS]
//   (--workers and --poll are the server's: its loops, and how they poll.
//   --peer grpc, over tcp:// only, puts the same load on gRPC C++'s echo
//   after each row, from as many processes, one channel per connection,
//   and prints its calls/s and rdmarpc's ratio to it. Over rdma://, after
//   each row the same N and load run on raw verbs (verbs_scale, this
//   binary's sibling; --raw 0 skips it), printed beside with the ratios.
//   --plot draws calls/s and p99 against the calls outstanding, one line
//   per N: many clients, one server, under a rising offered load.)
//
// The server's max_connections is N: one connection more must be refused
// (RESOURCE_EXHAUSTED, the last column). It exits non-zero when a call or a
// connection failed, or that one did not; with --check 1 also
// when, at the largest N, the server holds more per connection than an idle
// connection may cost (64 KiB pinned, 0.05 descriptors, no thread, one QP):
// tools/test runs it so, with 1,000 connections, in the Soft-RoCE VM.
//
// The clients are this binary again (`scale --client URI ...`): each opens
// its share of the connections, makes one call on each, says "ready", and
// on "go" keeps its share of the load going for --seconds, then prints its
// calls, errors and latency histogram.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/flags.h"
#include "base/log.h"
#include "base/process_stats.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/server.h"
#include "rdmarpc/service.h"
#include "tools/benchmarks/grpc_clients.h"
#include "tools/benchmarks/poll_flag.h"
#include "tools/benchmarks/raw_scale.h"
#include "tools/benchmarks/spawn.h"
#include "transport/rdma/completion_group.h"

namespace rdmarpc::bench {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr rpc::MethodRef kEcho("rdmarpc.bench.Scale", "Echo");

// Latency in 1/8-octave buckets of nanoseconds: bucket b holds [2^(b/8),
// 2^((b+1)/8)) ns; quantiles are read as a bucket's upper bound (+9 %).
constexpr int kBuckets = 64 * 8;
int Bucket(double ns) {
  return std::clamp(static_cast<int>(std::log2(std::max(ns, 1.0)) * 8), 0,
                    kBuckets - 1);
}
double BucketUpperUs(int b) { return std::exp2((b + 1) / 8.0) / 1000; }

double Quantile(const std::vector<uint64_t>& histogram, double q) {
  uint64_t total = 0;
  for (uint64_t n : histogram) total += n;
  if (total == 0) return 0;
  const auto rank = static_cast<uint64_t>(std::ceil(q * total));
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += histogram[b];
    if (seen >= rank) return BucketUpperUs(b);
  }
  return BucketUpperUs(kBuckets - 1);
}

// --keepalive-ms: both ends' keepalive interval (its timeout four times
// that). An idle connection exchanges a PING and a PONG per interval: at
// 10,000 connections and the default 2 s, 10,000 messages a second, more
// than the whole emulated VM carries.
void SetKeepalive(const rdmarpc::Flags& flags,
                  transport::TransportOptions& options) {
  const long long ms = flags.GetInt("keepalive-ms", -1);
  if (ms < 0) return;
  options.keepalive_interval = std::chrono::milliseconds(ms);
  options.keepalive_timeout = std::chrono::milliseconds(4 * ms);
}

// One Echo call on `channel`, waited for: its status.
Status CallOnce(rpc::Channel& channel, const std::string& payload) {
  std::promise<Status> done;
  channel.Call(kEcho, Buffer::CopyOf(payload), {},
               [&](const Status& status, Buffer) { done.set_value(status); });
  return done.get_future().get();
}

// --- client process ----------------------------------------------------------

int Client(const rdmarpc::Flags& flags) {
  const std::string uri = flags.Get("client", "");
  const int connections = static_cast<int>(flags.GetInt("connections", 1));
  const int outstanding = static_cast<int>(flags.GetInt("outstanding", 1));
  const auto size = static_cast<size_t>(flags.GetInt("size", 16));
  const double seconds = std::atof(flags.Get("seconds", "5").c_str());
  rpc::ChannelOptions options;
  SetKeepalive(flags, options.transport);
  std::vector<std::unique_ptr<rpc::Channel>> channels;
  for (int i = 0; i < connections; ++i) {
    channels.push_back(std::make_unique<rpc::Channel>(uri, options));
  }
  // One call on each: every connection is open before "ready".
  std::string payload(size, 'x');
  uint64_t failed_connects = 0;
  for (auto& channel : channels) {
    if (const Status status = CallOnce(*channel, payload); !status.ok()) {
      if (failed_connects++ == 0) {
        std::fprintf(stderr, "scale client: %s\n", status.ToString().c_str());
      }
    }
  }
  std::printf("ready %llu\n", static_cast<unsigned long long>(failed_connects));
  std::fflush(stdout);
  std::string go;
  std::getline(std::cin, go);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> calls{0}, errors{0};
  std::atomic<int> running{outstanding};
  std::promise<void> drained;
  std::vector<std::atomic<uint64_t>> histogram(kBuckets);
  std::atomic<uint64_t> next{0};
  // Each of the K outstanding calls, once answered, starts the next one on
  // the next connection in turn: every connection carries its share.
  std::function<void()> issue = [&] {
    rpc::Channel& channel = *channels[next.fetch_add(1) % channels.size()];
    const auto start = Clock::now();
    channel.Call(
        kEcho, Buffer::CopyOf(payload), {},
        [&, start](const Status& status, Buffer) {
          const double ns =
              std::chrono::duration<double, std::nano>(Clock::now() - start)
                  .count();
          histogram[Bucket(ns)].fetch_add(1, std::memory_order_relaxed);
          (status.ok() ? calls : errors)
              .fetch_add(1, std::memory_order_relaxed);
          if (!stop.load(std::memory_order_relaxed)) return issue();
          if (running.fetch_sub(1) == 1) drained.set_value();
        });
  };
  const uint64_t wakeups0 = transport::rdma::CompletionWakeups();
  const auto start = Clock::now();
  for (int k = 0; k < outstanding; ++k) issue();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const uint64_t counted = calls.load();
  const double elapsed =
      std::chrono::duration<double>(Clock::now() - start).count();
  stop = true;
  drained.get_future().wait();
  std::printf("result %llu %llu %.6f", static_cast<unsigned long long>(counted),
              static_cast<unsigned long long>(errors.load()), elapsed);
  for (auto& n : histogram) {
    std::printf(" %llu", static_cast<unsigned long long>(n.load()));
  }
  std::printf(" %llu\n", static_cast<unsigned long long>(
                             transport::rdma::CompletionWakeups() - wakeups0));
  std::fflush(stdout);
  // Connected until told: the server counts over its open connections.
  std::getline(std::cin, go);
  return 0;
}

// --- server process ----------------------------------------------------------

struct Row {
  int connections = 0;
  int outstanding = 0;  // In all, over every client process.
  double calls_per_s = 0;
  uint64_t errors = 0;
  uint64_t failed_connects = 0;
  double p50_us = 0, p99_us = 0, p999_us = 0;
  double cpu_us_per_call = 0, user_us_per_call = 0;
  double pinned_kib_per_conn = 0, fds_per_conn = 0, threads_per_conn = 0;
  double qps_per_conn = -1;
  double grpc_calls_per_s = NAN;  // --peer grpc: the same load on gRPC.
  // Over rdma:// (--raw 1, the default there): raw verbs at the same N and
  // load (verbs_scale), measured right after, in the same boot.
  std::optional<RawScale> raw;
  // The server's transport work per call: completion-channel wake-ups and
  // completions polled (RDMA), and, summed over its connections, send posts
  // (ibv_post_send, or sendmsg on TCP) and explicit CREDIT messages.
  double client_wakeups_per_call = 0;  // In all the client processes.
  double wakeups_per_call = 0, completions_per_call = 0, posts_per_call = 0,
         credits_per_call = 0;
  // The server's cap is N (max_connections): one more connection's call.
  StatusCode past_cap = StatusCode::kOk;
};

struct ServerCounts {
  uint64_t wakeups = 0, completions = 0, posts = 0, credits = 0;
};
ServerCounts CountServer(const rpc::Server& server) {
  ServerCounts counts;
  counts.wakeups = transport::rdma::CompletionWakeups();
  counts.completions = transport::rdma::CompletionsPolled();
  server.ForEachConnection([&](const transport::Connection& connection) {
    const transport::ConnectionStats& s = connection.stats();
    counts.posts += s.write_calls.load(std::memory_order_relaxed);
    counts.credits += s.credit_messages.load(std::memory_order_relaxed);
  });
  return counts;
}

Row Measure(const rdmarpc::Flags& flags, const std::string& listen,
            int connections, int outstanding) {
  const int processes = std::min<int>(
      connections, static_cast<int>(flags.GetInt("processes", 4)));
  const std::string seconds = flags.Get("seconds", "5");
  const std::string size = flags.Get("size", "16");

  struct Echo : rpc::Service {
    Echo() : rpc::Service("rdmarpc.bench.Scale") {
      AddMethod("Echo", [](std::shared_ptr<rpc::ServerCall> call) {
        call->Finish(Status(), Buffer::Borrow(call->request().span()));
      });
    }
  } service;
  rpc::ServerOptions options;
  options.workers = static_cast<int>(flags.GetInt("workers", options.workers));
  const std::string poll = flags.Get("poll", "event");  // The server's.
  options.transport.poll_mode = PollModeOrExit(poll, "scale");
  SetKeepalive(flags, options.transport);
  options.max_connections = static_cast<uint32_t>(connections);
  rpc::Server server(options);
  server.RegisterService(&service);
  const StatusOr<std::string> uri = server.Listen(listen);
  if (!uri.ok()) {
    std::fprintf(stderr, "scale: %s\n", uri.status().ToString().c_str());
    std::exit(1);
  }
  const long long pinned0 = ProcessStatusField(0, "VmPin");
  const long long fds0 = OpenFileCount(0);
  const long long threads0 = ProcessStatusField(0, "Threads");
  const auto qps0 = static_cast<long long>(transport::rdma::LiveQueuePairs());

  std::vector<ChildProcess> children;
  Row row;
  row.connections = connections;
  for (int p = 0; p < processes; ++p) {
    const int share = connections / processes + (p < connections % processes);
    // At least one call each: fewer calls than processes become one each.
    const int load =
        std::max(outstanding / processes + (p < outstanding % processes), 1);
    row.outstanding += load;
    children.push_back(SpawnSelf(
        {"scale", "--client", *uri, "--connections", std::to_string(share),
         "--outstanding", std::to_string(load), "--seconds", seconds, "--size",
         size, "--keepalive-ms", flags.Get("keepalive-ms", "-1")}));
  }
  for (ChildProcess& child : children) {
    const std::string ready = ReadLine(child.out);
    if (ready.rfind("ready ", 0) != 0) {
      std::fprintf(stderr, "scale: a client said '%s'\n", ready.c_str());
      std::exit(1);
    }
    row.failed_connects += std::strtoull(ready.c_str() + 6, nullptr, 10);
  }
  std::this_thread::sleep_for(200ms);  // Let the last completions settle.
  row.pinned_kib_per_conn =
      double(ProcessStatusField(0, "VmPin") - pinned0) / connections;
  row.fds_per_conn = double(OpenFileCount(0) - fds0) / connections;
  row.threads_per_conn =
      double(ProcessStatusField(0, "Threads") - threads0) / connections;
  if (listen.rfind("rdma://", 0) == 0) {
    row.qps_per_conn =
        double(static_cast<long long>(transport::rdma::LiveQueuePairs()) -
               qps0) /
        connections;
  }

  const ServerCounts counts0 = CountServer(server);
  const CpuTime cpu0 = ProcessCpuTime();
  for (ChildProcess& child : children) {
    std::fputs("go\n", child.in);
    std::fflush(child.in);
  }
  std::vector<uint64_t> histogram(kBuckets);
  uint64_t calls = 0, client_wakeups = 0;
  double elapsed = 0;
  for (ChildProcess& child : children) {
    std::istringstream result(ReadLine(child.out));
    std::string word;
    uint64_t child_calls = 0, child_errors = 0;
    double child_elapsed = 0;
    result >> word >> child_calls >> child_errors >> child_elapsed;
    if (word != "result") {
      std::fprintf(stderr, "scale: a client did not report\n");
      std::exit(1);
    }
    for (uint64_t& n : histogram) {
      uint64_t v = 0;
      result >> v;
      n += v;
    }
    uint64_t child_wakeups = 0;
    result >> child_wakeups;
    client_wakeups += child_wakeups;
    calls += child_calls;
    row.errors += child_errors;
    elapsed = std::max(elapsed, child_elapsed);
  }
  const CpuTime cpu1 = ProcessCpuTime();
  const ServerCounts counts1 = CountServer(server);
  {  // With the N open (clients wait for "bye"), after the counts (a sum
     // over open connections): one more is refused, or the row fails.
    rpc::ChannelOptions one_more;
    SetKeepalive(flags, one_more.transport);
    rpc::Channel channel(*uri, one_more);
    row.past_cap = CallOnce(channel, std::string(16, 'x')).code();
  }
  for (ChildProcess& child : children) {
    std::fputs("bye\n", child.in);
    std::fflush(child.in);
  }
  const double user = cpu1.user - cpu0.user;
  const double cpu = user + cpu1.system - cpu0.system;
  for (ChildProcess& child : children) child.Reap();
  row.calls_per_s = calls / elapsed;
  row.cpu_us_per_call = calls > 0 ? cpu * 1e6 / calls : 0;
  row.user_us_per_call = calls > 0 ? user * 1e6 / calls : 0;
  if (calls > 0) {
    row.wakeups_per_call = double(counts1.wakeups - counts0.wakeups) / calls;
    row.client_wakeups_per_call = double(client_wakeups) / calls;
    row.completions_per_call =
        double(counts1.completions - counts0.completions) / calls;
    row.posts_per_call = double(counts1.posts - counts0.posts) / calls;
    row.credits_per_call = double(counts1.credits - counts0.credits) / calls;
  }
  row.p50_us = Quantile(histogram, 0.50);
  row.p99_us = Quantile(histogram, 0.99);
  row.p999_us = Quantile(histogram, 0.999);
  return row;
}

std::vector<int> IntList(const std::string& text) {
  std::vector<int> values;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    values.push_back(std::atoi(item.c_str()));
  }
  return values;
}

// calls/s and p99 against the calls outstanding in all, one line per number
// of connections (gnuplot, as tools/bench's --plot).
void Plot(const std::string& png, const std::string& title, int processes,
          const std::vector<Row>& rows) {
  const std::string base = png + ".data";
  std::string calls_plot, p99_plot;
  int index = 0;
  for (size_t i = 0; i < rows.size(); ++index) {
    const std::string file = base + "." + std::to_string(index);
    std::ofstream data(file);
    const int n = rows[i].connections;
    for (; i < rows.size() && rows[i].connections == n; ++i) {
      data << rows[i].outstanding << " " << rows[i].calls_per_s << " "
           << rows[i].p99_us << "\n";
    }
    const std::string style =
        " with linespoints title '" + std::to_string(n) + " connections, " +
        std::to_string(std::min(n, processes)) + " processes'";
    calls_plot +=
        (calls_plot.empty() ? "plot '" : ", '") + file + "' using 1:2" + style;
    p99_plot +=
        (p99_plot.empty() ? "plot '" : ", '") + file + "' using 1:3" + style;
  }
  std::ofstream script(base + ".gp");
  script << "set terminal png size 1200,500\nset output '" << png << "'\n"
         << "set multiplot layout 1,2 title '" << title << "'\n"
         << "set xlabel 'calls outstanding, in all'\nset logscale x 2\n"
         << "set key bottom right\nset ylabel 'calls/s'\nset yrange [0:*]\n"
         << calls_plot << "\n"
         << "set ylabel 'p99 latency (us)'\nset logscale y\n"
         << "set yrange [*:*]\nset key top left\n"
         << p99_plot << "\nunset multiplot\n";
  script.close();
  if (std::system(("gnuplot '" + base + ".gp'").c_str()) != 0) {
    std::fprintf(stderr, "scale: gnuplot failed (script %s.gp)\n",
                 base.c_str());
  } else {
    std::printf("# plot: %s\n", png.c_str());
    // Its inputs go; kept above, where they tell what went wrong.
    std::remove((base + ".gp").c_str());
    for (int i = 0; i < index; ++i) {
      std::remove((base + "." + std::to_string(i)).c_str());
    }
  }
}

void WriteJson(const std::string& path, const std::vector<Row>& rows) {
  std::ofstream out(path);
  out << "[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    out << (i ? ",\n " : "") << "{\"connections\":" << r.connections
        << ",\"outstanding\":" << r.outstanding
        << ",\"calls_per_s\":" << r.calls_per_s << ",\"p50_us\":" << r.p50_us
        << ",\"p99_us\":" << r.p99_us << ",\"p999_us\":" << r.p999_us
        << ",\"cpu_us_per_call\":" << r.cpu_us_per_call
        << ",\"user_us_per_call\":" << r.user_us_per_call
        << ",\"pinned_kib_per_conn\":" << r.pinned_kib_per_conn
        << ",\"fds_per_conn\":" << r.fds_per_conn
        << ",\"threads_per_conn\":" << r.threads_per_conn
        << ",\"wakeups_per_call\":" << r.wakeups_per_call
        << ",\"completions_per_call\":" << r.completions_per_call
        << ",\"client_wakeups_per_call\":" << r.client_wakeups_per_call
        << ",\"posts_per_call\":" << r.posts_per_call
        << ",\"credits_per_call\":" << r.credits_per_call
        << ",\"qps_per_conn\":" << r.qps_per_conn
        << ",\"errors\":" << r.errors + r.failed_connects << ",\"past_cap\":\""
        << StatusCodeName(r.past_cap) << "\"";
    if (std::isfinite(r.grpc_calls_per_s)) {
      out << ",\"grpc_calls_per_s\":" << r.grpc_calls_per_s;
    }
    out << "}";
  }
  out << "]\n";
}

int Main(int argc, char** argv) {
  const rdmarpc::Flags flags(argc, argv);
  // Thousands of connections open and close: their info lines are noise.
  if (std::getenv("RDMARPC_LOG") == nullptr) {
    Log().set_level(spdlog::level::warn);
  }
  if (!flags.Get("client", "").empty()) return Client(flags);
  const std::string listen = flags.Get("uri", "tcp://127.0.0.1:0");
  const std::vector<int> counts =
      IntList(flags.Get("connections", "8,64,256,1000"));
  const std::vector<int> loads = IntList(flags.Get("outstanding", "256"));
  const long long workers =
      flags.GetInt("workers", rpc::ServerOptions().workers);
  char title[256];
  std::snprintf(title, sizeof(title),
                "%s, %lld B calls, up to %lld client processes, %lld "
                "server loop%s, %s s per row",
                listen.c_str(), flags.GetInt("size", 16),
                flags.GetInt("processes", 4), workers, workers == 1 ? "" : "s",
                flags.Get("seconds", "5").c_str());
  std::printf("# scale: %s\n", title);
  std::printf(
      "%-11s %8s %10s %9s %8s %8s %8s %9s %9s %15s %8s %8s %8s %7s %9s %9s "
      "%9s %10s  %s\n",
      "connections", "outstdg", "calls/s", "calls/s/c", "p50 us", "p99 us",
      "p999 us", "cpu/call", "user/call", "pinned KiB/conn", "fds/conn",
      "thr/conn", "QPs/conn", "errors", "wake/call", "cqe/call", "post/call",
      "cwake/call", "one past the cap");
  std::vector<Row> rows;
  const int processes = static_cast<int>(flags.GetInt("processes", 4));
  std::unique_ptr<GrpcClients> grpc;
  if (flags.Get("peer", "") == "grpc") {
    if (listen.rfind("tcp://", 0) != 0) {
      std::fprintf(stderr, "scale: --peer grpc compares over tcp:// only\n");
      return 1;
    }
    grpc = GrpcClients::Start();
    if (!grpc) return 1;
  }
  const bool raw = listen.rfind("rdma://", 0) == 0 && flags.GetInt("raw", 1);
  bool raw_failed = false;
  for (int n : counts) {
    int previous = 0;
    for (int k : loads) {
      // Each client process keeps at least one call going.
      const int effective = std::max(k, std::min(n, processes));
      if (effective == previous) continue;
      previous = effective;
      Row row = Measure(flags, listen, n, k);
      if (grpc) {
        row.grpc_calls_per_s =
            grpc->Load(n, k, processes, flags.Get("size", "16"),
                       flags.Get("seconds", "5"));
      }
      if (raw) {
        row.raw =
            MeasureRawScale(listen.substr(7, listen.rfind(':') - 7), n,
                            static_cast<int>(flags.GetInt("processes", 4)), k,
                            flags.Get("seconds", "5"));
        raw_failed |= !row.raw;
      }
      rows.push_back(row);
      char qps[32] = "-";
      if (row.qps_per_conn >= 0) {
        std::snprintf(qps, sizeof(qps), "%.2f", row.qps_per_conn);
      }
      // The calls/s one server core carries: 1 s over the CPU per call.
      const double per_core =
          row.cpu_us_per_call > 0 ? 1e6 / row.cpu_us_per_call : 0;
      std::printf(
          "%-11d %8d %10.0f %9.0f %8.1f %8.1f %8.1f %7.1fus %7.1fus %15.1f "
          "%8.2f %8.2f %8s %7llu %9.3f %9.3f %9.3f %9.3f  %s\n",
          row.connections, row.outstanding, row.calls_per_s, per_core,
          row.p50_us, row.p99_us, row.p999_us, row.cpu_us_per_call,
          row.user_us_per_call, row.pinned_kib_per_conn, row.fds_per_conn,
          row.threads_per_conn, qps,
          static_cast<unsigned long long>(row.errors + row.failed_connects),
          row.wakeups_per_call, row.completions_per_call, row.posts_per_call,
          row.client_wakeups_per_call,
          std::string(StatusCodeName(row.past_cap)).c_str());
      if (row.raw) {
        std::printf(
            "%-11s %8s %10.0f %9.0f %8s %8s %8s %7.1fus   raw verbs, the same "
            "N and load: rdmarpc %.2fx the calls/s, %.2fx the CPU per call\n",
            "  raw", "", row.raw->calls_per_s, 1e6 / row.raw->cpu_us_per_call,
            "", "", "", row.raw->cpu_us_per_call,
            row.calls_per_s / row.raw->calls_per_s,
            row.cpu_us_per_call / row.raw->cpu_us_per_call);
      }
      if (grpc) {
        std::printf("%-11s %8s %10.0f   gRPC, the same load: rdmarpc %.2fx\n",
                    "  grpc", "", row.grpc_calls_per_s,
                    row.calls_per_s / row.grpc_calls_per_s);
      }
      std::fflush(stdout);
    }
  }
  if (counts.size() >= 2 && loads.size() == 1) {
    const Row& first = rows.front();
    const Row& last = rows.back();
    std::printf(
        "# %d vs %d connections: %.2fx the calls/s, %.2fx the server CPU per "
        "call\n",
        last.connections, first.connections,
        last.calls_per_s / first.calls_per_s,
        last.cpu_us_per_call / first.cpu_us_per_call);
  }
  if (const std::string json = flags.Get("json", ""); !json.empty()) {
    WriteJson(json, rows);
  }
  if (const std::string png = flags.Get("plot", ""); !png.empty()) {
    Plot(png, title, processes, rows);
  }
  for (const Row& r : rows) {
    if (r.errors + r.failed_connects > 0) return 1;
    if (r.past_cap != StatusCode::kResourceExhausted) return 1;
  }
  if (raw_failed) return 1;
  if (flags.GetInt("check", 0) != 0 && !rows.empty()) {
    const Row& r = rows.back();
    const bool rdma = listen.rfind("rdma://", 0) == 0;
    const bool ok = r.pinned_kib_per_conn <= 64 && r.fds_per_conn <= 0.05 &&
                    r.threads_per_conn <= 0.01 &&
                    (!rdma || r.qps_per_conn == 1);
    std::printf("# check at %d connections: %s\n", r.connections,
                ok ? "within the per-connection budget"
                   : "OVER the per-connection budget (64 KiB pinned, 0.05 "
                     "fds, no thread, one QP)");
    if (!ok) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace rdmarpc::bench

int main(int argc, char** argv) { return rdmarpc::bench::Main(argc, argv); }
