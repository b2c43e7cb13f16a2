// Raw-verbs baselines on rdmarpc's own RAII wrappers: the physical limit the
// RPC stack is measured against (tools/bench uses it on the same link).
//
//   verbs_baseline --ip ADDR --mode pingpong  --size 16      --iters 10000
//   verbs_baseline --ip ADDR --mode write-bw  --size 4194304 --iters 64
//   verbs_baseline --ip ADDR --mode read-bw   --size 4194304 --iters 64
//
// Both ends run in this process (a server thread and a client thread) over
// rdma_cm on ADDR, with busy polling as perftest does. Every mode checks its
// data. Prints one line of results; exits non-zero on any error.
#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/flags.h"
#include "base/latency_trace.h"
#include "tools/benchmarks/pin.h"
#include "tools/benchmarks/verbs_util.h"
#include "transport/rdma/verbs.h"

namespace rdmarpc::bench {
namespace {

using transport::rdma::CmId;
using transport::rdma::CompletionQueue;
using transport::rdma::EventChannel;
using transport::rdma::ProtectionDomain;
using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& what) {
  bench::Die("verbs_baseline", what);
}

using MemoryRegion = RawMemoryRegion;

// What the server tells the client in the accept's private data.
struct Grant {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint32_t size = 0;
};

// One side's verbs resources on an established (or establishing) cm_id.
struct Side {
  int trace_side = 0;  // For RDMARPC_TRACE: 0 client, 1 server.
  EventChannel events;
  CmId id;
  ProtectionDomain pd;
  CompletionQueue cq;
  std::vector<std::byte> memory;
  MemoryRegion mr;

  void Setup(size_t size, int depth) {
    pd.reset(ibv_alloc_pd(id->verbs));
    if (!pd) Die("ibv_alloc_pd");
    cq.reset(ibv_create_cq(id->verbs, 2 * depth + 4, nullptr, nullptr, 0));
    if (!cq) Die("ibv_create_cq");
    ibv_qp_init_attr attr{};
    attr.send_cq = attr.recv_cq = cq.get();
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = attr.cap.max_recv_wr = depth;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    if (rdma_create_qp(id.get(), pd.get(), &attr) != 0) Die("rdma_create_qp");
    memory.assign(std::max<size_t>(size, 1), std::byte{0});
    mr.reset(ibv_reg_mr(pd.get(), memory.data(), memory.size(),
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                            IBV_ACCESS_REMOTE_READ));
    if (!mr) Die("ibv_reg_mr");
  }
  void PostRecv(uint32_t length) {
    ibv_sge sge{reinterpret_cast<uint64_t>(memory.data()), length, mr->lkey};
    ibv_recv_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (ibv_post_recv(id->qp, &wr, &bad) != 0) Die("ibv_post_recv");
  }
  void Post(ibv_wr_opcode opcode, uint32_t length, const Grant* remote,
            bool signaled, uint32_t imm = 0) {
    ibv_sge sge{reinterpret_cast<uint64_t>(memory.data()), length, mr->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = opcode;
    wr.imm_data = htonl(imm);
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    if (remote != nullptr) {
      wr.wr.rdma.remote_addr = remote->addr;
      wr.wr.rdma.rkey = remote->rkey;
    }
    ibv_send_wr* bad = nullptr;
    RDMARPC_TRACE(trace_side, "post_start");
    if (ibv_post_send(id->qp, &wr, &bad) != 0) Die("ibv_post_send");
    RDMARPC_TRACE(trace_side, "post_end");
  }
  ibv_wc Wait() {  // Busy polls one completion.
    ibv_wc wc{};
    int n;
    while ((n = ibv_poll_cq(cq.get(), 1, &wc)) == 0) {
    }
    if (n < 0) Die("ibv_poll_cq");
    RDMARPC_TRACE(trace_side,
                  (wc.opcode & IBV_WC_RECV) != 0 ? "recv_cqe" : "send_cqe");
    if (wc.status != IBV_WC_SUCCESS) {
      std::fprintf(stderr, "verbs_baseline: completion error: %s\n",
                   ibv_wc_status_str(wc.status));
      std::exit(1);
    }
    return wc;
  }
};

rdma_cm_event* Expect(rdma_event_channel* channel, rdma_cm_event_type type) {
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(channel, &event) != 0) Die("rdma_get_cm_event");
  if (event->event != type) {
    std::fprintf(stderr, "verbs_baseline: expected %s, got %s\n",
                 rdma_event_str(type), rdma_event_str(event->event));
    std::exit(1);
  }
  return event;
}

void Fill(std::vector<std::byte>& memory, uint8_t seed) {
  for (size_t i = 0; i < memory.size(); ++i)
    memory[i] = std::byte(i * 7 + seed);
}
bool Check(const std::vector<std::byte>& memory, uint8_t seed, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    if (memory[i] != std::byte(i * 7 + seed)) return false;
  }
  return true;
}

int Run(const rdmarpc::Flags& flags) {
  const std::string ip = flags.Get("ip", "");
  const std::string mode = flags.Get("mode", "pingpong");
  const size_t size = static_cast<size_t>(flags.GetInt("size", 16));
  const int iters = static_cast<int>(flags.GetInt("iters", 1000));
  constexpr int kDepth = 16;  // Outstanding operations in bandwidth modes.
  if (ip.empty() || iters < 1 ||
      (mode != "pingpong" && mode != "write-bw" && mode != "read-bw")) {
    std::fprintf(stderr,
                 "usage: verbs_baseline --ip ADDR --mode pingpong|write-bw|"
                 "read-bw --size BYTES --iters N\n");
    return 2;
  }

  // Server: listen on an ephemeral port.
  Side server;
  server.trace_side = 1;
  server.events.reset(rdma_create_event_channel());
  rdma_cm_id* raw = nullptr;
  if (!server.events ||
      rdma_create_id(server.events.get(), &raw, nullptr, RDMA_PS_TCP) != 0) {
    Die("server rdma_create_id");
  }
  CmId listen_id(raw);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  inet_pton(AF_INET, ip.c_str(), &address.sin_addr);
  if (rdma_bind_addr(listen_id.get(), reinterpret_cast<sockaddr*>(&address)) ||
      rdma_listen(listen_id.get(), 1)) {
    Die("rdma_bind_addr/listen " + ip);
  }
  const uint16_t port = ntohs(rdma_get_src_port(listen_id.get()));

  // --pin 1: this (client) thread on CPU 0, the server thread on CPU 1.
  const bool pin = flags.GetInt("pin", 0) != 0;
  if (pin) PinThisThreadTo(0);
  std::thread server_thread([&] {
    if (pin) PinThisThreadTo(1);
    rdma_cm_event* request =
        Expect(server.events.get(), RDMA_CM_EVENT_CONNECT_REQUEST);
    server.id.reset(request->id);
    rdma_ack_cm_event(request);
    server.Setup(size, kDepth);
    if (mode == "read-bw") Fill(server.memory, 3);
    if (mode == "pingpong") server.PostRecv(static_cast<uint32_t>(size));
    if (mode == "write-bw") server.PostRecv(0);  // For the final WRITE_IMM.
    Grant grant{reinterpret_cast<uint64_t>(server.memory.data()),
                server.mr->rkey, static_cast<uint32_t>(size)};
    rdma_conn_param param{};
    param.private_data = &grant;
    param.private_data_len = sizeof(grant);
    param.responder_resources = param.initiator_depth = kDepth;
    if (rdma_accept(server.id.get(), &param) != 0) Die("rdma_accept");
    rdma_ack_cm_event(Expect(server.events.get(), RDMA_CM_EVENT_ESTABLISHED));
    if (mode == "pingpong") {
      // A pong's send completion and the next ping's receive may complete
      // in either order: count receives, answer each.
      for (int received = 0; received < iters;) {
        if (server.Wait().opcode != IBV_WC_RECV) continue;
        ++received;
        server.PostRecv(static_cast<uint32_t>(size));
        server.Post(IBV_WR_SEND, static_cast<uint32_t>(size), nullptr, true);
      }
    } else if (mode == "write-bw") {
      server.Wait();  // The final WRITE WITH IMM: everything has landed.
      if (!Check(server.memory, 5, size)) {
        std::fprintf(stderr, "verbs_baseline: written data differs\n");
        std::exit(1);
      }
    }
    rdma_ack_cm_event(Expect(server.events.get(), RDMA_CM_EVENT_DISCONNECTED));
  });

  // Client.
  Side client;
  client.events.reset(rdma_create_event_channel());
  if (!client.events ||
      rdma_create_id(client.events.get(), &raw, nullptr, RDMA_PS_TCP) != 0) {
    Die("client rdma_create_id");
  }
  client.id.reset(raw);
  address.sin_port = htons(port);
  if (rdma_resolve_addr(client.id.get(), nullptr,
                        reinterpret_cast<sockaddr*>(&address), 5000)) {
    Die("rdma_resolve_addr");
  }
  rdma_ack_cm_event(Expect(client.events.get(), RDMA_CM_EVENT_ADDR_RESOLVED));
  if (rdma_resolve_route(client.id.get(), 5000)) Die("rdma_resolve_route");
  rdma_ack_cm_event(Expect(client.events.get(), RDMA_CM_EVENT_ROUTE_RESOLVED));
  client.Setup(size, kDepth);
  if (mode == "pingpong") client.PostRecv(static_cast<uint32_t>(size));
  rdma_conn_param param{};
  param.responder_resources = param.initiator_depth = kDepth;
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  if (rdma_connect(client.id.get(), &param)) Die("rdma_connect");
  rdma_cm_event* established =
      Expect(client.events.get(), RDMA_CM_EVENT_ESTABLISHED);
  Grant grant;
  std::memcpy(&grant, established->param.conn.private_data, sizeof(grant));
  rdma_ack_cm_event(established);

  const auto length = static_cast<uint32_t>(size);
  std::vector<double> rtt_us;
  const auto start = Clock::now();
  if (mode == "pingpong") {
    Fill(client.memory, 1);
    rtt_us.reserve(iters);
    for (int i = 0; i < iters; ++i) {
      const auto t0 = Clock::now();
      client.Post(IBV_WR_SEND, length, nullptr, true);
      // Exactly one send and one receive complete, in either order.
      client.Wait();
      client.Wait();
      client.PostRecv(length);
      rtt_us.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    if (!Check(client.memory, 1, size)) {
      std::fprintf(stderr, "verbs_baseline: echoed data differs\n");
      return 1;
    }
  } else {
    if (mode == "write-bw") Fill(client.memory, 5);
    const ibv_wr_opcode opcode =
        mode == "write-bw" ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
    int posted = 0, completed = 0;
    while (completed < iters) {
      while (posted < iters && posted - completed < kDepth) {
        client.Post(opcode, length, &grant, true);
        ++posted;
      }
      client.Wait();
      ++completed;
    }
    if (mode == "write-bw") {
      client.Post(IBV_WR_RDMA_WRITE_WITH_IMM, 0, &grant, true, 1);
      client.Wait();
    } else if (!Check(client.memory, 3, size)) {
      std::fprintf(stderr, "verbs_baseline: read data differs\n");
      return 1;
    }
  }
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  rdma_disconnect(client.id.get());
  server_thread.join();

  if (mode == "pingpong") {
    std::sort(rtt_us.begin(), rtt_us.end());
    auto pct = [&](double p) {
      return rtt_us[std::min(rtt_us.size() - 1,
                             static_cast<size_t>(p * rtt_us.size()))];
    };
    std::printf(
        "raw verbs SEND/RECV ping-pong, %zu B x %d: p50 %.2f us, p99 %.2f us, "
        "max %.2f us (round trip)\n",
        size, iters, pct(0.5), pct(0.99), rtt_us.back());
  } else {
    std::printf("raw verbs RDMA %s, %zu B x %d, %d outstanding: %.3f GB/s\n",
                mode == "write-bw" ? "WRITE" : "READ", size, iters, kDepth,
                static_cast<double>(size) * iters / seconds / 1e9);
  }
  return 0;
}

}  // namespace
}  // namespace rdmarpc::bench

int main(int argc, char** argv) {
  return rdmarpc::bench::Run(rdmarpc::Flags(argc, argv));
}
