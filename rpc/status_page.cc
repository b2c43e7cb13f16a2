// rpc/status_page.h: the admin endpoint's HTML status page.
#include "rpc/status_page.h"

#include <cinttypes>
#include <cstdio>

#include "rpc/metrics.h"

namespace rdmarpc::rpc {
namespace {

std::string Format(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

constexpr char kHead[] = R"(<!DOCTYPE html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">
<title>rdmarpc server</title>
<style>
body { font-family: sans-serif; margin: 1.5em; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #eee; } td.name { text-align: left; font-family: monospace; }
</style></head><body>
<h1>rdmarpc server</h1>
<p>Refreshes every 5 s. Prometheus: <a href="/metrics">/metrics</a>;
health: <a href="/healthz">/healthz</a>.</p>
)";

}  // namespace

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string StatusPage::Render(const Server& server) {
  const auto now = std::chrono::steady_clock::now();
  const double elapsed =
      last_time_ == std::chrono::steady_clock::time_point()
          ? 0
          : std::chrono::duration<double>(now - last_time_).count();
  last_time_ = now;
  std::string out = kHead;

  out +=
      "<h2>Methods</h2>\n<table id=\"methods\"><tr><th>method</th>"
      "<th>calls</th><th>ok</th><th>errors</th><th>calls/s</th>"
      "<th>p50 &micro;s</th><th>p99 &micro;s</th></tr>\n";
  server.ForEachMethod([&](const std::string& service,
                           const std::string& method,
                           const MethodMetrics& metrics) {
    const std::string name = service + "/" + method;
    const uint64_t calls = metrics.started.load(std::memory_order_relaxed);
    const uint64_t ok =
        metrics.finished_by_code[0].load(std::memory_order_relaxed);
    uint64_t finished = 0;
    for (const auto& count : metrics.finished_by_code) {
      finished += count.load(std::memory_order_relaxed);
    }
    uint64_t& last = last_calls_[name];
    const double rate = elapsed > 0 ? (calls - last) / elapsed : 0;
    last = calls;
    const LatencyHistogram::Snapshot latency = metrics.latency.Read();
    out += "<tr><td class=\"name\">" + HtmlEscape(name) + "</td><td>" +
           std::to_string(calls) + "</td><td>" + std::to_string(ok) +
           "</td><td>" + std::to_string(finished - ok) + "</td><td>" +
           (elapsed > 0 ? Format("%.1f", rate) : std::string("-")) +
           "</td><td>" + Format("%.1f", latency.PercentileUs(0.5)) +
           "</td><td>" + Format("%.1f", latency.PercentileUs(0.99)) +
           "</td></tr>\n";
  });
  out += "</table>\n";

  const ServerStats stats = server.stats();
  out += "<h2>Server</h2>\n<table id=\"server\">\n";
  const std::pair<const char*, int64_t> totals[] = {
      {"connections", static_cast<int64_t>(stats.connections)},
      {"live calls", stats.live_calls},
      {"calls started", static_cast<int64_t>(stats.calls_started)},
      {"unknown method calls",
       static_cast<int64_t>(stats.unknown_method_calls)},
      {"calls shed", static_cast<int64_t>(stats.calls_shed)},
      {"calls over limit", static_cast<int64_t>(stats.calls_over_limit)},
      {"responses refused", static_cast<int64_t>(stats.responses_refused)},
      {"protocol errors", static_cast<int64_t>(stats.protocol_errors)},
      {"peers timed out", static_cast<int64_t>(stats.peers_timed_out)},
  };
  for (const auto& [name, value] : totals) {
    out += "<tr><td class=\"name\">" + std::string(name) + "</td><td>" +
           std::to_string(value) + "</td></tr>\n";
  }
  out += "</table>\n";

  out +=
      "<h2>Connections</h2>\n<table id=\"connections\"><tr><th>peer</th>"
      "<th>frames in</th><th>frames out</th><th>bytes in</th>"
      "<th>bytes out</th><th>writes</th><th>reads</th></tr>\n";
  server.ForEachConnection([&](const transport::Connection& connection) {
    const transport::ConnectionStats& s = connection.stats();
    out += "<tr><td class=\"name\">" + HtmlEscape(connection.peer()) +
           "</td><td>" + std::to_string(s.frames_received) + "</td><td>" +
           std::to_string(s.frames_sent) + "</td><td>" +
           std::to_string(s.bytes_received) + "</td><td>" +
           std::to_string(s.bytes_sent) + "</td><td>" +
           std::to_string(s.write_calls) + "</td><td>" +
           std::to_string(s.read_calls) + "</td></tr>\n";
  });
  out += "</table>\n</body></html>\n";
  return out;
}

}  // namespace rdmarpc::rpc
