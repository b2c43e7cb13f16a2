// rpc/builtin/status_page.h: the admin endpoint's HTML status page.
#include "rpc/builtin/status_page.h"

#include <cinttypes>
#include <cstdio>

#include "rpc/builtin/client_metrics.h"
#include "rpc/server/metrics.h"
#include "transport/connection.h"

namespace rdmarpc::rpc {
namespace {

std::string Format(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

// The page's head, for "rdmarpc server" or "rdmarpc client".
std::string Head(std::string_view title) {
  return R"(<!DOCTYPE html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">
<title>)" +
         std::string(title) +
         R"(</title>
<style>
body { font-family: sans-serif; margin: 1.5em; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #eee; } td.name { text-align: left; font-family: monospace; }
</style></head><body>
<h1>)" + std::string(title) +
         R"(</h1>
<p>Refreshes every 5 s. Prometheus: <a href="/metrics">/metrics</a>;
health: <a href="/healthz">/healthz</a>.</p>
)";
}

// This process's channels, per target (rpc/builtin/client_metrics.h).
void Channels(std::string& out) {
  const std::vector<ClientTargetMetrics> targets = ReadClientMetrics();
  out +=
      "<h2>Channels</h2>\n<table id=\"channels\"><tr><th>target</th>"
      "<th>channels</th><th>outstanding</th><th>connects</th>"
      "<th>connect failures</th><th>retries</th><th>hedges</th>"
      "<th>budget refusals</th><th>endpoints ready</th><th>ejected</th>"
      "</tr>\n";
  for (const ClientTargetMetrics& t : targets) {
    out += "<tr><td class=\"name\">" + HtmlEscape(t.target) + "</td>";
    for (const uint64_t value :
         {t.channels, t.stats.outstanding_calls, t.stats.connects,
          t.stats.connect_failures, t.stats.retries, t.stats.hedges,
          t.stats.retries_throttled}) {
      out += "<td>" + std::to_string(value) + "</td>";
    }
    out += "<td>" + std::to_string(t.endpoints_ready) + " of " +
           std::to_string(t.endpoints) + "</td><td>" +
           std::to_string(t.endpoints_ejected) + "</td></tr>\n";
  }
  out += "</table>\n";
}

// The counters shown for a connection, or summed for a transport.
constexpr char kCounterHeads[] =
    "<th>frames in</th><th>frames out</th><th>bytes in</th><th>bytes out</th>"
    "<th>writes</th><th>reads</th><th>inline sends</th><th>RDMA writes</th>"
    "<th>credit stalls</th>";

std::string CounterCells(const transport::ConnectionStats& s) {
  std::string out;
  for (const uint64_t value :
       {s.frames_received.load(), s.frames_sent.load(), s.bytes_received.load(),
        s.bytes_sent.load(), s.write_calls.load(), s.read_calls.load(),
        s.inline_sends.load(), s.rdma_writes.load(), s.credit_stalls.load()}) {
    out += "<td>" + std::to_string(value) + "</td>";
  }
  return out;
}

void ServerTotals(const ServerStats& stats, std::string& out) {
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
      {"connections recycled",
       static_cast<int64_t>(stats.connections_recycled)},
  };
  for (const auto& [name, value] : totals) {
    out += "<tr><td class=\"name\">" + std::string(name) + "</td><td>" +
           std::to_string(value) + "</td></tr>\n";
  }
  out += "</table>\n";
}

void Transports(const Server& server, std::string& out) {
  out +=
      "<h2>Transports</h2>\n<table id=\"transports\"><caption>Summed over "
      "every connection the server has had, closed ones included</caption>"
      "<tr><th>transport</th><th>open</th><th>queued bytes</th>" +
      std::string(kCounterHeads) + "</tr>\n";
  server.ForEachTransport(
      [&](const std::string& transport, const Server::TransportTotals& totals) {
        out += "<tr><td class=\"name\">" + HtmlEscape(transport) + "</td><td>" +
               std::to_string(totals.open) + "</td><td>" +
               std::to_string(totals.queued_bytes) + "</td>" +
               CounterCells(totals.counters) + "</tr>\n";
      });
  out += "</table>\n";
}

void Connections(const Server& server, std::string& out) {
  out +=
      "<h2>Connections</h2>\n<table id=\"connections\"><tr><th>peer</th>"
      "<th>queued bytes</th>" +
      std::string(kCounterHeads) + "</tr>\n";
  server.ForEachConnection([&](const transport::Connection& connection) {
    out += "<tr><td class=\"name\">" + HtmlEscape(connection.peer()) +
           "</td><td>" + std::to_string(connection.queued_bytes()) + "</td>" +
           CounterCells(connection.stats()) + "</tr>\n";
  });
  out += "</table>\n";
}

void Options(const ServerOptions& options, std::string& out) {
  out += "<h2>Options</h2>\n<table id=\"options\">\n";
  const auto limit = [](uint64_t value) {
    return value == 0 ? std::string("no limit") : std::to_string(value);
  };
  const auto ms = [](std::chrono::milliseconds value) {
    return std::to_string(value.count()) + " ms";
  };
  const std::pair<const char*, std::string> settings[] = {
      {"workers", std::to_string(options.workers)},
      {"handler threads", std::to_string(options.handler_threads)},
      {"max concurrency", limit(options.max_concurrency)},
      {"methods with their own limit",
       std::to_string(options.method_max_concurrency.size())},
      {"max connections", limit(options.max_connections)},
      {"max calls per connection", limit(options.max_calls_per_connection)},
      {"max request payload bytes",
       std::to_string(options.transport.max_payload_size)},
      {"max response bytes", std::to_string(options.max_response_size)},
      {"max metadata bytes", std::to_string(options.max_metadata_size)},
      {"max queued bytes per connection",
       std::to_string(options.transport.max_queued_bytes)},
      {"keepalive interval", ms(options.transport.keepalive_interval)},
      {"keepalive timeout", ms(options.transport.keepalive_timeout)},
      {"interceptors", std::to_string(options.interceptors.size())},
      {"registered at",
       options.register_at.empty() ? std::string("-") : options.register_at},
      {"metrics", options.enable_metrics ? "on" : "off"},
  };
  for (const auto& [name, value] : settings) {
    out += "<tr><td class=\"name\">" + std::string(name) + "</td><td>" +
           HtmlEscape(value) + "</td></tr>\n";
  }
  out += "</table>\n";
}

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
  std::string out = Head("rdmarpc server");
  Methods(server, elapsed, out);
  ServerTotals(server.stats(), out);
  Transports(server, out);
  Connections(server, out);
  Options(server.options(), out);
  Channels(out);
  out += "</body></html>\n";
  return out;
}

void StatusPage::Methods(const Server& server, double elapsed,
                         std::string& out) {
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
}

std::string StatusPage::RenderClient() {
  std::string out = Head("rdmarpc client");
  Channels(out);
  out += "</body></html>\n";
  return out;
}

}  // namespace rdmarpc::rpc
