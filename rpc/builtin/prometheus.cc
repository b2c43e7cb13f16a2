// rpc/builtin/prometheus.h: the Prometheus text exposition of a server's
// metrics.
#include "rpc/builtin/prometheus.h"

#include <sys/resource.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <map>
#include <optional>
#include <vector>

#include "base/process_stats.h"
#include "rpc/builtin/client_metrics.h"
#include "rpc/server/metrics.h"
#include "transport/connection.h"
#include "transport/rdma/device_info.h"
#include "transport/rdma/resource_usage.h"

namespace rdmarpc::rpc {
namespace {

// One family's HELP and TYPE lines.
void Family(std::string& out, std::string_view name, std::string_view type,
            std::string_view help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

// A number as Prometheus reads it: integers exactly, others in the
// shortest form that reads back the same (so a bucket's `le` is spelled the
// same on every scrape).
std::string Number(double value) {
  std::array<char, 32> text;
  const auto end = std::to_chars(text.data(), text.data() + text.size(), value);
  return std::string(text.data(), end.ptr);
}
std::string Number(uint64_t value) { return std::to_string(value); }
std::string Number(int64_t value) { return std::to_string(value); }

template <typename T>
void Sample(std::string& out, std::string_view name, std::string_view labels,
            T value) {
  out.append(name);
  if (!labels.empty()) out.append("{").append(labels).append("}");
  out.append(" ").append(Number(value)).append("\n");
}

std::string MethodLabels(const std::string& service,
                         const std::string& method) {
  return "service=\"" + PrometheusLabelValue(service) + "\",method=\"" +
         PrometheusLabelValue(method) + "\"";
}

// One method's metrics, read once (the visit may not keep them).
struct MethodRow {
  std::string labels;
  uint64_t started = 0;
  std::array<uint64_t, MethodMetrics::kCodes> finished{};
  uint64_t request_bytes = 0, response_bytes = 0;
  uint64_t messages_received = 0, messages_sent = 0;
  int64_t streams_open = 0;
  LatencyHistogram::Snapshot latency;
};

MethodRow ReadMethod(const std::string& service, const std::string& method,
                     const MethodMetrics& metrics) {
  constexpr auto relaxed = std::memory_order_relaxed;
  MethodRow row;
  row.labels = MethodLabels(service, method);
  row.started = metrics.started.load(relaxed);
  for (int code = 0; code < MethodMetrics::kCodes; ++code) {
    row.finished[code] = metrics.finished_by_code[code].load(relaxed);
  }
  row.request_bytes = metrics.request_bytes.load(relaxed);
  row.response_bytes = metrics.response_bytes.load(relaxed);
  row.messages_received = metrics.messages_received.load(relaxed);
  row.messages_sent = metrics.messages_sent.load(relaxed);
  row.streams_open = metrics.streams_open.load(relaxed);
  row.latency = metrics.latency.Read();
  return row;
}

// A family with one sample per method, `value` of each row.
template <typename Value>
void PerMethod(std::string& out, const std::vector<MethodRow>& rows,
               std::string_view name, std::string_view type,
               std::string_view help, Value value) {
  Family(out, name, type, help);
  for (const MethodRow& row : rows) Sample(out, name, row.labels, value(row));
}

void Methods(std::string& out, const std::vector<MethodRow>& rows) {
  PerMethod(out, rows, "rdmarpc_server_calls_started_total", "counter",
            "Calls started, per method.",
            [](const MethodRow& row) { return row.started; });
  Family(out, "rdmarpc_server_calls_total", "counter",
         "Calls finished, per method and status code.");
  for (const MethodRow& row : rows) {
    for (int code = 0; code < MethodMetrics::kCodes; ++code) {
      if (row.finished[code] == 0 && code != 0) continue;  // OK always.
      Sample(out, "rdmarpc_server_calls_total",
             row.labels + ",code=\"" +
                 std::string(StatusCodeName(static_cast<StatusCode>(code))) +
                 "\"",
             row.finished[code]);
    }
  }
  PerMethod(out, rows, "rdmarpc_server_request_bytes_total", "counter",
            "Request payload bytes received, per method.",
            [](const MethodRow& row) { return row.request_bytes; });
  PerMethod(out, rows, "rdmarpc_server_response_bytes_total", "counter",
            "Response payload bytes sent, per method.",
            [](const MethodRow& row) { return row.response_bytes; });
  Family(out, "rdmarpc_server_handling_seconds", "histogram",
         "From a request's arrival to its response queued, per method.");
  for (const MethodRow& row : rows) {
    const LatencyHistogram::Snapshot& snapshot = row.latency;
    // Cumulative, at the top of each power of two: every 8th bucket.
    uint64_t below = 0;
    for (int b = 0; b < LatencyHistogram::kBuckets; ++b) {
      below += snapshot.counts[b];
      if (b % LatencyHistogram::kSubBuckets != 0) continue;
      Sample(out, "rdmarpc_server_handling_seconds_bucket",
             row.labels + ",le=\"" +
                 Number(LatencyHistogram::UpperBoundUs(b) / 1e6) + "\"",
             below);
    }
    Sample(out, "rdmarpc_server_handling_seconds_bucket",
           row.labels + ",le=\"+Inf\"", snapshot.total);
    Sample(out, "rdmarpc_server_handling_seconds_sum", row.labels,
           static_cast<double>(snapshot.sum_ns) / 1e9);
    Sample(out, "rdmarpc_server_handling_seconds_count", row.labels,
           snapshot.total);
  }
  PerMethod(out, rows, "rdmarpc_server_stream_messages_received_total",
            "counter", "Streaming methods: messages read from clients.",
            [](const MethodRow& row) { return row.messages_received; });
  PerMethod(out, rows, "rdmarpc_server_stream_messages_sent_total", "counter",
            "Streaming methods: messages written to clients.",
            [](const MethodRow& row) { return row.messages_sent; });
  PerMethod(out, rows, "rdmarpc_server_streams_open", "gauge",
            "Streaming calls open now, per method.",
            [](const MethodRow& row) { return row.streams_open; });
}

void ServerTotals(std::string& out, const ServerStats& stats) {
  Family(out, "rdmarpc_server_connections", "gauge", "Connections open now.");
  Sample(out, "rdmarpc_server_connections", "", stats.connections);
  Family(out, "rdmarpc_server_live_calls", "gauge",
         "Calls started and not yet finished.");
  Sample(out, "rdmarpc_server_live_calls", "", stats.live_calls);
  const struct {
    const char* name;
    uint64_t value;
    const char* help;
  } counters[] = {
      {"responses_dropped", stats.responses_dropped,
       "Responses finished after their call's cancel or deadline."},
      {"responses_refused", stats.responses_refused,
       "Responses a full send queue refused (answered RESOURCE_EXHAUSTED)."},
      {"protocol_errors", stats.protocol_errors,
       "Connections closed for malformed input."},
      {"unknown_method_calls", stats.unknown_method_calls,
       "Calls of no registered method (answered UNIMPLEMENTED)."},
      {"stream_frames_dropped", stats.stream_frames_dropped,
       "Stream frames for no open stream."},
      {"calls_over_limit", stats.calls_over_limit,
       "Calls over max_calls_per_connection."},
      {"calls_shed", stats.calls_shed,
       "Calls over max_concurrency or a method's limit."},
      {"connections_refused", stats.connections_refused,
       "Connections over max_connections."},
      {"peers_timed_out", stats.peers_timed_out,
       "Connections closed because the client went silent (keepalive)."},
      {"connections_recycled", stats.connections_recycled,
       "Connections closed for max_connection_age or max_connection_idle."},
  };
  for (const auto& counter : counters) {
    const std::string name =
        std::string("rdmarpc_server_") + counter.name + "_total";
    Family(out, name, "counter", counter.help);
    Sample(out, name, "", counter.value);
  }
}

// Per transport (the scheme of the connection's peer URI), the counters of
// its open connections, summed.
void Transports(std::string& out, const Server& server) {
  struct Sums {
    uint64_t connections = 0;
    uint64_t queued_bytes = 0;
    transport::ConnectionStats counters;
  };
  std::map<std::string, Sums> by_transport;
  server.ForEachTransport(
      [&](const std::string& transport, const Server::TransportTotals& totals) {
        Sums& sums = by_transport[transport];
        sums.connections = totals.open;
        sums.queued_bytes = totals.queued_bytes;
        sums.counters.Add(totals.counters);
      });
  Family(out, "rdmarpc_transport_queued_bytes", "gauge",
         "Bytes of frames queued on the open connections, not yet handed to "
         "the socket or the send queue.");
  for (const auto& [transport, sums] : by_transport) {
    Sample(out, "rdmarpc_transport_queued_bytes",
           "transport=\"" + PrometheusLabelValue(transport) + "\"",
           sums.queued_bytes);
  }
  Family(out, "rdmarpc_transport_connections", "gauge",
         "Connections open now, per transport.");
  for (const auto& [transport, sums] : by_transport) {
    Sample(out, "rdmarpc_transport_connections",
           "transport=\"" + PrometheusLabelValue(transport) + "\"",
           sums.connections);
  }
  for (const transport::ConnectionCounter& counter :
       transport::kConnectionCounters) {
    const std::string name =
        std::string("rdmarpc_transport_") + counter.name + "_total";
    Family(out, name, "counter",
           std::string(counter.help) +
               " Summed over every connection the server has had.");
    for (const auto& [transport, sums] : by_transport) {
      Sample(out, name, "transport=\"" + PrometheusLabelValue(transport) + "\"",
             (sums.counters.*counter.member).load(std::memory_order_relaxed));
    }
  }
}

void Process(std::string& out) {
  const long long rss_kib = ProcessStatusField(0, "VmRSS");
  if (rss_kib >= 0) {
    Family(out, "process_resident_memory_bytes", "gauge",
           "Resident memory size in bytes.");
    Sample(out, "process_resident_memory_bytes", "",
           static_cast<uint64_t>(rss_kib) * 1024);
  }
  const long long fds = OpenFileCount(0);
  if (fds >= 0) {
    Family(out, "process_open_fds", "gauge", "Open file descriptors.");
    Sample(out, "process_open_fds", "", static_cast<uint64_t>(fds));
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6;
  };
  Family(out, "process_cpu_seconds_total", "counter",
         "User and system CPU time spent, in seconds.");
  Sample(out, "process_cpu_seconds_total", "",
         seconds(usage.ru_utime) + seconds(usage.ru_stime));
}

// This process's channels, per target (rpc/builtin/client_metrics.h).
void Clients(std::string& out) {
  const std::vector<ClientTargetMetrics> targets = ReadClientMetrics();
  if (targets.empty()) return;
  std::vector<std::string> labels;
  labels.reserve(targets.size());
  for (const ClientTargetMetrics& t : targets) {
    labels.push_back("target=\"" + PrometheusLabelValue(t.target) + "\"");
  }
  const auto family = [&](std::string_view name, std::string_view type,
                          std::string_view help, auto value) {
    Family(out, name, type, help);
    for (size_t i = 0; i < targets.size(); ++i) {
      Sample(out, name, labels[i], static_cast<uint64_t>(value(targets[i])));
    }
  };
  using T = const ClientTargetMetrics&;
  family("rdmarpc_client_channels", "gauge", "Channels open to the target.",
         [](T t) { return t.channels; });
  family("rdmarpc_client_calls_outstanding", "gauge",
         "Calls started and not yet completed.",
         [](T t) { return t.stats.outstanding_calls; });
  family("rdmarpc_client_connects_total", "counter",
         "Connections made (the first, and each reconnect).",
         [](T t) { return t.stats.connects; });
  family("rdmarpc_client_connect_failures_total", "counter",
         "Connection attempts that failed.",
         [](T t) { return t.stats.connect_failures; });
  family("rdmarpc_client_disconnects_total", "counter", "Connections lost.",
         [](T t) { return t.stats.disconnects; });
  family("rdmarpc_client_keepalive_timeouts_total", "counter",
         "Connections closed because the server sent nothing, not even a "
         "keepalive PONG.",
         [](T t) { return t.stats.keepalive_timeouts; });
  family("rdmarpc_client_retries_total", "counter",
         "Attempts sent again by a retry policy.",
         [](T t) { return t.stats.retries; });
  family("rdmarpc_client_hedges_total", "counter", "Hedged attempts sent.",
         [](T t) { return t.stats.hedges; });
  family("rdmarpc_client_retries_throttled_total", "counter",
         "Retries and hedges the retry budget refused.",
         [](T t) { return t.stats.retries_throttled; });
  family("rdmarpc_client_late_responses_dropped_total", "counter",
         "Responses that arrived after their call had completed.",
         [](T t) { return t.stats.late_responses_dropped; });
  family("rdmarpc_client_calls_held_total", "counter",
         "Calls that waited for the request window before being sent.",
         [](T t) { return t.stats.calls_held; });
  family("rdmarpc_client_calls_repicked_total", "counter",
         "Calls that reached an endpoint after its GOAWAY and went to another.",
         [](T t) { return t.stats.calls_repicked; });
  family("rdmarpc_client_bulk_releases_total", "counter",
         "Cancelled calls whose lent windows the server released.",
         [](T t) { return t.stats.bulk_releases; });
  family("rdmarpc_client_bulk_releases_timed_out_total", "counter",
         "Cancelled calls whose lent windows were invalidated unreleased.",
         [](T t) { return t.stats.bulk_releases_timed_out; });
  family("rdmarpc_client_endpoints", "gauge",
         "A cluster's endpoints now (0 for one server).",
         [](T t) { return t.endpoints; });
  family("rdmarpc_client_endpoints_ready", "gauge",
         "A cluster's endpoints connected now.",
         [](T t) { return t.endpoints_ready; });
  family("rdmarpc_client_endpoints_ejected", "gauge",
         "A cluster's endpoints ejected now by outlier detection.",
         [](T t) { return t.endpoints_ejected; });
  family("rdmarpc_client_ejections_total", "counter",
         "Ejections of the cluster's endpoints now.",
         [](T t) { return t.ejections; });
}

// Rails (docs/protocol.md "Rails"), one row per labels and rail number:
// a client target's, or the server's connections'.
struct RailRow {
  std::string labels;  // Without the rail's.
  RailStats stats;     // Summed.
  uint64_t up = 0;     // Connections whose rail is up.
};
void Rails(std::string& out, const std::vector<RailRow>& rows) {
  if (rows.empty()) return;
  const auto family = [&](std::string_view name, std::string_view type,
                          std::string_view help, auto value) {
    Family(out, name, type, help);
    for (const RailRow& row : rows) {
      Sample(out, name,
             row.labels + (row.labels.empty() ? "" : ",") + "rail=\"" +
                 std::to_string(row.stats.rail) + "\"",
             static_cast<uint64_t>(value(row)));
    }
  };
  using R = const RailRow&;
  family("rdmarpc_rail_up", "gauge",
         "Connections of several rails whose rail this is, up now.",
         [](R r) { return r.up; });
  family("rdmarpc_rail_bulk_bytes_total", "counter",
         "Bulk bytes pulled or pushed in slices on the rail.",
         [](R r) { return r.stats.bulk_bytes; });
  family("rdmarpc_rail_slices_total", "counter",
         "Bulk slices completed on the rail.",
         [](R r) { return r.stats.slices; });
  family("rdmarpc_rail_slices_resent_total", "counter",
         "Slices the rail completed after a failed rail had them.",
         [](R r) { return r.stats.slices_resent; });
  family("rdmarpc_rail_failures_total", "counter",
         "Times the rail's connection failed.",
         [](R r) { return r.stats.failures; });
  family("rdmarpc_rail_joins_total", "counter",
         "Times the rail joined its session, the first included.",
         [](R r) { return r.stats.joins; });
}

std::vector<RailRow> ClientRails() {
  std::vector<RailRow> rows;
  for (const ClientTargetMetrics& t : ReadClientMetrics()) {
    for (const auto& [rail, stats] : t.rails) {
      rows.push_back(
          {"side=\"client\",target=\"" + PrometheusLabelValue(t.target) + "\"",
           stats, t.rails_up.at(rail)});
    }
  }
  return rows;
}

std::vector<RailRow> ServerRails(const Server& server) {
  std::map<uint8_t, RailRow> by_rail;
  server.ForEachConnection([&](const transport::Connection& connection) {
    for (const RailStats& rail : connection.rail_stats()) {
      RailRow& row = by_rail[rail.rail];
      row.labels = "side=\"server\"";
      AddRail(row.stats, rail);
      row.up += rail.up ? 1 : 0;
    }
  });
  std::vector<RailRow> rows;
  rows.reserve(by_rail.size());
  for (auto& [rail, row] : by_rail) rows.push_back(std::move(row));
  return rows;
}

// Counter names as the driver spells them, made Prometheus names.
std::string MetricName(std::string_view name) {
  std::string out;
  for (const char c : name) {
    out += (std::isalnum(static_cast<unsigned char>(c)) != 0)
               ? static_cast<char>(std::tolower(static_cast<unsigned char>(c)))
               : '_';
  }
  return out;
}

// The process's RDMA resources (transport/rdma), and each device port's
// own counters (what `rdma statistic` shows).
void Rdma(std::string& out) {
  namespace rdma = transport::rdma;
  // A family of one sample.
  const auto single = [&](std::string_view name, std::string_view type,
                          std::string_view help, uint64_t value) {
    Family(out, name, type, help);
    Sample(out, name, "", value);
  };
  const auto gauge = [&](std::string_view name, std::string_view help,
                         uint64_t value) {
    single(name, "gauge", help, value);
  };
  const auto counter = [&](std::string_view name, std::string_view help,
                           uint64_t value) {
    single(name, "counter", help, value);
  };
  const rdma::ResourceUsage usage = rdma::ReadResourceUsage();
  gauge("rdmarpc_rdma_queue_pairs", "Queue pairs open in this process.",
        usage.queue_pairs);
  gauge("rdmarpc_rdma_registered_bytes",
        "Bytes registered (pinned) with RDMA devices now.",
        usage.registered_bytes);
  gauge("rdmarpc_rdma_pooled_bytes",
        "Of those, bytes of the pools that connections share.",
        usage.pooled_bytes);
  gauge("rdmarpc_rdma_granted_bytes",
        "Bytes granted to peers' large frames now.", usage.granted_bytes);
  gauge("rdmarpc_rdma_parked_ids",
        "Ids of connections closed on a port that is down, destroyed once it "
        "is back up.",
        usage.parked_ids);
  if (usage.locked_memory_limit) {
    gauge("rdmarpc_rdma_memory_lock_limit_bytes",
          "RLIMIT_MEMLOCK, which bounds what this process may register.",
          *usage.locked_memory_limit);
  }
  counter("rdmarpc_rdma_registrations_total", "ibv_reg_mr calls.",
          usage.registrations);
  counter("rdmarpc_rdma_pool_growths_total",
          "Chunks added to the registered pools.", usage.pool_growths);
  counter("rdmarpc_rdma_completion_wakeups_total",
          "Completion-channel wake-ups.", usage.completion_wakeups);
  counter("rdmarpc_rdma_completions_total", "Work completions polled.",
          usage.completions_polled);
  // One family per driver counter, a sample per device port.
  std::map<std::string, std::vector<const rdma::PortCounter*>> families;
  const std::vector<rdma::PortCounter> counters = rdma::ReadPortCounters();
  for (const rdma::PortCounter& c : counters) {
    families["rdmarpc_rdma_port_" + MetricName(c.name) + "_total"].push_back(
        &c);
  }
  for (const auto& [name, samples] : families) {
    Family(out, name, "counter",
           "The device's own counter " + samples.front()->name +
               " (sysfs hw_counters).");
    for (const rdma::PortCounter* c : samples) {
      Sample(out, name,
             "device=\"" + PrometheusLabelValue(c->device) + "\",port=\"" +
                 std::to_string(c->port) + "\"",
             c->value);
    }
  }
}

}  // namespace

std::string PrometheusLabelValue(std::string_view value) {
  std::string escaped;
  escaped.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      escaped += "\\\\";
    } else if (c == '"') {
      escaped += "\\\"";
    } else if (c == '\n') {
      escaped += "\\n";
    } else {
      escaped += c;
    }
  }
  return escaped;
}

std::string PrometheusText(const Server& server) {
  std::vector<MethodRow> rows;
  server.ForEachMethod([&](const std::string& service,
                           const std::string& method,
                           const MethodMetrics& metrics) {
    rows.push_back(ReadMethod(service, method, metrics));
  });
  std::string out;
  Methods(out, rows);
  ServerTotals(out, server.stats());
  Transports(out, server);
  Clients(out);
  std::vector<RailRow> rails = ServerRails(server);
  for (RailRow& row : ClientRails()) rails.push_back(std::move(row));
  Rails(out, rails);
  Rdma(out);
  Process(out);
  return out;
}

std::string PrometheusClientText() {
  std::string out;
  Clients(out);
  Rails(out, ClientRails());
  Rdma(out);
  Process(out);
  return out;
}

}  // namespace rdmarpc::rpc
