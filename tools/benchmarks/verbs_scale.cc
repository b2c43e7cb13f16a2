// The raw-verbs baseline for the scale benchmark (tools/benchmarks/scale.cc):
// the same shape with no RPC stack. One server process echoes 16 B SENDs
// on N reliable-connected QPs that share one CQ (with a completion channel,
// waited on as rdmarpc's event mode does) and one shared receive queue; P
// client processes keep K messages outstanding in all, each answered one
// starting the next on the next of their QPs. Prints the calls/s and the
// server's CPU time per call, to compare as ratios between N, in one boot.
//
//   verbs_scale --ip ADDR --connections N [--processes 4]
//               [--outstanding 256] [--seconds 5]
#include <arpa/inet.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/flags.h"
#include "base/process_stats.h"
#include "tools/benchmarks/spawn.h"
#include "tools/benchmarks/verbs_util.h"
#include "transport/rdma/verbs.h"

namespace rdmarpc::bench {
namespace {

using transport::rdma::CmId;
using transport::rdma::CompletionChannel;
using transport::rdma::CompletionQueue;
using transport::rdma::EventChannel;
using transport::rdma::ProtectionDomain;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kSize = 16;
constexpr uint32_t kSlot = 64;

[[noreturn]] void Die(const std::string& what) {
  bench::Die("verbs_scale", what);
}

rdma_cm_event* Next(rdma_event_channel* channel) {
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(channel, &event) != 0) Die("rdma_get_cm_event");
  return event;
}

// A CQ with its completion channel, and registered slots of kSlot bytes.
struct Endpoint {
  ibv_context* verbs = nullptr;
  ProtectionDomain pd;
  CompletionChannel channel;
  CompletionQueue cq;
  std::vector<std::byte> memory;
  RawMemoryRegion mr;

  void Open(ibv_context* context, int cq_entries, size_t slots) {
    verbs = context;
    pd.reset(ibv_alloc_pd(verbs));
    channel.reset(ibv_create_comp_channel(verbs));
    if (!pd || !channel) Die("ibv_alloc_pd/ibv_create_comp_channel");
    cq.reset(ibv_create_cq(verbs, cq_entries, nullptr, channel.get(), 0));
    if (!cq) Die("ibv_create_cq");
    memory.assign(slots * kSlot, std::byte{0});
    mr.reset(ibv_reg_mr(pd.get(), memory.data(), memory.size(),
                        IBV_ACCESS_LOCAL_WRITE));
    if (!mr) Die("ibv_reg_mr");
    if (ibv_req_notify_cq(cq.get(), 0) != 0) Die("ibv_req_notify_cq");
  }
  ibv_sge Sge(size_t slot, uint32_t length) {
    return {reinterpret_cast<uint64_t>(memory.data() + slot * kSlot), length,
            mr->lkey};
  }
  // Posts slot `slot` as a receive on `qp`, or on `srq` when given.
  void Receive(ibv_qp* qp, ibv_srq* srq, size_t slot) {
    ibv_sge sge = Sge(slot, kSlot);
    ibv_recv_wr wr{};
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if ((srq != nullptr ? ibv_post_srq_recv(srq, &wr, &bad)
                        : ibv_post_recv(qp, &wr, &bad)) != 0) {
      Die("ibv_post_recv");
    }
  }
  void Send(ibv_qp* qp, size_t slot) {
    ibv_sge sge = Sge(slot, kSize);
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp, &wr, &bad) != 0) Die("ibv_post_send");
  }
  // Waits up to `timeout_ms` for completions (event mode: arm, wait, drain)
  // and hands each to `on`.
  template <typename F>
  void Wait(int timeout_ms, F&& on) {
    ibv_wc wcs[32];
    auto drain = [&] {
      int n;
      while ((n = ibv_poll_cq(cq.get(), 32, wcs)) > 0) {
        for (int i = 0; i < n; ++i) {
          if (wcs[i].status != IBV_WC_SUCCESS) {
            std::fprintf(stderr, "verbs_scale: completion error: %s\n",
                         ibv_wc_status_str(wcs[i].status));
            std::exit(1);
          }
          on(wcs[i]);
        }
      }
      if (n < 0) Die("ibv_poll_cq");
    };
    drain();
    pollfd fd{channel->fd, POLLIN, 0};
    if (poll(&fd, 1, timeout_ms) <= 0) return;
    ibv_cq* cq_out = nullptr;
    void* context = nullptr;
    if (ibv_get_cq_event(channel.get(), &cq_out, &context) != 0) {
      Die("ibv_get_cq_event");
    }
    ibv_ack_cq_events(cq.get(), 1);
    if (ibv_req_notify_cq(cq.get(), 0) != 0) Die("ibv_req_notify_cq");
    drain();
  }
};

int Client(const rdmarpc::Flags& flags) {
  const std::string ip = flags.Get("ip", "");
  const int port = static_cast<int>(flags.GetInt("port", 0));
  const int n = static_cast<int>(flags.GetInt("connections", 1));
  const int k = static_cast<int>(flags.GetInt("outstanding", 1));
  const double seconds = std::atof(flags.Get("seconds", "5").c_str());
  EventChannel events(rdma_create_event_channel());
  if (!events) Die("rdma_create_event_channel");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip.c_str(), &address.sin_addr);
  Endpoint end;
  std::vector<CmId> ids;
  const int depth = k + 1;  // Receives per QP: all of K may land on one.
  for (int i = 0; i < n; ++i) {
    rdma_cm_id* raw = nullptr;
    if (rdma_create_id(events.get(), &raw, nullptr, RDMA_PS_TCP) != 0) {
      Die("rdma_create_id");
    }
    ids.emplace_back(raw);
    if (rdma_resolve_addr(raw, nullptr, reinterpret_cast<sockaddr*>(&address),
                          5000) != 0) {
      Die("rdma_resolve_addr");
    }
    rdma_ack_cm_event(Next(events.get()));
    if (rdma_resolve_route(raw, 5000) != 0) Die("rdma_resolve_route");
    rdma_ack_cm_event(Next(events.get()));
    if (i == 0) {
      // At most K sends and K replies complete at once.
      end.Open(raw->verbs, 4 * k + 64, static_cast<size_t>(n) * depth + k);
    }
    ibv_qp_init_attr attr{};
    attr.send_cq = attr.recv_cq = end.cq.get();
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = k + 1;
    attr.cap.max_recv_wr = depth;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    attr.cap.max_inline_data = kSize;
    if (rdma_create_qp(raw, end.pd.get(), &attr) != 0) Die("rdma_create_qp");
    for (int r = 0; r < depth; ++r) {
      end.Receive(raw->qp, nullptr, static_cast<size_t>(i) * depth + r);
    }
    rdma_conn_param param{};
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    if (rdma_connect(raw, &param) != 0) Die("rdma_connect");
    rdma_cm_event* event = Next(events.get());
    if (event->event != RDMA_CM_EVENT_ESTABLISHED) {
      std::fprintf(stderr, "verbs_scale: connect: %s\n",
                   rdma_event_str(event->event));
      return 1;
    }
    rdma_ack_cm_event(event);
  }
  std::unordered_map<uint32_t, ibv_qp*> qps;
  for (const CmId& id : ids) qps[id->qp->qp_num] = id->qp;
  std::printf("ready\n");
  std::fflush(stdout);
  char go[8];
  if (std::fgets(go, sizeof(go), stdin) == nullptr) return 1;

  const size_t send_slot = static_cast<size_t>(n) * depth;
  size_t next = 0;
  for (int i = 0; i < k; ++i) end.Send(ids[next++ % n]->qp, send_slot);
  uint64_t calls = 0;
  const auto start = Clock::now();
  const auto until = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < until) {
    end.Wait(100, [&](const ibv_wc& wc) {
      if ((wc.opcode & IBV_WC_RECV) == 0) return;
      ++calls;
      end.Receive(qps[wc.qp_num], nullptr, wc.wr_id);
      end.Send(ids[next++ % n]->qp, send_slot);
    });
  }
  const double elapsed =
      std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("result %llu %.6f\n", static_cast<unsigned long long>(calls),
              elapsed);
  std::fflush(stdout);
  // Stay until the server has stopped answering (it closes our stdin).
  while (std::fgets(go, sizeof(go), stdin) != nullptr) {
  }
  std::_Exit(0);
}

int Server(const rdmarpc::Flags& flags) {
  const std::string ip = flags.Get("ip", "");
  const int n = static_cast<int>(flags.GetInt("connections", 8));
  const int processes =
      std::min<int>(n, static_cast<int>(flags.GetInt("processes", 4)));
  const int k = static_cast<int>(flags.GetInt("outstanding", 256));
  const std::string seconds = flags.Get("seconds", "5");
  EventChannel events(rdma_create_event_channel());
  rdma_cm_id* raw = nullptr;
  if (!events || rdma_create_id(events.get(), &raw, nullptr, RDMA_PS_TCP)) {
    Die("rdma_create_id");
  }
  CmId listener(raw);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  inet_pton(AF_INET, ip.c_str(), &address.sin_addr);
  if (rdma_bind_addr(raw, reinterpret_cast<sockaddr*>(&address)) ||
      rdma_listen(raw, 1024)) {
    Die("rdma_bind_addr/rdma_listen " + ip);
  }
  const int port = ntohs(rdma_get_src_port(raw));

  std::vector<ChildProcess> children;
  for (int p = 0; p < processes; ++p) {
    const int share = n / processes + (p < n % processes);
    const int load = std::max(1, k / processes + (p < k % processes));
    children.push_back(SpawnSelf(
        {"verbs_scale", "--client", "1", "--ip", ip, "--port",
         std::to_string(port), "--connections", std::to_string(share),
         "--outstanding", std::to_string(load), "--seconds", seconds}));
  }

  // Accept N: their QPs share one CQ and one shared receive queue.
  Endpoint end;
  ibv_srq* srq = nullptr;
  constexpr int kReceives = 1024;  // Beyond the K that can be in flight.
  std::vector<CmId> ids;
  std::unordered_map<uint32_t, ibv_qp*> qps;
  for (int established = 0; established < n;) {
    rdma_cm_event* event = Next(events.get());
    if (event->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
      rdma_cm_id* id = event->id;
      rdma_ack_cm_event(event);
      if (!end.verbs) {
        end.Open(id->verbs, 4 * k + kReceives + 64, kReceives + 1);
        ibv_srq_init_attr attr{};
        attr.attr.max_wr = kReceives;
        attr.attr.max_sge = 1;
        srq = ibv_create_srq(end.pd.get(), &attr);
        if (srq == nullptr) Die("ibv_create_srq");
        for (int r = 0; r < kReceives; ++r) end.Receive(nullptr, srq, r);
      }
      ibv_qp_init_attr attr{};
      attr.send_cq = attr.recv_cq = end.cq.get();
      attr.srq = srq;
      attr.qp_type = IBV_QPT_RC;
      attr.cap.max_send_wr = k + 1;
      attr.cap.max_send_sge = 1;
      attr.cap.max_inline_data = kSize;
      if (rdma_create_qp(id, end.pd.get(), &attr) != 0) Die("rdma_create_qp");
      qps[id->qp->qp_num] = id->qp;
      ids.emplace_back(id);
      rdma_conn_param param{};
      param.rnr_retry_count = 7;
      if (rdma_accept(id, &param) != 0) Die("rdma_accept");
    } else {
      if (event->event == RDMA_CM_EVENT_ESTABLISHED) ++established;
      rdma_ack_cm_event(event);
    }
  }
  char line[256];
  for (ChildProcess& child : children) {
    if (std::fgets(line, sizeof(line), child.out) == nullptr ||
        std::strncmp(line, "ready", 5) != 0) {
      std::fprintf(stderr, "verbs_scale: a client did not connect\n");
      return 1;
    }
  }
  std::atomic<bool> stop{false};
  uint64_t served = 0;
  const double cpu0 = ProcessCpuTime().total();
  std::thread loop([&] {
    while (!stop.load()) {
      end.Wait(100, [&](const ibv_wc& wc) {
        if ((wc.opcode & IBV_WC_RECV) == 0) return;
        ++served;
        // Echo: the reply is inline, so the buffer goes back at once.
        end.Send(qps[wc.qp_num], wc.wr_id);
        end.Receive(nullptr, srq, wc.wr_id);
      });
    }
  });
  for (ChildProcess& child : children) {
    std::fputs("go\n", child.in);
    std::fflush(child.in);
  }
  uint64_t calls = 0;
  double elapsed = 0;
  for (ChildProcess& child : children) {
    unsigned long long c = 0;
    double e = 0;
    if (std::fgets(line, sizeof(line), child.out) == nullptr ||
        std::sscanf(line, "result %llu %lf", &c, &e) != 2) {
      std::fprintf(stderr, "verbs_scale: a client did not report\n");
      return 1;
    }
    calls += c;
    elapsed = std::max(elapsed, e);
  }
  const double cpu = ProcessCpuTime().total() - cpu0;
  stop = true;
  loop.join();
  for (ChildProcess& child : children) child.Reap();
  std::printf(
      "raw verbs scale: %d QPs (%d client processes, %d outstanding): %.0f "
      "calls/s, server CPU %.1f us per call\n",
      n, processes, k, calls / elapsed,
      cpu * 1e6 / std::max<uint64_t>(served, 1));
  for (CmId& id : ids) rdma_destroy_qp(id.get());
  if (srq != nullptr) ibv_destroy_srq(srq);
  return 0;
}

}  // namespace
}  // namespace rdmarpc::bench

int main(int argc, char** argv) {
  const rdmarpc::Flags flags(argc, argv);
  if (flags.GetInt("client", 0) != 0) return rdmarpc::bench::Client(flags);
  return rdmarpc::bench::Server(flags);
}
