# The library's sources, for CMake: the same files Bazel builds into
# //:rdmarpc (tools/cmake-check compares the two lists and names a file that
# is in one only). Groups that Bazel compiles as one translation unit
# (bazel/unity.bzl) are compiled so here too; the rest one by one.

set(RDMARPC_UNITY_RPC
  rpc/channel.cc
  rpc/client/bulk_loans.cc
  rpc/client/call_table.cc
  rpc/client/callback_runner.cc
  rpc/client/client_loops.cc
  rpc/client/client_stream.cc
  rpc/client/subchannel.cc
  rpc/client/subchannel_bulk.cc
  rpc/client/subchannel_connection.cc
  rpc/client/subchannel_receive.cc
  rpc/cluster/cluster.cc
  rpc/cluster/cluster_health.cc
  rpc/cluster/hash_ring.cc
  rpc/cluster/retry.cc
  rpc/common/authorization.cc
  rpc/common/event_loop.cc
  rpc/common/executor.cc
  rpc/common/interceptor.cc
  rpc/common/metadata.cc
  rpc/common/stream.cc
  rpc/server.cc
  rpc/server/admission.cc
  rpc/server/lifetime.cc
  rpc/server/metrics.cc
  rpc/server/server_call.cc
  rpc/server/server_session.cc
  rpc/server/server_session_end.cc
  rpc/wire/call_header.cc
  rpc/wire/wire_codec.cc)

set(RDMARPC_UNITY_ADMIN
  rpc/builtin/admin.cc
  rpc/builtin/admin_service.cc
  rpc/builtin/client_admin.cc
  rpc/builtin/client_metrics.cc
  rpc/builtin/prometheus.cc
  rpc/builtin/status_page.cc)

set(RDMARPC_UNITY_NAMING
  naming/dns_resolver.cc
  naming/etcd_resolver.cc
  naming/registration.cc
  naming/resolver.cc)

set(RDMARPC_UNITY_TCP
  transport/tcp/tcp_bulk.cc
  transport/tcp/tcp_connection.cc
  transport/tcp/tcp_receive.cc
  transport/tcp/tcp_send.cc
  transport/tcp/tcp_tls.cc
  transport/tcp/tcp_transport.cc)

set(RDMARPC_UNITY_RDMA
  transport/rdma/cm_channel.cc
  transport/rdma/completion_group.cc
  transport/rdma/device_events.cc
  transport/rdma/device_info.cc
  transport/rdma/grant_pool.cc
  transport/rdma/loop_state.cc
  transport/rdma/rdma_admission.cc
  transport/rdma/rdma_bulk.cc
  transport/rdma/rdma_close.cc
  transport/rdma/rdma_completions.cc
  transport/rdma/rdma_connection.cc
  transport/rdma/rdma_rendezvous.cc
  transport/rdma/rdma_send.cc
  transport/rdma/rdma_standing.cc
  transport/rdma/rdma_transport.cc
  transport/rdma/rdma_writes.cc
  transport/rdma/read_depth.cc
  transport/rdma/registration_cache.cc
  transport/rdma/resource_usage.cc
  transport/rdma/verbs.cc
  transport/rdma/write_plan.cc)

set(RDMARPC_SOURCES
  base/buffer.cc
  base/buffer_pool.cc
  base/futex_mutex.cc
  base/large_block.cc
  base/log.cc
  base/log_throttle.cc
  base/process_stats.cc
  base/status.cc
  naming/etcd_client.cc
  naming/etcd_exchange.cc
  rpc/builtin/health.cc
  rpc/builtin/introspection.cc
  rpc/typed/typed.cc
  transport/bulk.cc
  transport/factory/factory.cc
  transport/frame.cc
  transport/memory.cc
  transport/peer_budget.cc
  transport/rails/rail_sessions.cc
  transport/rails/railed_bulk.cc
  transport/rails/railed_connection.cc
  transport/rdma/grant_memory.cc
  transport/rdma/peer_checks.cc
  transport/rdma/rdma_auth.cc
  transport/tcp/tcp_tls_handshake.cc
  transport/tls/tls_context.cc
  transport/tls/tls_session.cc
  transport/uri.cc)

# The library's own .proto files: messages (protoc) and, for services, the
# plugin's stubs (rdmarpc_generate).
set(RDMARPC_PROTOS proto/health.proto proto/introspection.proto)
set(RDMARPC_MESSAGE_PROTOS naming/etcd.proto)
