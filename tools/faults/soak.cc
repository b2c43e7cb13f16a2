// The soak's load and server (tools/soak): a mixed load over many connections
// on both transports, for minutes or hours, that reports what grows.
//
//   soak server [--tcp URI] [--rdma URI]
//   soak client [--tcp URI] [--rdma URI] --seconds S [--report-seconds R]
//       [--connections N] [--in-flight K] [--churn-seconds C]
//       [--warmup-seconds W] [--check 1]
//   Either side: [--pooled-grants 0|1] (TransportOptions::rdma_pooled_grants)
//
// The client opens N channels to each URI and keeps K calls in flight on each:
// payloads of 16 B to 4 MiB in rotation, every byte checked by both sides (a
// mismatch is a failed call). Every C seconds one channel, in turn, stops
// taking calls, and once its calls are done it is destroyed and opened again:
// connection setup and teardown are part of the load.
//
// Every R seconds the client lets the calls in flight finish (so no transfer
// holds memory), then prints one line: calls ok and failed per transport since
// the last line, their p50 and p99 latency, and for itself and the server
// (asked over a control channel) the resident set, open fds and registered
// RDMA bytes:
//   SOAK t=60s tcp ok=N failed=N p50=Nus p99=Nus rdma ok=... |
//        client rss=NMiB fds=N reg=NMiB | server rss=... fds=... reg=...
// With --check 1 it ends with "SOAKCHECK PASSED" or "SOAKCHECK FAILED: why",
// and exits non-zero on failure: a call failed, an interval had no OK call, or
// after the first line at or past W seconds (the warm-up) the last line shows
// growth: more fds, more bytes registered outside the shared pools (which
// grow with the load's peaks, each up to its cap: rdma_max_pool_bytes, the
// grant pool's kRdmaGrantPoolMaxBytes), more heap in use (malloc's count)
// by over a fiftieth plus 2 MiB, or a resident set larger by over a tenth
// plus 16 MiB (the allocator keeps some freed memory).
#include <malloc.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/flags.h"
#include "base/process_stats.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/server.h"
#include "rdmarpc/service.h"
#include "tools/faults/checked_payload.h"
#include "transport/rdma/verbs.h"

namespace rdmarpc::tools {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxMessage = 8 << 20;

// What a process holds: the figures that must not grow.
struct Figures {
  uint64_t rss = 0;         // Bytes.
  uint64_t heap = 0;        // Bytes malloc has handed out and not had back.
  uint64_t fds = 0;         // Open file descriptors.
  uint64_t registered = 0;  // Bytes registered with an RDMA device.
  uint64_t pooled = 0;      // Of which in the shared pools.

  std::string Encode() const {
    return std::to_string(rss) + " " + std::to_string(heap) + " " +
           std::to_string(fds) + " " + std::to_string(registered) + " " +
           std::to_string(pooled);
  }
  static Figures Decode(const std::string& text) {
    Figures f;
    std::sscanf(text.c_str(), "%lu %lu %lu %lu %lu", &f.rss, &f.heap, &f.fds,
                &f.registered, &f.pooled);
    return f;
  }
  std::string Print() const {
    char line[160];
    std::snprintf(line, sizeof(line),
                  "rss=%.1fMiB heap=%.1fMiB fds=%lu reg=%.1fMiB pooled=%.1fMiB",
                  rss / 1048576.0, heap / 1048576.0, fds,
                  registered / 1048576.0, pooled / 1048576.0);
    return line;
  }
};

Figures Measure() {
  Figures f;
  f.rss = static_cast<uint64_t>(std::max(ProcessStatusField(0, "VmRSS"), 0LL)) *
          1024;
  const struct mallinfo2 info = mallinfo2();
  f.heap = info.uordblks + info.hblkhd;
  f.fds = static_cast<uint64_t>(std::max(OpenFileCount(0), 0LL));
  f.registered = transport::rdma::LiveRegisteredBytes();
  f.pooled = transport::rdma::PooledRegisteredBytes();
  return f;
}

class SoakService : public rpc::Service {
 public:
  SoakService() : rpc::Service("soak.Load") {
    AddMethod("Echo", [](std::shared_ptr<rpc::ServerCall> call) {
      Header header;
      if (!RequestIntact(call->request(), &header)) {
        return call->Finish(
            Status(StatusCode::kDataLoss, "request checksum mismatch"));
      }
      call->Finish(Status(), Buffer::CopyOf(call->request().span()));
    });
    AddMethod("Figures", [](std::shared_ptr<rpc::ServerCall> call) {
      call->Finish(Status(), Buffer::CopyOf(Measure().Encode()));
    });
  }
};

int Serve(const rdmarpc::Flags& flags) {
  SoakService service;
  rpc::ServerOptions options;
  options.transport.max_payload_size = kMaxMessage;
  options.max_response_size = kMaxMessage;
  options.transport.rdma_pooled_grants =
      flags.GetInt("pooled-grants", options.transport.rdma_pooled_grants) != 0;
  rpc::Server server(options);
  server.RegisterService(&service);
  for (const char* name : {"tcp", "rdma"}) {
    if (flags.Get(name, "").empty()) continue;
    const StatusOr<std::string> uri = server.Listen(flags.Get(name, ""));
    if (!uri.ok()) {
      std::fprintf(stderr, "soak server: %s\n",
                   uri.status().ToString().c_str());
      return 1;
    }
    std::printf("soak server listening on %s\n", uri->c_str());
  }
  std::fflush(stdout);
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

struct Lane {
  std::string uri;
  int transport = 0;  // Index into the client's per-transport tallies.
  std::unique_ptr<rpc::Channel> channel;
  uint64_t in_flight = 0;
  bool draining = false;  // Takes no calls; reopened once in_flight is 0.
};

struct Tally {
  uint64_t ok = 0;
  uint64_t failed = 0;
  std::map<std::string, uint64_t> statuses;
  std::vector<uint32_t> latency_us;
};

class Client {
 public:
  explicit Client(const rdmarpc::Flags& flags)
      : seconds_(flags.GetInt("seconds", 60)),
        report_seconds_(flags.GetInt("report-seconds", 60)),
        warmup_seconds_(flags.GetInt("warmup-seconds", 30)),
        churn_seconds_(flags.GetInt("churn-seconds", 5)),
        in_flight_(flags.GetInt("in-flight", 2)),
        check_(flags.GetInt("check", 0) != 0),
        uris_{flags.Get("tcp", ""), flags.Get("rdma", "")} {
    options_.transport.max_payload_size = kMaxMessage;
    options_.transport.rdma_pooled_grants =
        flags.GetInt("pooled-grants", options_.transport.rdma_pooled_grants) !=
        0;
    const int connections = flags.GetInt("connections", 8);
    for (int t = 0; t < 2; ++t) {
      if (uris_[t].empty()) continue;  // That transport is not soaked.
      for (int i = 0; i < connections; ++i) {
        auto lane = std::make_unique<Lane>();
        lane->uri = uris_[t];
        lane->transport = t;
        lane->channel = std::make_unique<rpc::Channel>(lane->uri, options_);
        lanes_.push_back(std::move(lane));
      }
    }
    control_ = std::make_unique<rpc::Channel>(uris_[uris_[0].empty() ? 1 : 0],
                                              options_);
  }

  int Run() {
    const auto start = Clock::now();
    const auto end = start + std::chrono::seconds(seconds_);
    auto next_report = start + std::chrono::seconds(report_seconds_);
    auto next_churn = start + std::chrono::seconds(churn_seconds_);
    size_t churn_lane = 0;
    std::unique_lock lock(mu_);
    for (;;) {
      const auto now = Clock::now();
      if (now >= next_report || now >= end) {
        if (!Report(lock, now - start)) break;
        if (now >= end) break;
        next_report += std::chrono::seconds(report_seconds_);
        continue;
      }
      if (churn_seconds_ > 0 && now >= next_churn) {
        lanes_[churn_lane]->draining = true;
        churn_lane = (churn_lane + 1) % lanes_.size();
        next_churn += std::chrono::seconds(churn_seconds_);
      }
      for (auto& lane : lanes_) {
        if (lane->draining && lane->in_flight == 0) {
          // Destroying a channel joins its thread: not under the lock.
          std::unique_ptr<rpc::Channel> old = std::move(lane->channel);
          lock.unlock();
          old.reset();
          auto fresh = std::make_unique<rpc::Channel>(lane->uri, options_);
          lock.lock();
          lane->channel = std::move(fresh);
          lane->draining = false;
        }
        while (!lane->draining && lane->in_flight < in_flight_) {
          lane->in_flight++;
          lock.unlock();
          Start(*lane);
          lock.lock();
        }
      }
      changed_.wait_until(lock, std::min({next_report, next_churn, end}));
    }
    for (auto& lane : lanes_) lane->draining = true;
    changed_.wait(lock, [&] { return InFlight() == 0; });
    lock.unlock();
    if (!check_) return 0;
    CheckGrowth();
    std::printf("SOAKCHECK %s%s\n",
                problem_.empty() ? "PASSED" : "FAILED: ", problem_.c_str());
    std::fflush(stdout);
    return problem_.empty() ? 0 : 1;
  }

 private:
  void Start(Lane& lane) {
    const uint64_t seq = seq_.fetch_add(1);
    Buffer request = MakeRequest(client_id_, seq, SizeFor(seq, kMaxMessage));
    const uint32_t sent = Checksum(request.data(), request.size());
    const size_t size = request.size();
    const auto began = Clock::now();
    lane.channel->Call(
        "soak.Load", "Echo", std::move(request),
        rpc::CallOptions::WithTimeout(std::chrono::seconds(30)),
        [this, &lane, sent, size, began](const Status& status,
                                         Buffer response) {
          const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                              Clock::now() - began)
                              .count();
          std::lock_guard lock(mu_);
          Tally& tally = tallies_[lane.transport];
          if (!status.ok()) {
            tally.failed++;
            tally.statuses[std::string(StatusCodeName(status.code()))]++;
          } else if (response.size() != size ||
                     Checksum(response.data(), response.size()) != sent) {
            tally.failed++;
            tally.statuses["CORRUPTED"]++;
          } else {
            tally.ok++;
            tally.latency_us.push_back(static_cast<uint32_t>(us));
          }
          lane.in_flight--;
          changed_.notify_all();
        });
  }

  uint64_t InFlight() const {
    uint64_t n = 0;
    for (const auto& lane : lanes_) n += lane->in_flight;
    return n;
  }

  // The server's figures, over the control channel.
  StatusOr<Figures> ServerFigures() {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<StatusOr<Figures>> result;
    control_->Call("soak.Load", "Figures", Buffer(),
                   rpc::CallOptions::WithTimeout(std::chrono::seconds(30)),
                   [&](const Status& status, Buffer response) {
                     std::lock_guard lock(mu);
                     if (status.ok()) {
                       result = Figures::Decode(std::string(response.view()));
                     } else {
                       result = status;
                     }
                     cv.notify_all();
                   });
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return result.has_value(); });
    return *std::move(result);
  }

  // Lets the calls in flight finish, prints a line and checks it. False if
  // the soak should stop (the server does not answer).
  bool Report(std::unique_lock<std::mutex>& lock, Clock::duration elapsed) {
    for (auto& lane : lanes_) lane->draining = true;
    changed_.wait(lock, [&] { return InFlight() == 0; });
    const Figures client = Measure();
    lock.unlock();
    const StatusOr<Figures> server = ServerFigures();
    lock.lock();
    const long t =
        std::chrono::duration_cast<std::chrono::seconds>(elapsed).count();
    std::string line = "SOAK t=" + std::to_string(t) + "s";
    static constexpr const char* kNames[] = {"tcp", "rdma"};
    for (int i = 0; i < 2; ++i) {
      if (uris_[i].empty()) continue;
      Tally& tally = tallies_[i];
      std::sort(tally.latency_us.begin(), tally.latency_us.end());
      auto at = [&](double q) -> uint32_t {
        if (tally.latency_us.empty()) return 0;
        return tally
            .latency_us[static_cast<size_t>(q * (tally.latency_us.size() - 1))];
      };
      line += std::string(" ") + kNames[i] + " ok=" + std::to_string(tally.ok) +
              " failed=" + std::to_string(tally.failed);
      for (const auto& [code, count] : tally.statuses) {
        line += "(" + code + ":" + std::to_string(count) + ")";
      }
      line += " p50=" + std::to_string(at(0.5)) +
              "us p99=" + std::to_string(at(0.99)) + "us";
      if (tally.failed > 0) {
        Fail(std::string(kNames[i]) +
             " calls failed at t=" + std::to_string(t) + "s");
      }
      if (tally.ok == 0) {
        Fail(std::string("no ") + kNames[i] +
             " call succeeded by t=" + std::to_string(t) + "s");
      }
      tally = Tally();
    }
    line += " | client " + client.Print() + " | server " +
            (server.ok() ? server->Print() : server.status().ToString());
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    if (!server.ok()) {
      Fail("the server's figures: " + server.status().ToString());
      return false;
    }
    if (t >= warmup_seconds_ && !baseline_) {
      baseline_ = {client, *server};
    } else if (baseline_) {
      last_ = {client, *server};
    }
    for (auto& lane : lanes_) lane->draining = false;
    return true;
  }

  void Fail(const std::string& why) {
    if (problem_.empty()) problem_ = why;
  }

  // After the run: growth from the warm-up's line to the last line.
  void CheckGrowth() {
    if (!baseline_ || !last_) {
      Fail("too short to compare two lines after the warm-up");
      return;
    }
    const char* names[] = {"client", "server"};
    const Figures* before[] = {&baseline_->first, &baseline_->second};
    const Figures* after[] = {&last_->first, &last_->second};
    for (int i = 0; i < 2; ++i) {
      const Figures& b = *before[i];
      const Figures& a = *after[i];
      if (a.fds > b.fds) {
        Fail(std::string(names[i]) + " fds grew " + std::to_string(b.fds) +
             " -> " + std::to_string(a.fds));
      }
      if (a.registered - a.pooled > b.registered - b.pooled) {
        Fail(std::string(names[i]) +
             " bytes registered outside the pools grew " +
             std::to_string(b.registered - b.pooled) + " -> " +
             std::to_string(a.registered - a.pooled));
      }
      if (a.heap > b.heap + b.heap / 50 + (2 << 20)) {
        Fail(std::string(names[i]) + " heap in use grew " + b.Print() + " -> " +
             a.Print());
      }
      // The pools' registered memory is resident, and the pools may grow
      // with the load's peaks (each to its cap, checked above): RSS is
      // compared without it.
      const uint64_t rss_before = b.rss - std::min(b.rss, b.pooled);
      const uint64_t rss_after = a.rss - std::min(a.rss, a.pooled);
      if (rss_after > rss_before + rss_before / 10 + (16 << 20)) {
        Fail(std::string(names[i]) + " RSS outside the pools grew " +
             b.Print() + " -> " + a.Print());
      }
    }
  }

  const long seconds_, report_seconds_, warmup_seconds_, churn_seconds_;
  const uint64_t in_flight_;
  const bool check_;
  const std::string uris_[2];
  const uint64_t client_id_ = std::random_device()();
  rpc::ChannelOptions options_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::unique_ptr<rpc::Channel> control_;
  std::atomic<uint64_t> seq_{0};
  Tally tallies_[2];
  std::optional<std::pair<Figures, Figures>> baseline_, last_;
  std::string problem_;
};

}  // namespace
}  // namespace rdmarpc::tools

int main(int argc, char** argv) {
  // A fixed threshold: glibc's own rises after the first large free, and
  // then freed 4 MiB messages stay in its arenas. The resident set then
  // follows live memory, which is what the soak watches.
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
  const rdmarpc::Flags flags(argc, argv);
  const auto& mode = flags.positional();
  if (!mode.empty() && mode[0] == "server") return rdmarpc::tools::Serve(flags);
  if (!mode.empty() && mode[0] == "client") {
    rdmarpc::tools::Client client(flags);
    return client.Run();
  }
  std::fprintf(stderr,
               "usage: soak server --tcp URI --rdma URI | client --tcp URI "
               "--rdma URI --seconds S [--report-seconds R] [--connections N] "
               "[--in-flight K] [--churn-seconds C] [--warmup-seconds W] "
               "[--check 1]\n");
  return 64;
}
