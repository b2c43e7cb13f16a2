// The echo benchmark: its service and helpers.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <valgrind/callgrind.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "tools/benchmarks/bench.h"
#include "tools/benchmarks/pin.h"
#include "transport/uri.h"

namespace rdmarpc::bench {
namespace {

bool Tty() { return isatty(STDERR_FILENO) == 1; }

}  // namespace

// Opens or closes this process's measurement window: callgrind
// instrumentation, and a marker syscall that strace output is cut at.
void Window(bool open) {
  if (open) {
    access("/rdmarpc-bench-window-start", F_OK);
    CALLGRIND_START_INSTRUMENTATION;
  } else {
    CALLGRIND_STOP_INSTRUMENTATION;
    access("/rdmarpc-bench-window-stop", F_OK);
  }
}

bool pin_sides = false;

void PinTo(int cpu) {
  if (pin_sides) PinThisThreadTo(cpu);
}

namespace {
// Reads messages until the client's half-close, then answers.
void Drain(std::shared_ptr<rpc::ServerCall> call) {
  call->Read([call](const Status& status,
                    std::optional<rpc::Payload> message) mutable {
    if (!message) return call->Finish(status);
    Drain(std::move(call));
  });
}
}  // namespace

BenchService::BenchService() : rpc::Service(kService) {
  AddMethod(std::string(kEcho.method()),
            [](std::shared_ptr<rpc::ServerCall> call) {
              call->Finish(Status(), Buffer::Borrow(call->request().span()));
            });
  AddMethod(
      std::string(kSink.method()),
      [](std::shared_ptr<rpc::ServerCall> call) { call->Finish(Status()); });
  AddStreamingMethod(
      std::string(kDrain.method()), rpc::StreamKind::kClientStreaming,
      [](std::shared_ptr<rpc::ServerCall> call) { Drain(call); });
  AddMethod(std::string(kPin.method()),
            [](std::shared_ptr<rpc::ServerCall> call) {
              PinTo(1);  // Runs on the server's event loop: pins that thread.
              call->Finish(Status());
            });
  AddMethod(std::string(kPull.method()),
            [this](std::shared_ptr<rpc::ServerCall> call) {
              const BulkDescriptor loan = call->bulk()[0];
              call->Pull(loan, 0, BulkMemory(loan.length),
                         [call](const Status& s) { call->Finish(s); });
            });
  AddMethod(std::string(kPush.method()),
            [this](std::shared_ptr<rpc::ServerCall> call) {
              const BulkDescriptor loan = call->bulk()[0];
              call->Push(BulkMemory(loan.length), loan, 0,
                         [call](const Status& s) { call->Finish(s); });
            });
  AddMethod(std::string(kWindow.method()),
            [](std::shared_ptr<rpc::ServerCall> call) {
              Window(call->request().view() == "start");
              call->Finish(Status());
            });
}

std::span<std::byte> BenchService::BulkMemory(size_t size) {
  std::lock_guard lock(mu_);
  if (!bulk_ || bulk_->size() < size) {
    bulk_ = Arena(size);
    std::memset(bulk_->data(), 0x5a, size);
  }
  return {bulk_->data(), size};
}

void Progress(const std::string& what, uint64_t done, uint64_t total) {
  if (!Tty()) return;
  std::fprintf(stderr, "\r  %-34s %10llu / %llu", what.c_str(),
               static_cast<unsigned long long>(done),
               static_cast<unsigned long long>(total));
  if (done == total) std::fprintf(stderr, "\r%70s\r", "");
}

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(q * sorted.size()));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

double Median(std::vector<double> values) {
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  return Percentile(values, 0.5);
}

// Round `round`'s share of `iters` spread over `rounds` alternating rounds.
int RoundShare(int iters, int rounds, int round) {
  return iters / rounds + (round < iters % rounds);
}

std::string HostOf(const std::string& uri) {
  auto parsed = transport::ParseUri(uri);
  return parsed.ok() ? parsed->host : "127.0.0.1";
}

// A registered arena the payloads come from, so RDMA sends are zero-copy.
std::shared_ptr<transport::MemoryRegistration> Arena(size_t size) {
  auto arena =
      transport::MemoryRegistration::Allocate(std::max<size_t>(size, 1));
  if (!arena.ok()) {
    std::fprintf(stderr, "bench: %s\n", arena.status().ToString().c_str());
    std::exit(1);
  }
  std::memset((*arena)->data(), 0x5a, (*arena)->size());
  return *arena;
}

Buffer Payload(const transport::MemoryRegistration& arena, size_t size) {
  // Borrow, not Slice: no allocation per call; the transport finds the
  // registration by address.
  return Buffer::Borrow(std::span(arena.data(), size));
}

std::string SizeName(size_t size) {
  if (size >= (1u << 20) && size % (1u << 20) == 0) {
    return std::to_string(size >> 20) + " MiB";
  }
  if (size >= 1024 && size % 1024 == 0) {
    return std::to_string(size >> 10) + " KiB";
  }
  return std::to_string(size) + " B";
}

// The in-process server's transport counters, per frame received, since the
// last call (--stats 1): what each call cost the server's side of the link.

}  // namespace rdmarpc::bench
