// The echo benchmark: the printed report, JSON and plots.
#include <cmath>
#include <cstdio>
#include <fstream>

#include "tools/benchmarks/bench.h"
#include "transport/connection.h"

namespace rdmarpc::bench {

void PrintServerStats(const rpc::Server& server, const Result& r) {
  static std::vector<uint64_t> last;
  server.ForEachConnection([&](const transport::Connection& connection) {
    const transport::ConnectionStats& s = connection.stats();
    const std::vector<uint64_t> now = {
        s.frames_received, s.frames_sent,       s.write_calls,
        s.read_calls,      s.inline_sends,      s.credit_messages,
        s.credit_stalls,   s.cq_events,         s.cq_polls,
        s.rdma_writes,     s.registrations,     s.staged_bytes,
        s.pooled_grants,   s.registered_grants, s.standing_grants};
    const char* names[] = {
        "frames_received", "frames_sent",       "write_calls",
        "read_calls",      "inline_sends",      "credit_msgs",
        "credit_stalls",   "cq_events",         "cq_polls",
        "rdma_writes",     "registrations",     "staged_bytes",
        "pooled_grants",   "registered_grants", "standing_grants"};
    last.resize(now.size());
    const double frames =
        std::max<double>(1, static_cast<double>(now[0] - last[0]));
    std::printf("  server stats, %s %s, per frame received (%0.f):",
                r.mode.c_str(), SizeName(r.size).c_str(), frames);
    for (size_t i = 1; i < now.size(); ++i) {
      std::printf(" %s %.2f", names[i], (now[i] - last[i]) / frames);
    }
    std::printf("\n");
    last = now;
  });
}

void WriteJson(const Options& options, const std::vector<Result>& results) {
  std::ofstream out(options.json);
  out << "{\"uri\": \"" << options.uri << "\", \"results\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    out << (i ? ",\n  " : "\n  ") << "{\"mode\": \"" << r.mode
        << "\", \"size\": " << r.size;
    auto number = [&](const char* name, double value) {
      out << ", \"" << name << "\": ";
      if (std::isfinite(value)) {
        out << value;
      } else {
        out << "null";
      }
    };
    if (r.mode == "latency") {
      number("p50_us", r.p50);
      number("p99_us", r.p99);
      number("p999_us", r.p999);
      number("max_us", r.max);
      number("raw_p50_us", r.raw_p50);
      number("ratio_p50", r.p50 / r.raw_p50);
      number("epoll_p50_us", r.epoll_p50);
      number("asio_p50_us", r.asio_p50);
      number("round_ratio_median", r.round_ratio_median);
      number("round_ratio_min", r.round_ratio_min);
      number("round_ratio_max", r.round_ratio_max);
      number("epoll_round_ratio_median", r.epoll_round_ratio);
      number("asio_round_ratio_median", r.asio_round_ratio);
    } else if (r.mode == "throughput") {
      number("calls_per_s", r.calls_per_s);
      out << ", \"outstanding\": " << options.outstanding
          << ", \"connections\": " << options.connections;
    } else {
      number("gbps", r.gbps);
      number("raw_gbps", r.raw_gbps);
      number("ratio", r.gbps / r.raw_gbps);
    }
    out << ", \"errors\": " << r.errors << "}";
  }
  out << "\n]}\n";
}

void Plot(const Options& options, const std::vector<Result>& results) {
  const std::string base = options.plot + ".data";
  std::ofstream script(base + ".gp");
  script << "set terminal png size 1200,500\nset output '" << options.plot
         << "'\nset multiplot layout 1,2\n";
  // Left: latency CDF of every size; right: the size sweep.
  std::string cdf_plot, sweep_plot;
  int index = 0;
  std::ofstream sweep(base + ".sweep");
  for (const Result& r : results) {
    if (r.mode == "latency") {
      const std::string file = base + "." + std::to_string(index++);
      std::ofstream cdf(file);
      for (size_t i = 0; i < r.samples.size(); ++i) {
        cdf << r.samples[i] << " " << (i + 1.0) / r.samples.size() << "\n";
      }
      cdf_plot += std::string(cdf_plot.empty() ? "plot " : ", ") + "'" + file +
                  "' with lines title '" + SizeName(r.size) + "'";
      sweep << r.size << " " << r.p50 << " " << r.raw_p50 << "\n";
    } else if (r.mode == "bandwidth" || r.mode == "stream" ||
               r.mode == "pull" || r.mode == "push") {
      sweep << r.size << " " << r.gbps << " " << r.raw_gbps << "\n";
    }
  }
  const bool latency = options.mode == "latency";
  script << "set title 'Latency CDF (" << options.uri << ")'\n"
         << "set xlabel 'round trip (us)'\nset ylabel 'fraction'\n"
         << "set logscale x\n"
         << (cdf_plot.empty() ? "plot 0 notitle" : cdf_plot) << "\n"
         << "set title 'Size sweep'\nset xlabel 'size (bytes)'\n"
         << "set ylabel '" << (latency ? "p50 round trip (us)" : "GB/s")
         << "'\nset logscale xy\n"
         << "plot '" << base << ".sweep' using 1:2 with linespoints title "
         << "'rdmarpc', '' using 1:3 with linespoints title 'raw'\n"
         << "unset multiplot\n";
  script.close();
  sweep.close();
  if (std::system(("gnuplot '" + base + ".gp'").c_str()) != 0) {
    std::fprintf(stderr, "bench: gnuplot failed (script %s.gp)\n",
                 base.c_str());
  } else {
    std::printf("plot: %s\n", options.plot.c_str());
  }
}

void PrintReport(const Options& options, const std::string& poll, bool rdma,
                 const std::vector<Result>& results) {
  std::printf("rdmarpc bench: %s over %s (poll %s%s)\n", options.mode.c_str(),
              options.uri.c_str(), poll.c_str(),
              pin_sides ? ", client side on CPU 0, server side on CPU 1" : "");
  const char* raw_name = rdma ? "raw verbs"
                         : options.poll == transport::PollMode::kEvent
                             ? "raw TCP"
                             : "raw TCP (polling)";
  for (const Result& r : results) {
    if (r.mode == "latency") {
      std::printf(
          "  %-8s p50 %8.2f us  p99 %8.2f  p999 %8.2f  max %8.2f | %s p50 "
          "%8.2f us | ratio %.2f\n",
          SizeName(r.size).c_str(), r.p50, r.p99, r.p999, r.max, raw_name,
          r.raw_p50, r.p50 / r.raw_p50);
      if (std::isfinite(r.epoll_p50)) {
        // The kernel's share: waiting in epoll before each read.
        std::printf("  %-8s epoll loop p50 %8.2f us = %.2f x raw\n", "",
                    r.epoll_p50, r.epoll_p50 / r.raw_p50);
      }
      if (std::isfinite(r.asio_p50)) {
        // The floor: how much of the ratio an Asio echo alone costs.
        std::printf(
            "  %-8s Asio loop p50 %8.2f us = %.2f x raw; rdmarpc = "
            "%.2f x Asio loop\n",
            "", r.asio_p50, r.asio_p50 / r.raw_p50, r.p50 / r.asio_p50);
      }
      if (std::isfinite(r.round_ratio_median)) {
        std::printf("  %-8s per-round ratio: median %.3f (range %.3f-%.3f)\n",
                    "", r.round_ratio_median, r.round_ratio_min,
                    r.round_ratio_max);
      }
      if (std::isfinite(r.asio_round_ratio)) {
        std::printf(
            "  %-8s per-round floors: epoll loop %.3f, Asio loop %.3f x raw\n",
            "", r.epoll_round_ratio, r.asio_round_ratio);
      }
    } else if (r.mode == "throughput") {
      std::printf("  %-8s %10.0f calls/s  (%d outstanding x %d connections)\n",
                  SizeName(r.size).c_str(), r.calls_per_s, options.outstanding,
                  options.connections);
      if (std::isfinite(r.local_op_waits_per_call)) {
        std::printf(
            "  %-8s each lending %llu B: %.2f local-operation waits per "
            "call\n",
            "", static_cast<unsigned long long>(options.lend),
            r.local_op_waits_per_call);
      }
    } else {
      std::printf("  %-8s %7.3f GB/s | %s %7.3f GB/s | ratio %.2f\n",
                  SizeName(r.size).c_str(), r.gbps,
                  !rdma              ? "raw TCP"
                  : r.mode == "pull" ? "raw READ"
                                     : "raw WRITE",
                  r.raw_gbps, r.gbps / r.raw_gbps);
    }
  }
  // The targets (docs/benchmarks.md), where this run measured them.
  for (const Result& r : results) {
    if (r.mode == "latency" && r.size == 16 && std::isfinite(r.raw_p50)) {
      const double limit = rdma ? 1.2 : 1.15;
      std::printf("target: 16 B p50 <= %.2f x raw: %.2f -> %s\n", limit,
                  r.p50 / r.raw_p50,
                  r.p50 <= limit * r.raw_p50 ? "MET" : "NOT MET");
    }
    if (r.mode == "stream" && std::isfinite(r.raw_gbps)) {
      std::printf("target: %s stream goodput >= 0.9 x %s: %.2f -> %s\n",
                  SizeName(r.size).c_str(),
                  rdma ? "raw WRITE stream" : "raw socket stream",
                  r.gbps / r.raw_gbps,
                  r.gbps >= 0.9 * r.raw_gbps ? "MET" : "NOT MET");
    }
    if ((r.mode == "pull" || r.mode == "push") && rdma &&
        (r.size == (4u << 20) || r.size == (64u << 20)) &&
        std::isfinite(r.raw_gbps)) {
      std::printf("target: %s %s >= 0.9 x raw RDMA %s: %.2f -> %s\n",
                  SizeName(r.size).c_str(), r.mode.c_str(),
                  r.mode == "pull" ? "READ" : "WRITE", r.gbps / r.raw_gbps,
                  r.gbps >= 0.9 * r.raw_gbps ? "MET" : "NOT MET");
    }
    if (r.mode == "bandwidth" && rdma &&
        (r.size == (4u << 20) || r.size == (64u << 20)) &&
        std::isfinite(r.raw_gbps)) {
      std::printf("target: %s goodput >= 0.85 x raw WRITE: %.2f -> %s\n",
                  SizeName(r.size).c_str(), r.gbps / r.raw_gbps,
                  r.gbps >= 0.85 * r.raw_gbps ? "MET" : "NOT MET");
    }
  }
}

}  // namespace rdmarpc::bench
