// The rdmarpc echo benchmark, measured against the raw link in the same run.
//
//   bench --mode latency|throughput|bandwidth [--uri URI] [--sizes 16,4096]
//         [--iters N] [--warmup N] [--outstanding K] [--connections C]
//         [--seconds S] [--poll event|busy|hybrid] [--json FILE]
//         [--plot FILE.png] [--raw 0] [--pin 0] [--metrics 0] [--stats 1]
//         [--by-name 1]
//   bench --serve URI [--poll event|busy|hybrid]
//         a standalone server for another machine's bench
//   bench --cpu-window N --uri URI [--outstanding K] [--size B]
//         warm up, then N echo calls with K outstanding inside a measurement
//         window: callgrind instrumentation on in both processes (the server
//         is told by a Window call) and marker syscalls for strace
//         (tools/bench-cpu runs both sides under valgrind or strace)
//
// A URI whose port is 0 (the default, tcp://127.0.0.1:0) starts a server in
// this process; any other URI targets a running `bench --serve`. The raw
// baseline runs on the same link: a TCP ping-pong (latency) or one-way
// stream (bandwidth) between two threads for tcp://, the raw-verbs SEND/RECV
// ping-pong and RDMA WRITE bandwidth (verbs_baseline) for rdma://. With
// --poll busy|hybrid the raw TCP ping-pong polls its non-blocking socket as
// rdmarpc's loops then do (the raw verbs ping-pong always polls). TCP event-
// mode latency also measures two floors: the same ping-pong as a plain epoll
// loop without Asio (what any event-driven program must do: wait, then read)
// and as an Asio loop (the floor for a stack on Asio). Together they split the
// ratio into the kernel's event path, Asio's share and rdmarpc's. TCP latency
// (except busy mode) and bandwidth and event-mode RDMA bandwidth alternate
// rounds of RPC and raw, so that the shared machine's slow spells fall on
// both alike; elsewhere the raw baseline runs first, before any RPC loop can
// spin.
//
// Modes:
//   latency     one call outstanding, closed loop: p50, p99, p999, max
//   throughput  K calls outstanding on each of C connections (each with its
//               own client event loop) for S seconds: calls/s
//   bandwidth   sizes up to 64 MiB sent from registered memory to a method
//               that answers with nothing, 2 outstanding: GB/s one way
//
// Calls name their method by id (rpc/method_ref.h), as generated stubs do;
// --by-name 1 makes the latency loop send the service and method names
// instead, to measure what the longer request costs.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <valgrind/callgrind.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/log.h"
#include "examples/common/flags.h"
#include "rpc/channel.h"
#include "rpc/server.h"
#include "tools/benchmarks/pin.h"
#include "transport/memory.h"
#include "transport/uri.h"

namespace rdmarpc::bench {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr char kService[] = "rdmarpc.bench.Bench";
constexpr rpc::MethodRef kEcho(kService, "Echo");
constexpr rpc::MethodRef kSink(kService, "Sink");
constexpr rpc::MethodRef kPin(kService, "Pin");
constexpr rpc::MethodRef kWindow(kService, "Window");

// Echo answers with the request's own buffer (no copy); Sink with nothing.
// Window switches callgrind's instrumentation in this process (bench-cpu).
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

// --pin 1 (the default on two or more CPUs): the client side on CPU 0 and the
// server side on CPU 1 (pin.h), for the RPC's event loops and the raw
// baseline's threads alike.
bool pin_sides = false;
void PinTo(int cpu) {
  if (pin_sides) PinThisThreadTo(cpu);
}

class BenchService : public rpc::Service {
 public:
  BenchService() : rpc::Service(kService) {
    AddMethod(std::string(kEcho.method()),
              [](std::shared_ptr<rpc::ServerCall> call) {
                call->Finish(Status(), Buffer::Borrow(call->request().span()));
              });
    AddMethod(
        std::string(kSink.method()),
        [](std::shared_ptr<rpc::ServerCall> call) { call->Finish(Status()); });
    AddMethod(std::string(kPin.method()),
              [](std::shared_ptr<rpc::ServerCall> call) {
                PinTo(1);  // Runs on the server's event loop: pins that thread.
                call->Finish(Status());
              });
    AddMethod(std::string(kWindow.method()),
              [](std::shared_ptr<rpc::ServerCall> call) {
                Window(call->request().view() == "start");
                call->Finish(Status());
              });
  }
};

struct Options {
  std::string uri = "tcp://127.0.0.1:0";
  std::string mode = "latency";
  std::vector<size_t> sizes;
  int iters = 0;
  int warmup = 0;
  int outstanding = 1;
  int connections = 1;
  double seconds = 3;
  transport::PollMode poll = transport::PollMode::kEvent;
  bool raw = true;
  std::string json;
  std::string plot;
  bool stats = false;
  bool metrics = true;   // The in-process server's per-method metrics.
  bool by_name = false;  // Latency calls name the method, not its id.
};

struct Result {
  std::string mode;
  size_t size = 0;
  // latency (µs)
  double p50 = 0, p99 = 0, p999 = 0, max = 0;
  double raw_p50 = 0, raw_p99 = 0;
  double epoll_p50 = NAN;  // The plain epoll loop (TCP only).
  double asio_p50 = NAN;   // The Asio loop (TCP only).
  // Latency in alternating rounds: each round's RPC p50 over its raw p50; their
  // median and range. A slow spell moves one round, not the median.
  double round_ratio_median = NAN, round_ratio_min = NAN, round_ratio_max = NAN;
  // TCP event mode: the same per-round medians for the floors, over raw.
  double epoll_round_ratio = NAN, asio_round_ratio = NAN;
  std::vector<double> samples;  // For the CDF plot.
  // throughput
  double calls_per_s = 0;
  // bandwidth (GB/s)
  double gbps = 0, raw_gbps = 0;
  uint64_t errors = 0;
};

// ---------------------------------------------------------------- helpers --

bool Tty() { return isatty(STDERR_FILENO) == 1; }

transport::PollMode ParsePoll(const std::string& poll) {
  return poll == "busy"     ? transport::PollMode::kBusy
         : poll == "hybrid" ? transport::PollMode::kHybrid
                            : transport::PollMode::kEvent;
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

// ------------------------------------------------------------ raw TCP ----

// A connected loopback TCP pair, TCP_NODELAY both ways.
struct TcpPair {
  int client = -1, server = -1;
  TcpPair() {
    const int listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (bind(listener, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        listen(listener, 1) != 0 ||
        getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) !=
            0) {
      std::perror("bench: raw tcp listen");
      std::exit(1);
    }
    client = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(client, reinterpret_cast<sockaddr*>(&address), length) != 0) {
      std::perror("bench: raw tcp connect");
      std::exit(1);
    }
    server = accept(listener, nullptr, nullptr);
    close(listener);
    const int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~TcpPair() {
    close(client);
    close(server);
  }
};

bool ReadAll(int fd, std::byte* data, size_t size) {
  while (size > 0) {
    const ssize_t n = read(fd, data, size);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}
// Reads `size` bytes without blocking in recv; `when_empty` runs each time
// the socket has nothing yet (it waits, or not) and returns false to give up.
template <typename WhenEmpty>
bool ReadWithoutBlocking(int fd, std::byte* data, size_t size,
                         WhenEmpty when_empty) {
  while (size > 0) {
    const ssize_t n = recv(fd, data, size, MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) return false;
    if (errno == EAGAIN && !when_empty()) return false;
  }
  return true;
}
bool WriteAll(int fd, const std::byte* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The same ping-pong on Asio, used as rdmarpc's transport uses it, with
// nothing of rdmarpc: each side its own io_context thread; async_wait until
// the socket is readable, non-blocking recv until the message is whole, send
// the next one at once, wait again. This is the floor for an event-driven
// stack on Asio (a wait in epoll, a handler dispatch, a re-armed wait per
// message): the part of the RPC/raw ratio that no RPC code can remove.
// (Until session 9 this was async_read/async_write: their composed
// operations add an epoll_wait(0) between a read and the answer's write,
// about 2,100 user-space instructions per message and side against about
// 630 here, so that floor overstated Asio's share.)
class AsioEchoSide {
 public:
  // The client side (`rtt` given) sends first and times each round trip
  // into `rtt`; the server side (nullptr) answers each message it receives.
  AsioEchoSide(int fd, size_t size, int messages, std::vector<double>* rtt)
      : socket_(context_, boost::asio::ip::tcp::v4(), dup(fd)),
        size_(size),
        left_(messages),
        rtt_(rtt),
        buffer_(std::max<size_t>(size, 1)) {
    socket_.non_blocking(true);
  }
  void Run() {
    if (rtt_ != nullptr) Send();
    Wait();
    context_.run();
  }

 private:
  void Wait() {
    socket_.async_wait(boost::asio::socket_base::wait_read,
                       [this](const boost::system::error_code& error) {
                         if (!error) OnReadable();
                       });
  }
  void OnReadable() {
    for (;;) {
      const ssize_t n =
          recv(socket_.native_handle(), buffer_.data() + got_, size_ - got_, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return;
      if (n < 0) break;  // Nothing more yet: wait.
      got_ += static_cast<size_t>(n);
      if (got_ < size_) continue;
      got_ = 0;
      if (rtt_ != nullptr) {
        rtt_->push_back(
            std::chrono::duration<double, std::micro>(Clock::now() - t0_)
                .count());
        if (--left_ == 0) return;
        Send();
      } else {
        Send();
        if (--left_ == 0) return;
      }
    }
    Wait();
  }
  void Send() {
    if (rtt_ != nullptr) t0_ = Clock::now();
    const int fd = socket_.native_handle();
    for (size_t sent = 0; sent < size_;) {
      const ssize_t n =
          send(fd, buffer_.data() + sent, size_ - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<size_t>(n);
      } else if (n < 0 && errno == EAGAIN) {
        boost::system::error_code ignored;
        socket_.wait(boost::asio::socket_base::wait_write, ignored);
      } else {
        return;
      }
    }
  }

  boost::asio::io_context context_{1};
  boost::asio::ip::tcp::socket socket_;
  const size_t size_;
  int left_;
  std::vector<double>* const rtt_;
  std::vector<std::byte> buffer_;
  size_t got_ = 0;
  Clock::time_point t0_;
};

std::vector<double> AsioTcpPingPong(size_t size, int warmup, int iters) {
  TcpPair pair;
  std::vector<double> rtt;
  rtt.reserve(warmup + iters);
  AsioEchoSide server(pair.server, size, warmup + iters, nullptr);
  AsioEchoSide client(pair.client, size, warmup + iters, &rtt);
  std::thread echo([&] {
    PinTo(1);
    server.Run();
  });
  PinTo(0);
  client.Run();
  echo.join();
  rtt.erase(rtt.begin(), rtt.begin() + std::min<size_t>(rtt.size(), warmup));
  std::sort(rtt.begin(), rtt.end());
  return rtt;
}

// The ping-pong as the least an event-driven loop does, without Asio: each
// side's socket non-blocking and registered once (edge-triggered) with its own
// epoll instance; a message is read with recv until it is whole, waiting in
// epoll_wait whenever the socket is empty, and answered with write. Against
// the blocking ping-pong it adds only the wait in epoll before each read:
// the kernel's share of the cost of being event-driven.
class EpollSide {
 public:
  explicit EpollSide(int fd) : fd_(fd), epoll_(epoll_create1(EPOLL_CLOEXEC)) {
    fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
    epoll_event event{};
    event.events = EPOLLIN | EPOLLET;
    if (epoll_ < 0 || epoll_ctl(epoll_, EPOLL_CTL_ADD, fd_, &event) != 0) {
      std::perror("bench: epoll");
      std::exit(1);
    }
  }
  ~EpollSide() { close(epoll_); }
  EpollSide(const EpollSide&) = delete;
  EpollSide& operator=(const EpollSide&) = delete;

  bool Read(std::byte* data, size_t size) {
    return ReadWithoutBlocking(fd_, data, size, [this] {
      epoll_event event;
      return epoll_wait(epoll_, &event, 1, -1) >= 0 || errno == EINTR;
    });
  }
  // 16 B to 64 KiB: the socket buffer takes it at once.
  bool Write(const std::byte* data, size_t size) {
    return WriteAll(fd_, data, size);
  }

 private:
  const int fd_;
  const int epoll_;
};

// The blocking ping-pong's side: read and write block until done.
class BlockingSide {
 public:
  explicit BlockingSide(int fd) : fd_(fd) {}
  bool Read(std::byte* data, size_t size) { return ReadAll(fd_, data, size); }
  bool Write(const std::byte* data, size_t size) {
    return WriteAll(fd_, data, size);
  }

 private:
  const int fd_;
};

// The busy-polling ping-pong's side: the socket is non-blocking and read
// again at once while empty, as rdmarpc's busy and hybrid modes read it:
// no sleep, no wake-up. The raw baseline for --poll busy|hybrid over TCP.
class BusySide {
 public:
  explicit BusySide(int fd) : fd_(fd) {}
  bool Read(std::byte* data, size_t size) {
    return ReadWithoutBlocking(fd_, data, size, [] { return true; });
  }
  bool Write(const std::byte* data, size_t size) {
    return WriteAll(fd_, data, size);
  }

 private:
  const int fd_;
};

// Round trips of `size` bytes each way over a fresh loopback pair, in µs,
// sorted: the client on CPU 0 times each; an echo thread on CPU 1 answers.
// `Side` reads and writes whole messages on one socket.
template <typename Side>
std::vector<double> TcpPingPong(size_t size, int warmup, int iters) {
  TcpPair pair;
  std::vector<std::byte> buffer(std::max<size_t>(size, 1));
  PinTo(0);
  std::thread echo([&] {
    PinTo(1);
    Side side(pair.server);
    std::vector<std::byte> message(buffer.size());
    for (int i = 0; i < warmup + iters; ++i) {
      if (!side.Read(message.data(), size) ||
          !side.Write(message.data(), size)) {
        return;
      }
    }
  });
  Side side(pair.client);
  std::vector<double> rtt;
  rtt.reserve(iters);
  for (int i = 0; i < warmup + iters; ++i) {
    const auto t0 = Clock::now();
    if (!side.Write(buffer.data(), size) || !side.Read(buffer.data(), size)) {
      break;
    }
    if (i >= warmup) {
      rtt.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
  }
  echo.join();
  std::sort(rtt.begin(), rtt.end());
  return rtt;
}

// `size` bytes one way then a 1-byte answer, `iters` times: GB/s.
double RawTcpBandwidth(size_t size, int iters) {
  TcpPair pair;
  std::vector<std::byte> out(std::max<size_t>(size, 1));
  // Touched before the clock starts, as the RPC side's reused blocks are.
  std::vector<std::byte> buffer(out.size());
  PinTo(0);
  std::thread sink([&] {
    PinTo(1);
    const std::byte ack{1};
    for (int i = 0; i < iters; ++i) {
      if (!ReadAll(pair.server, buffer.data(), size) ||
          !WriteAll(pair.server, &ack, 1)) {
        return;
      }
    }
  });
  std::byte ack;
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) {
    WriteAll(pair.client, out.data(), size);
    ReadAll(pair.client, &ack, 1);
  }
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  sink.join();
  return static_cast<double>(size) * iters / seconds / 1e9;
}

// ----------------------------------------------------------- raw verbs ---

// Runs verbs_baseline (next to this binary) and returns its first number
// after `key` ("p50 " or "outstanding: "), or NaN.
double RawVerbs(const std::string& self, const std::string& ip,
                const std::string& mode, size_t size, int iters,
                const std::string& key) {
  const std::string dir = self.substr(0, self.rfind('/') + 1);
  const std::string command = dir + "verbs_baseline --ip " + ip + " --mode " +
                              mode + " --size " + std::to_string(size) +
                              " --iters " + std::to_string(iters) + " --pin " +
                              (pin_sides ? "1" : "0") + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return NAN;
  std::string output;
  char line[512];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) output += line;
  if (pclose(pipe) != 0) {
    std::fprintf(stderr, "bench: raw verbs baseline failed: %s",
                 output.c_str());
    return NAN;
  }
  const size_t at = output.find(key);
  return at == std::string::npos
             ? NAN
             : std::strtod(output.c_str() + at + key.size(), nullptr);
}

// --------------------------------------------------------------- RPC -----

rpc::ChannelOptions ChannelOptionsFor(const Options& options) {
  rpc::ChannelOptions channel;
  channel.transport.poll_mode = options.poll;
  channel.transport.max_payload_size = 1ull << 30;
  channel.max_request_size = 1ull << 30;
  return channel;
}

// Closed loop on the channel's own thread: each completion starts the next
// call, as a ping-pong does, with no thread hand-off in between.
std::vector<double> RpcLatency(rpc::Channel& channel,
                               const transport::MemoryRegistration& arena,
                               size_t size, int warmup, int iters, bool by_name,
                               uint64_t& errors) {
  struct Loop {
    rpc::Channel* channel = nullptr;
    bool by_name = false;
    const transport::MemoryRegistration* arena = nullptr;
    size_t size = 0;
    int total = 0, warmup = 0, done = 0;
    uint64_t errors = 0;
    std::vector<double> rtt;
    Clock::time_point t0;
    std::promise<void> finished;
    std::string what;
    void Next() {
      t0 = Clock::now();
      auto done_fn = [this](const Status& status, Buffer response) {
        const auto t1 = Clock::now();
        if (!status.ok() || response.size() != size) ++errors;
        if (done >= warmup) {
          rtt.push_back(
              std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
        if (++done % 1000 == 0) Progress(what, done, total);
        if (done == total) return finished.set_value();
        Next();
      };
      if (by_name) {
        channel->Call(kEcho.service(), kEcho.method(), Payload(*arena, size),
                      {}, std::move(done_fn));
      } else {
        channel->Call(kEcho, Payload(*arena, size), {}, std::move(done_fn));
      }
    }
  } loop;
  loop.channel = &channel;
  loop.by_name = by_name;
  loop.arena = &arena;
  loop.size = size;
  loop.total = warmup + iters;
  loop.warmup = warmup;
  loop.rtt.reserve(iters);
  loop.what = "latency " + std::to_string(size) + " B";
  boost::asio::post(channel.executor(), [&] { loop.Next(); });
  loop.finished.get_future().wait();
  Progress(loop.what, loop.total, loop.total);
  errors += loop.errors;
  std::sort(loop.rtt.begin(), loop.rtt.end());
  return loop.rtt;
}

// K outstanding on each of C channels for `seconds`: calls/s.
double RpcThroughput(const Options& options,
                     const transport::MemoryRegistration& arena, size_t size,
                     uint64_t& errors) {
  std::vector<std::unique_ptr<rpc::Channel>> channels;
  for (int c = 0; c < options.connections; ++c) {
    channels.push_back(std::make_unique<rpc::Channel>(
        options.uri, ChannelOptionsFor(options)));
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> completed{0}, failed{0};
  std::atomic<int> running{0};
  std::promise<void> drained;
  std::function<void(rpc::Channel*)> issue = [&](rpc::Channel* channel) {
    channel->Call(kEcho, Payload(arena, size), {},
                  [&, channel](const Status& status, Buffer) {
                    if (status.ok()) {
                      completed.fetch_add(1, std::memory_order_relaxed);
                    } else {
                      failed.fetch_add(1, std::memory_order_relaxed);
                    }
                    if (!stop.load(std::memory_order_relaxed)) {
                      return issue(channel);
                    }
                    if (running.fetch_sub(1) == 1) drained.set_value();
                  });
  };
  // Warm up: connect every channel.
  for (auto& channel : channels) {
    std::promise<void> ready;
    channel->Call(kSink, Buffer(), {},
                  [&](const Status&, Buffer) { ready.set_value(); });
    ready.get_future().wait();
  }
  running = options.connections * options.outstanding;
  const auto start = Clock::now();
  for (auto& channel : channels) {
    for (int k = 0; k < options.outstanding; ++k) issue(channel.get());
  }
  const auto until = start + std::chrono::duration<double>(options.seconds);
  const std::string what = "throughput " + std::to_string(size) + " B";
  while (Clock::now() < until) {
    std::this_thread::sleep_for(100ms);
    Progress(
        what,
        static_cast<uint64_t>(
            std::chrono::duration<double>(Clock::now() - start).count() * 10),
        static_cast<uint64_t>(options.seconds * 10));
  }
  const uint64_t counted = completed.load();
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  stop = true;
  drained.get_future().wait();
  Progress(what, 1, 1);
  errors += failed.load();
  return counted / seconds;
}

// `n` calls of `method`, `k` outstanding, each completion starting the next
// on the channel's own thread; returns how many failed. `on_done` sees the
// running count of completions.
uint64_t RunCalls(rpc::Channel& channel, long long n, int k,
                  const rpc::MethodRef& method,
                  const std::function<Buffer()>& payload,
                  const rpc::CallOptions& options = {},
                  const std::function<void(long long)>& on_done = {}) {
  std::atomic<long long> issued{0}, done{0};
  std::atomic<uint64_t> failed{0};
  std::promise<void> finished;
  std::function<void()> issue = [&] {
    if (issued.fetch_add(1) >= n) return;
    channel.Call(method, payload(), options, [&](const Status& status, Buffer) {
      if (!status.ok()) failed++;
      const long long count = ++done;
      if (on_done) on_done(count);
      if (count == n) return finished.set_value();
      issue();
    });
  };
  boost::asio::post(channel.executor(), [&] {
    for (int i = 0; i < k; ++i) issue();
  });
  finished.get_future().wait();
  return failed.load();
}

// `iters` Sink calls of `size` bytes, 2 outstanding: GB/s one way.
double RpcBandwidth(rpc::Channel& channel,
                    const transport::MemoryRegistration& arena, size_t size,
                    int iters, uint64_t& errors) {
  const auto payload = [&] { return Payload(arena, size); };
  // One call first, so connecting and registering are not timed.
  RunCalls(channel, 1, 1, kSink, payload);
  const std::string what = "bandwidth " + std::to_string(size) + " B";
  const auto start = Clock::now();
  errors += RunCalls(channel, iters, 2, kSink, payload,
                     rpc::CallOptions::WithTimeout(600s),
                     [&](long long done) { Progress(what, done, iters); });
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(size) * iters / seconds / 1e9;
}

// ------------------------------------------------------------- report ----

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
void PrintServerStats(const rpc::Server& server, const Result& r) {
  static std::vector<uint64_t> last;
  server.ForEachConnection([&](const transport::Connection& connection) {
    const transport::ConnectionStats& s = connection.stats();
    const std::vector<uint64_t> now = {
        s.frames_received, s.frames_sent,     s.write_calls,   s.read_calls,
        s.inline_sends,    s.credit_messages, s.credit_stalls, s.cq_events,
        s.cq_polls,        s.rdma_writes,     s.registrations, s.staged_bytes};
    const char* names[] = {"frames_received", "frames_sent",   "write_calls",
                           "read_calls",      "inline_sends",  "credit_msgs",
                           "credit_stalls",   "cq_events",     "cq_polls",
                           "rdma_writes",     "registrations", "staged_bytes"};
    last.resize(now.size());
    const double frames =
        std::max<double>(1, static_cast<double>(now[0] - last[0]));
    std::printf("  server stats, %s %s, per frame received (%0.f):",
                r.mode.c_str(), SizeName(r.size).c_str(), frames);
    for (size_t i = 1; i < now.size(); ++i) {
      std::printf(" %s %.2f", names[i], (now[i] - last[i]) / frames);
    }
    std::printf("\n");
    last = now;
  });
}

void WriteJson(const Options& options, const std::vector<Result>& results) {
  std::ofstream out(options.json);
  out << "{\"uri\": \"" << options.uri << "\", \"results\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    out << (i ? ",\n  " : "\n  ") << "{\"mode\": \"" << r.mode
        << "\", \"size\": " << r.size;
    auto number = [&](const char* name, double value) {
      out << ", \"" << name << "\": ";
      if (std::isfinite(value)) {
        out << value;
      } else {
        out << "null";
      }
    };
    if (r.mode == "latency") {
      number("p50_us", r.p50);
      number("p99_us", r.p99);
      number("p999_us", r.p999);
      number("max_us", r.max);
      number("raw_p50_us", r.raw_p50);
      number("ratio_p50", r.p50 / r.raw_p50);
      number("epoll_p50_us", r.epoll_p50);
      number("asio_p50_us", r.asio_p50);
      number("round_ratio_median", r.round_ratio_median);
      number("round_ratio_min", r.round_ratio_min);
      number("round_ratio_max", r.round_ratio_max);
      number("epoll_round_ratio_median", r.epoll_round_ratio);
      number("asio_round_ratio_median", r.asio_round_ratio);
    } else if (r.mode == "throughput") {
      number("calls_per_s", r.calls_per_s);
      out << ", \"outstanding\": " << options.outstanding
          << ", \"connections\": " << options.connections;
    } else {
      number("gbps", r.gbps);
      number("raw_gbps", r.raw_gbps);
      number("ratio", r.gbps / r.raw_gbps);
    }
    out << ", \"errors\": " << r.errors << "}";
  }
  out << "\n]}\n";
}

void Plot(const Options& options, const std::vector<Result>& results) {
  const std::string base = options.plot + ".data";
  std::ofstream script(base + ".gp");
  script << "set terminal png size 1200,500\nset output '" << options.plot
         << "'\nset multiplot layout 1,2\n";
  // Left: latency CDF of every size; right: the size sweep.
  std::string cdf_plot, sweep_plot;
  int index = 0;
  std::ofstream sweep(base + ".sweep");
  for (const Result& r : results) {
    if (r.mode == "latency") {
      const std::string file = base + "." + std::to_string(index++);
      std::ofstream cdf(file);
      for (size_t i = 0; i < r.samples.size(); ++i) {
        cdf << r.samples[i] << " " << (i + 1.0) / r.samples.size() << "\n";
      }
      cdf_plot += std::string(cdf_plot.empty() ? "plot " : ", ") + "'" + file +
                  "' with lines title '" + SizeName(r.size) + "'";
      sweep << r.size << " " << r.p50 << " " << r.raw_p50 << "\n";
    } else if (r.mode == "bandwidth") {
      sweep << r.size << " " << r.gbps << " " << r.raw_gbps << "\n";
    }
  }
  const bool latency = options.mode == "latency";
  script << "set title 'Latency CDF (" << options.uri << ")'\n"
         << "set xlabel 'round trip (us)'\nset ylabel 'fraction'\n"
         << "set logscale x\n"
         << (cdf_plot.empty() ? "plot 0 notitle" : cdf_plot) << "\n"
         << "set title 'Size sweep'\nset xlabel 'size (bytes)'\n"
         << "set ylabel '" << (latency ? "p50 round trip (us)" : "GB/s")
         << "'\nset logscale xy\n"
         << "plot '" << base << ".sweep' using 1:2 with linespoints title "
         << "'rdmarpc', '' using 1:3 with linespoints title 'raw'\n"
         << "unset multiplot\n";
  script.close();
  sweep.close();
  if (std::system(("gnuplot '" + base + ".gp'").c_str()) != 0) {
    std::fprintf(stderr, "bench: gnuplot failed (script %s.gp)\n",
                 base.c_str());
  } else {
    std::printf("plot: %s\n", options.plot.c_str());
  }
}

// --------------------------------------------------------------- main ----

int Serve(const std::string& uri, transport::PollMode poll) {
  rpc::ServerOptions server_options;
  server_options.workers = 1;
  server_options.transport.poll_mode = poll;
  server_options.transport.max_payload_size = 1ull << 30;
  server_options.max_response_size = 1ull << 30;
  rpc::Server server(server_options);
  BenchService service;
  server.RegisterService(&service);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  auto bound = server.Listen(uri);
  if (!bound.ok()) {
    std::fprintf(stderr, "bench: %s\n", bound.status().ToString().c_str());
    return 1;
  }
  std::printf("bench server listening on %s\n", bound->c_str());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&signals, &signal);
  return 0;
}

// The client side of tools/bench-cpu.
int CpuWindow(const examples::Flags& flags) {
  const long long calls = flags.GetInt("cpu-window", 10000);
  const int outstanding = static_cast<int>(flags.GetInt("outstanding", 1));
  const size_t size = static_cast<size_t>(flags.GetInt("size", 16));
  Options options;
  options.uri = flags.Get("uri", "");
  options.poll = ParsePoll(flags.Get("poll", "event"));
  rpc::Channel channel(options.uri, ChannelOptionsFor(options));
  auto arena = Arena(size);
  const auto echo = [&] { return Payload(*arena, size); };
  auto control = [](const char* word) {
    return [word] {
      return Buffer::Borrow(std::as_bytes(std::span(word, std::strlen(word))));
    };
  };
  uint64_t failed = RunCalls(channel, std::max<long long>(calls / 5, 1000),
                             outstanding, kEcho, echo);
  failed += RunCalls(channel, 1, 1, kWindow, control("start"));
  Window(true);
  failed += RunCalls(channel, calls, outstanding, kEcho, echo);
  Window(false);
  failed += RunCalls(channel, 1, 1, kWindow, control("stop"));
  std::printf("cpu window: %lld calls of %zu B, %d outstanding, %llu failed\n",
              calls, size, outstanding,
              static_cast<unsigned long long>(failed));
  return failed == 0 ? 0 : 1;
}

int Run(int argc, char** argv) {
  const examples::Flags flags(argc, argv);
  if (std::getenv("RDMARPC_LOG") == nullptr) {
    Log().set_level(spdlog::level::warn);
  }
  if (flags.Get("serve", "") != "") {
    return Serve(flags.Get("serve", ""), ParsePoll(flags.Get("poll", "event")));
  }
  if (flags.Get("cpu-window", "") != "") return CpuWindow(flags);
  Options options;
  options.uri = flags.Get("uri", options.uri);
  options.mode = flags.Get("mode", options.mode);
  const bool bandwidth = options.mode == "bandwidth";
  std::string sizes = flags.Get(
      "sizes", bandwidth ? "65536,1048576,4194304,67108864" : "16,4096,65536");
  for (std::stringstream in(sizes); std::getline(in, sizes, ',');) {
    options.sizes.push_back(std::stoull(sizes));
  }
  options.iters =
      static_cast<int>(flags.GetInt("iters", bandwidth ? 32 : 20000));
  options.warmup = static_cast<int>(flags.GetInt("warmup", options.iters / 10));
  options.outstanding = static_cast<int>(flags.GetInt("outstanding", 32));
  options.connections = static_cast<int>(flags.GetInt("connections", 1));
  options.seconds = std::stod(flags.Get("seconds", "3"));
  const std::string poll = flags.Get("poll", "event");
  options.poll = ParsePoll(poll);
  options.raw = flags.GetInt("raw", 1) != 0;
  options.by_name = flags.GetInt("by-name", 0) != 0;
  options.json = flags.Get("json", "");
  options.plot = flags.Get("plot", "");
  options.stats = flags.GetInt("stats", 0) != 0;
  options.metrics = flags.GetInt("metrics", 1) != 0;
  pin_sides = flags.GetInt(
                  "pin", std::thread::hardware_concurrency() >= 2 ? 1 : 0) != 0;
  if (options.mode != "latency" && options.mode != "throughput" &&
      options.mode != "bandwidth") {
    std::fprintf(stderr, "bench: --mode latency|throughput|bandwidth\n");
    return 64;
  }

  // The raw baselines first, while no RPC event loop runs: a busy-polling
  // loop left spinning would take a core from the baseline.
  const bool rdma = options.uri.rfind("rdma://", 0) == 0;
  // Where the RPC side's loops sleep between calls, rounds alternate RPC
  // and raw, so that a slow spell of this shared machine falls on both
  // alike: TCP latency and bandwidth, and RDMA bandwidth in event mode.
  const bool alternate_bandwidth =
      options.mode == "bandwidth" && options.raw &&
      (!rdma || options.poll == transport::PollMode::kEvent);
  // NaN where not measured here (or measured in alternating rounds below).
  std::vector<Result> raw(options.sizes.size());
  for (size_t i = 0; i < options.sizes.size(); ++i) {
    const size_t size = options.sizes[i];
    Result& r = raw[i];
    r.raw_p50 = r.raw_p99 = r.raw_gbps = NAN;
    if (!options.raw) continue;
    if (options.mode == "latency" && rdma &&
        options.poll != transport::PollMode::kHybrid) {
      r.raw_p50 = RawVerbs(argv[0], HostOf(options.uri), "pingpong", size,
                           options.iters, "p50 ");
    } else if (options.mode == "latency" &&
               options.poll == transport::PollMode::kBusy) {
      const auto base =
          TcpPingPong<BusySide>(size, options.warmup, options.iters);
      r.raw_p50 = Percentile(base, 0.5);
      r.raw_p99 = Percentile(base, 0.99);
    } else if (options.mode == "bandwidth" && !alternate_bandwidth) {
      r.raw_gbps = RawVerbs(argv[0], HostOf(options.uri), "write-bw", size,
                            options.iters, "outstanding: ");
    }
  }

  // Our own server when the port is 0.
  std::unique_ptr<rpc::Server> server;
  BenchService service;
  auto parsed = transport::ParseUri(options.uri);
  if (!parsed.ok()) {
    std::fprintf(stderr, "bench: %s\n", parsed.status().ToString().c_str());
    return 64;
  }
  if (parsed->port == 0) {
    rpc::ServerOptions server_options;
    server_options.workers = 1;
    server_options.enable_metrics = options.metrics;
    server_options.transport.poll_mode = options.poll;
    server_options.transport.max_payload_size = 1ull << 30;
    server_options.max_response_size = 1ull << 30;
    server = std::make_unique<rpc::Server>(server_options);
    server->RegisterService(&service);
    auto bound = server->Listen(options.uri);
    if (!bound.ok()) {
      std::fprintf(stderr, "bench: %s\n", bound.status().ToString().c_str());
      return 1;
    }
    options.uri = *bound;
  }
  const size_t largest =
      *std::max_element(options.sizes.begin(), options.sizes.end());
  auto arena = Arena(largest);
  rpc::Channel channel(options.uri, ChannelOptionsFor(options));

  if (pin_sides) {  // The channel's loop on CPU 0, the server's on CPU 1.
    std::promise<void> pinned;
    boost::asio::post(channel.executor(), [&] {
      PinTo(0);
      pinned.set_value();
    });
    pinned.get_future().wait();
    RunCalls(channel, 1, 1, kPin, [] { return Buffer(); });
  }
  std::vector<Result> results;
  uint64_t total_errors = 0;
  for (size_t i = 0; i < options.sizes.size(); ++i) {
    const size_t size = options.sizes[i];
    Result r;
    r.mode = options.mode;
    r.size = size;
    r.raw_p50 = raw[i].raw_p50;
    r.raw_p99 = raw[i].raw_p99;
    r.raw_gbps = raw[i].raw_gbps;
    if (options.mode == "latency" &&
        (rdma ? options.poll == transport::PollMode::kHybrid
              : options.poll != transport::PollMode::kBusy)) {
      // Rounds alternate RPC and raw ping-pongs (over TCP in event mode also
      // the epoll and bare-Asio floors), so that a slow spell of this shared
      // machine falls on all alike. A hybrid loop stops spinning between
      // rounds; a busy one would not, so busy mode measured its raw
      // baseline first. In hybrid mode the raw TCP ping-pong polls too; the
      // raw verbs ping-pong always does.
      constexpr int kRounds = 10;
      std::vector<double> raw_samples, epoll_samples, asio_samples;
      std::vector<double> raw_verbs_p50s;
      std::vector<double> round_ratios, epoll_ratios, asio_ratios;
      const auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return Percentile(v, 0.5);
      };
      for (int round = 0; round < kRounds; ++round) {
        const int n = RoundShare(options.iters, kRounds, round);
        const auto rpc =
            RpcLatency(channel, *arena, size, round == 0 ? options.warmup : 0,
                       n, options.by_name, r.errors);
        r.samples.insert(r.samples.end(), rpc.begin(), rpc.end());
        if (options.raw && rdma) {
          const double base = RawVerbs(argv[0], HostOf(options.uri), "pingpong",
                                       size, n, "p50 ");
          if (!rpc.empty() && std::isfinite(base)) {
            raw_verbs_p50s.push_back(base);
            round_ratios.push_back(median(rpc) / base);
          }
        } else if (options.raw) {
          const int warm = round == 0 ? options.warmup : 0;
          const auto base = options.poll == transport::PollMode::kHybrid
                                ? TcpPingPong<BusySide>(size, warm, n)
                                : TcpPingPong<BlockingSide>(size, warm, n);
          raw_samples.insert(raw_samples.end(), base.begin(), base.end());
          if (!rpc.empty() && !base.empty()) {
            round_ratios.push_back(median(rpc) / median(base));
          }
          if (options.poll != transport::PollMode::kEvent) continue;
          const auto epoll = TcpPingPong<EpollSide>(size, warm, n);
          epoll_samples.insert(epoll_samples.end(), epoll.begin(), epoll.end());
          const auto floor = AsioTcpPingPong(size, warm, n);
          asio_samples.insert(asio_samples.end(), floor.begin(), floor.end());
          if (!base.empty() && !epoll.empty() && !floor.empty()) {
            epoll_ratios.push_back(median(epoll) / median(base));
            asio_ratios.push_back(median(floor) / median(base));
          }
        }
      }
      std::sort(r.samples.begin(), r.samples.end());
      std::sort(raw_samples.begin(), raw_samples.end());
      std::sort(epoll_samples.begin(), epoll_samples.end());
      std::sort(asio_samples.begin(), asio_samples.end());
      if (options.raw && rdma) {
        r.raw_p50 = raw_verbs_p50s.empty() ? NAN : median(raw_verbs_p50s);
      } else if (options.raw) {
        r.raw_p50 = Percentile(raw_samples, 0.5);
        r.raw_p99 = Percentile(raw_samples, 0.99);
        if (!epoll_samples.empty()) {
          r.epoll_p50 = Percentile(epoll_samples, 0.5);
          r.asio_p50 = Percentile(asio_samples, 0.5);
        }
        if (!epoll_ratios.empty()) {
          r.epoll_round_ratio = median(epoll_ratios);
          r.asio_round_ratio = median(asio_ratios);
        }
      }
      if (!round_ratios.empty()) {
        std::sort(round_ratios.begin(), round_ratios.end());
        r.round_ratio_median = Percentile(round_ratios, 0.5);
        r.round_ratio_min = round_ratios.front();
        r.round_ratio_max = round_ratios.back();
      }
    } else if (options.mode == "latency") {
      r.samples = RpcLatency(channel, *arena, size, options.warmup,
                             options.iters, options.by_name, r.errors);
    }
    if (options.mode == "latency") {
      r.p50 = Percentile(r.samples, 0.5);
      r.p99 = Percentile(r.samples, 0.99);
      r.p999 = Percentile(r.samples, 0.999);
      r.max = r.samples.empty() ? 0 : r.samples.back();
    } else if (options.mode == "throughput") {
      r.calls_per_s = RpcThroughput(options, *arena, size, r.errors);
    } else if (alternate_bandwidth) {
      // Rounds alternate RPC and the raw stream or WRITEs, as for latency.
      const auto raw_gbps = [&](int n) {
        return rdma ? RawVerbs(argv[0], HostOf(options.uri), "write-bw", size,
                               n, "outstanding: ")
                    : RawTcpBandwidth(size, n);
      };
      constexpr int kRounds = 4;
      double rpc_seconds = 0, raw_seconds = 0;
      for (int round = 0; round < kRounds; ++round) {
        const int n = RoundShare(options.iters, kRounds, round);
        if (n == 0) continue;
        const double bytes = static_cast<double>(size) * n;
        raw_seconds += bytes / 1e9 / raw_gbps(n);
        rpc_seconds +=
            bytes / 1e9 / RpcBandwidth(channel, *arena, size, n, r.errors);
      }
      const double bytes = static_cast<double>(size) * options.iters;
      r.gbps = bytes / rpc_seconds / 1e9;
      r.raw_gbps = bytes / raw_seconds / 1e9;
    } else {
      r.gbps = RpcBandwidth(channel, *arena, size, options.iters, r.errors);
    }
    total_errors += r.errors;
    if (options.stats && server) PrintServerStats(*server, r);
    results.push_back(std::move(r));
  }

  // The report.
  std::printf("rdmarpc bench: %s over %s (poll %s%s)\n", options.mode.c_str(),
              options.uri.c_str(), poll.c_str(),
              pin_sides ? ", client side on CPU 0, server side on CPU 1" : "");
  const char* raw_name = rdma ? "raw verbs"
                         : options.poll == transport::PollMode::kEvent
                             ? "raw TCP"
                             : "raw TCP (polling)";
  for (const Result& r : results) {
    if (r.mode == "latency") {
      std::printf(
          "  %-8s p50 %8.2f us  p99 %8.2f  p999 %8.2f  max %8.2f | %s p50 "
          "%8.2f us | ratio %.2f\n",
          SizeName(r.size).c_str(), r.p50, r.p99, r.p999, r.max, raw_name,
          r.raw_p50, r.p50 / r.raw_p50);
      if (std::isfinite(r.epoll_p50)) {
        // The kernel's share: waiting in epoll before each read.
        std::printf("  %-8s epoll loop p50 %8.2f us = %.2f x raw\n", "",
                    r.epoll_p50, r.epoll_p50 / r.raw_p50);
      }
      if (std::isfinite(r.asio_p50)) {
        // The floor: how much of the ratio an Asio echo alone costs.
        std::printf(
            "  %-8s Asio loop p50 %8.2f us = %.2f x raw; rdmarpc = "
            "%.2f x Asio loop\n",
            "", r.asio_p50, r.asio_p50 / r.raw_p50, r.p50 / r.asio_p50);
      }
      if (std::isfinite(r.round_ratio_median)) {
        std::printf("  %-8s per-round ratio: median %.3f (range %.3f-%.3f)\n",
                    "", r.round_ratio_median, r.round_ratio_min,
                    r.round_ratio_max);
      }
      if (std::isfinite(r.asio_round_ratio)) {
        std::printf(
            "  %-8s per-round floors: epoll loop %.3f, Asio loop %.3f x raw\n",
            "", r.epoll_round_ratio, r.asio_round_ratio);
      }
    } else if (r.mode == "throughput") {
      std::printf("  %-8s %10.0f calls/s  (%d outstanding x %d connections)\n",
                  SizeName(r.size).c_str(), r.calls_per_s, options.outstanding,
                  options.connections);
    } else {
      std::printf("  %-8s %7.3f GB/s | %s %7.3f GB/s | ratio %.2f\n",
                  SizeName(r.size).c_str(), r.gbps,
                  rdma ? "raw WRITE" : "raw TCP", r.raw_gbps,
                  r.gbps / r.raw_gbps);
    }
  }
  // The issue's targets, where this run measured them.
  for (const Result& r : results) {
    if (r.mode == "latency" && r.size == 16 && std::isfinite(r.raw_p50)) {
      const double limit = rdma ? 1.2 : 1.15;
      std::printf("target: 16 B p50 <= %.2f x raw: %.2f -> %s\n", limit,
                  r.p50 / r.raw_p50,
                  r.p50 <= limit * r.raw_p50 ? "MET" : "NOT MET");
    }
    if (r.mode == "bandwidth" && rdma &&
        (r.size == (4u << 20) || r.size == (64u << 20)) &&
        std::isfinite(r.raw_gbps)) {
      std::printf("target: %s goodput >= 0.85 x raw WRITE: %.2f -> %s\n",
                  SizeName(r.size).c_str(), r.gbps / r.raw_gbps,
                  r.gbps >= 0.85 * r.raw_gbps ? "MET" : "NOT MET");
    }
  }
  if (total_errors > 0)
    std::printf("errors: %llu calls failed\n",
                static_cast<unsigned long long>(total_errors));
  if (!options.json.empty()) WriteJson(options, results);
  if (!options.plot.empty()) Plot(options, results);
  return total_errors == 0 ? 0 : 1;
}

}  // namespace
}  // namespace rdmarpc::bench

int main(int argc, char** argv) { return rdmarpc::bench::Run(argc, argv); }
