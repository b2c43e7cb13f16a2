// A server's metrics in the Prometheus text exposition format (version
// 0.0.4), as the admin endpoint's /metrics serves them (rpc/builtin/admin.h):
//
//   rdmarpc_server_calls_total{service,method,code}     counter
//   rdmarpc_server_calls_started_total{service,method}  counter
//   rdmarpc_server_request_bytes_total{service,method}  counter (and response)
//   rdmarpc_server_handling_seconds{service,method}     histogram: from a
//       request's arrival to its response queued, buckets at each power of
//       two from 1 us (rpc/server/metrics.h keeps 8 per power; these are
//       exact)
//   rdmarpc_server_{connections,live_calls}             gauges
//   rdmarpc_server_<event>_total                        ServerStats' counters
//   rdmarpc_transport_<counter>_total{transport}        counters summed over
//       every connection the server has had, per transport (tcp, rdma)
//   rdmarpc_client_<...>{target}                        this process's
//       Channels, summed per target (rpc/builtin/client_metrics.h): calls
//       outstanding, connects, retries, hedges, budget refusals, a
//       cluster's endpoints and ejections
//   process_resident_memory_bytes, process_open_fds, process_cpu_seconds_total
//
// Names and labels follow Prometheus's conventions: base units (seconds,
// bytes), `_total` on counters only, a HELP and a TYPE line per family.
#ifndef RDMARPC_RPC_BUILTIN_PROMETHEUS_H_
#define RDMARPC_RPC_BUILTIN_PROMETHEUS_H_

#include <string>
#include <string_view>

#include "rdmarpc/server.h"

namespace rdmarpc::rpc {

// The exposition of `server`'s metrics, and of this process's.
std::string PrometheusText(const Server& server);
// Those of this process only (its channels, its gauges): a client's
// (include/rdmarpc/admin.h).
std::string PrometheusClientText();

// `value` escaped for a label value: backslash, double quote and newline.
std::string PrometheusLabelValue(std::string_view value);

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_BUILTIN_PROMETHEUS_H_
