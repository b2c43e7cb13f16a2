// The echo benchmark: the RPC side (latency, throughput, bandwidth).
#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <cmath>
#include <cstdio>
#include <functional>
#include <future>
#include <thread>

#include "tools/benchmarks/bench.h"

namespace rdmarpc::bench {

using namespace std::chrono_literals;

rpc::ChannelOptions ChannelOptionsFor(const Options& options) {
  rpc::ChannelOptions channel;
  channel.transport.poll_mode = options.poll;
  channel.transport.rdma_pooled_grants = options.pooled_grants;
  channel.transport.max_payload_size = 1ull << 30;
  channel.max_request_size = 1ull << 30;
  channel.callback_threads = options.callback_threads;
  channel.max_request_bytes_in_flight = options.window;
  channel.transport.tls = ClientTls(options.tls);
  return channel;
}

Options::TlsFiles TlsFromFlags(const rdmarpc::Flags& flags) {
  return {flags.Get("tls-cert", ""), flags.Get("tls-key", ""),
          flags.Get("tls-ca", "")};
}

std::optional<TlsOptions> ServerTls(const Options::TlsFiles& tls) {
  if (tls.empty()) return std::nullopt;
  TlsOptions options;
  options.cert_file = tls.cert;
  options.key_file = tls.key;
  return options;
}

std::optional<TlsOptions> ClientTls(const Options::TlsFiles& tls) {
  if (tls.empty()) return std::nullopt;
  TlsOptions options;
  options.ca_file = tls.ca;
  return options;
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
                     uint64_t& errors, uint64_t* calls) {
  rpc::CallOptions call_options;
  std::shared_ptr<transport::MemoryRegistration> lent;
  if (options.lend > 0) {
    lent = Arena(options.lend);
    call_options.bulk.push_back(
        {lent->data(), options.lend, BulkAccess::kRead});
  }
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
    channel->Call(kEcho, Payload(arena, size), call_options,
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
  if (calls != nullptr) *calls = completed.load();
  return counted / seconds;
}

// `n` calls of `method`, `k` outstanding, each completion starting the next
// on the channel's own thread; returns how many failed. `on_done` sees the
// running count of completions.
uint64_t RunCalls(rpc::Channel& channel, long long n, int k,
                  const rpc::MethodRef& method,
                  const std::function<Buffer()>& payload,
                  const rpc::CallOptions& options,
                  const std::function<void(long long)>& on_done) {
  return ClosedLoop(
      channel, n, k,
      [&](const auto& end) {
        channel.Call(method, payload(), options,
                     [&end](const Status& status, Buffer) { end(status); });
      },
      on_done);
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

double RpcBulkBandwidth(rpc::Channel& channel,
                        const transport::MemoryRegistration& arena, size_t size,
                        int iters, bool pull, uint64_t& errors) {
  rpc::CallOptions options = rpc::CallOptions::WithTimeout(600s);
  options.bulk.push_back(
      {arena.data(), size, pull ? BulkAccess::kRead : BulkAccess::kWrite});
  const rpc::MethodRef& method = pull ? kPull : kPush;
  const auto none = [] { return Buffer(); };
  // One call first, so connecting and registering are not timed.
  errors += RunCalls(channel, 1, 1, method, none, options);
  const std::string what =
      std::string(pull ? "pull " : "push ") + std::to_string(size) + " B";
  const auto start = Clock::now();
  errors += RunCalls(channel, iters, 2, method, none, options,
                     [&](long long done) { Progress(what, done, iters); });
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(size) * iters / seconds / 1e9;
}

double RpcStreamBandwidth(rpc::Channel& channel,
                          const transport::MemoryRegistration& arena,
                          size_t size, int iters, uint64_t& errors) {
  const auto stream_of = [&](int n) -> double {
    auto stream = channel.OpenStream(kDrain, rpc::StreamKind::kClientStreaming,
                                     rpc::CallOptions::WithTimeout(600s));
    std::promise<Status> written;
    int left = n;  // Written to from the channel's thread only.
    std::function<void()> next = [&] {
      stream->Write(rpc::Payload(Payload(arena, size)),
                    [&](const Status& status) {
                      if (!status.ok() || --left == 0) {
                        return written.set_value(status);
                      }
                      next();
                    });
    };
    const auto start = Clock::now();
    next();
    Status status = written.get_future().get();
    stream->WritesDone();
    std::promise<Status> finished;
    stream->Finish(
        [&](const Status& end, rpc::Payload) { finished.set_value(end); });
    const Status end = finished.get_future().get();
    const double seconds =
        std::chrono::duration<double>(Clock::now() - start).count();
    if (!status.ok() || !end.ok()) {
      ++errors;
      return NAN;
    }
    return static_cast<double>(size) * n / seconds / 1e9;
  };
  stream_of(2);  // Connecting and the pools' growth are not timed.
  return stream_of(iters);
}

}  // namespace rdmarpc::bench
