#include "rdmarpc/introspection.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <set>
#include <string>

#include "proto/introspection.rdmarpc.h"
#include "rpc/server/metrics.h"
#include "transport/connection.h"
#include "transport/rdma/resource_usage.h"

namespace rdmarpc {
namespace {

namespace pb = google::protobuf;

const pb::ServiceDescriptor* DescriptorOf(std::string_view service) {
  return pb::DescriptorPool::generated_pool()->FindServiceByName(
      std::string(service));
}

// Adds `file` after everything it imports, each file once.
void AddFile(const pb::FileDescriptor* file, std::set<std::string>& added,
             pb::FileDescriptorSet& set) {
  if (!added.insert(file->name()).second) return;
  for (int i = 0; i < file->dependency_count(); ++i) {
    AddFile(file->dependency(i), added, set);
  }
  file->CopyTo(set.add_file());
}

class IntrospectionService final : public Introspection::Service {
 public:
  explicit IntrospectionService(const Server& server) : server_(server) {}

  void ListServices(
      std::shared_ptr<TypedCall<ListServicesRequest, ListServicesResponse>>
          call) override {
    call->response() = rpc::ListServices(server_);
    call->Finish();
  }

  void GetFileDescriptors(
      std::shared_ptr<
          TypedCall<GetFileDescriptorsRequest, GetFileDescriptorsResponse>>
          call) override {
    auto files = rpc::GetFileDescriptors(server_, call->request().service());
    if (!files.ok()) return call->Finish(files.status());
    call->response() = std::move(*files);
    call->Finish();
  }

  void GetMetrics(std::shared_ptr<TypedCall<GetMetricsRequest, ServerMetrics>>
                      call) override {
    call->response() = rpc::GetMetrics(server_);
    call->Finish();
  }

 private:
  const Server& server_;  // Owns this service.
};

}  // namespace

void EnableIntrospection(Server& server) {
  server.RegisterService(std::make_unique<IntrospectionService>(server));
}

ListServicesResponse ListServices(const Server& server) {
  ListServicesResponse response;
  for (const Service* service : server.services()) {
    ServiceInfo* info = response.add_services();
    info->set_name(service->name());
    for (const std::string& method : service->method_names()) {
      info->add_methods(method);
    }
    info->set_has_descriptor(DescriptorOf(service->name()) != nullptr);
  }
  return response;
}

StatusOr<GetFileDescriptorsResponse> GetFileDescriptors(
    const Server& server, std::string_view wanted) {
  GetFileDescriptorsResponse response;
  std::set<std::string> added;
  bool found = false;
  for (const Service* service : server.services()) {
    if (!wanted.empty() && service->name() != wanted) continue;
    found = true;
    const pb::ServiceDescriptor* descriptor = DescriptorOf(service->name());
    if (descriptor == nullptr) {
      if (wanted.empty()) continue;  // Listing all: skip hand-built ones.
      return Status(StatusCode::kFailedPrecondition,
                    "service '" + service->name() +
                        "' was not generated from a .proto: no descriptor");
    }
    AddFile(descriptor->file(), added, *response.mutable_files());
  }
  if (!found) {
    return Status(StatusCode::kNotFound,
                  "no service '" + std::string(wanted) + "' on this server");
  }
  return response;
}

namespace {

void AddMethod(const std::string& service, const std::string& method,
               const rpc::MethodMetrics& counted, ServerMetrics& metrics) {
  auto* out = metrics.add_methods();
  out->set_service(service);
  out->set_method(method);
  out->set_started(counted.started.load(std::memory_order_relaxed));
  for (int code = 0; code < rpc::MethodMetrics::kCodes; ++code) {
    const uint64_t count =
        counted.finished_by_code[code].load(std::memory_order_relaxed);
    if (count == 0) continue;
    auto* finished = out->add_finished();
    finished->set_code(code);
    finished->set_name(
        std::string(StatusCodeName(static_cast<StatusCode>(code))));
    finished->set_count(count);
  }
  out->set_request_bytes(counted.request_bytes.load());
  out->set_response_bytes(counted.response_bytes.load());
  const rpc::LatencyHistogram::Snapshot latency = counted.latency.Read();
  for (int i = 0; i < rpc::LatencyHistogram::kBuckets; ++i) {
    if (latency.counts[i] == 0) continue;
    auto* bucket = out->add_latency();
    bucket->set_upper_bound_us(rpc::LatencyHistogram::UpperBoundUs(i));
    bucket->set_count(latency.counts[i]);
  }
  out->set_p50_us(latency.PercentileUs(0.5));
  out->set_p99_us(latency.PercentileUs(0.99));
  out->set_p999_us(latency.PercentileUs(0.999));
  out->set_max_us(latency.max_ns / 1000.0);
  out->set_mean_us(
      latency.total == 0 ? 0 : latency.sum_ns / 1000.0 / latency.total);
  out->set_messages_received(
      counted.messages_received.load(std::memory_order_relaxed));
  out->set_messages_sent(counted.messages_sent.load(std::memory_order_relaxed));
  out->set_streams_open(counted.streams_open.load(std::memory_order_relaxed));
}

void AddConnection(const transport::Connection& connection,
                   ServerMetrics& metrics) {
  const transport::ConnectionStats& s = connection.stats();
  auto* out = metrics.add_connections();
  out->set_peer(connection.peer());
  out->set_frames_sent(s.frames_sent);
  out->set_frames_received(s.frames_received);
  out->set_bytes_sent(s.bytes_sent);
  out->set_bytes_received(s.bytes_received);
  out->set_write_calls(s.write_calls);
  out->set_read_calls(s.read_calls);
  out->set_oversized_frames_dropped(s.oversized_frames_dropped);
  out->set_inline_sends(s.inline_sends);
  out->set_rdma_writes(s.rdma_writes);
  out->set_zero_copy_bytes(s.zero_copy_bytes);
  out->set_staged_bytes(s.staged_bytes);
  out->set_registrations(s.registrations);
  out->set_credit_stalls(s.credit_stalls);
  out->set_credit_messages(s.credit_messages);
  out->set_rnr_errors(s.rnr_errors);
  out->set_cq_events(s.cq_events);
  out->set_cq_polls(s.cq_polls);
  out->set_credits_lent(s.credits_lent);
  out->set_credits_withheld(s.credits_withheld);
  out->set_credits_given_back(s.credits_given_back);
  out->set_credits_taken_back(s.credits_taken_back);
}

}  // namespace

ServerMetrics GetMetrics(const Server& server) {
  ServerMetrics metrics;
  const ServerStats stats = server.stats();
  metrics.set_calls_started(stats.calls_started);
  metrics.set_live_calls(stats.live_calls);
  metrics.set_unknown_method_calls(stats.unknown_method_calls);
  metrics.set_protocol_errors(stats.protocol_errors);
  metrics.set_responses_dropped(stats.responses_dropped);
  metrics.set_peers_timed_out(stats.peers_timed_out);
  server.ForEachMethod([&](const std::string& service,
                           const std::string& method,
                           const rpc::MethodMetrics& counted) {
    AddMethod(service, method, counted, metrics);
  });
  server.ForEachConnection([&](const transport::Connection& connection) {
    AddConnection(connection, metrics);
  });
  const transport::rdma::ResourceUsage usage =
      transport::rdma::ReadResourceUsage();
  RdmaResources* rdma = metrics.mutable_rdma();
  rdma->set_registrations(usage.registrations);
  rdma->set_registered_bytes(usage.registered_bytes);
  rdma->set_pooled_bytes(usage.pooled_bytes);
  rdma->set_granted_bytes(usage.granted_bytes);
  rdma->set_locked_memory_limit(usage.locked_memory_limit.value_or(0));
  rdma->set_queue_pairs(usage.queue_pairs);
  rdma->set_completion_wakeups(usage.completion_wakeups);
  rdma->set_completions_polled(usage.completions_polled);
  return metrics;
}

}  // namespace rdmarpc
