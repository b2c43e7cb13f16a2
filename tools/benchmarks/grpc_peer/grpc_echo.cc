// gRPC C++'s echo, for `tools/bench --mode grid --peer grpc`: the mainstream
// peer measured in the same run and the same pinning as rdmarpc.
//
//   grpc_echo --serve 127.0.0.1:0 [--cpu 1] [--tls-cert F --tls-key F]
//       an echo server (over TLS with a certificate and key); prints
//       "listening on port N", runs until SIGTERM
//   grpc_echo --target HOST:PORT --size B --outstanding K
//             [--channels N] [--warmup S] [--seconds S] [--cpu 0]
//             [--tls-ca F] (TLS, trusting that CA)
//       K calls of B bytes outstanding, spread over N channels (1), each its
//       own connection, for S seconds after the warm-up; prints
//       "calls/s N" (exit 1 if any call failed), and with K = 1 then
//       "p50_us N", the median round trip
//
// Both sides use gRPC at its leanest: the generic callback API with raw
// ByteBuffers (no protobuf parsing or copies; the server answers with the
// very buffer it read), as rdmarpc's bench echo answers with its request's
// own buffer. The process is pinned to --cpu (all of gRPC's threads), as
// bench pins each side's loop.
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr char kMethod[] = "/rdmarpc.bench.Bench/Echo";

void PinProcess(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

// One call: reads the request, writes it back, finishes.
class EchoReactor : public grpc::ServerGenericBidiReactor {
 public:
  EchoReactor() { StartRead(&buffer_); }
  void OnReadDone(bool ok) override {
    if (!ok)
      return Finish(grpc::Status(grpc::StatusCode::INTERNAL, "no request"));
    StartWriteAndFinish(&buffer_, grpc::WriteOptions(), grpc::Status::OK);
  }
  void OnDone() override { delete this; }

 private:
  grpc::ByteBuffer buffer_;
};

class EchoService : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext*) override {
    return new EchoReactor;
  }
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// TLS with --tls-cert and --tls-key (server) or --tls-ca (client); else
// insecure.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(
    const std::string& cert, const std::string& key) {
  if (cert.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({ReadFile(key), ReadFile(cert)});
  return grpc::SslServerCredentials(options);
}
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(
    const std::string& ca) {
  if (ca.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ReadFile(ca);
  return grpc::SslCredentials(options);
}

int Serve(const std::string& address,
          std::shared_ptr<grpc::ServerCredentials> credentials) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  EchoService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, credentials, &port);
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  builder.RegisterCallbackGenericService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "grpc_echo: cannot listen on %s\n", address.c_str());
    return 1;
  }
  std::printf("listening on port %d\n", port);
  std::fflush(stdout);
  int signal = 0;
  sigwait(&signals, &signal);
  server->Shutdown(std::chrono::system_clock::now());
  return 0;
}

int Load(const std::string& target, size_t size, int outstanding, int channels,
         double warmup, double seconds,
         const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // Each channel its own connection: channels to one target otherwise
  // share a subchannel, and so one TCP connection.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (int c = 0; c < std::max(channels, 1); ++c) {
    stubs.push_back(std::make_unique<grpc::GenericStub>(
        grpc::CreateCustomChannel(target, credentials, args)));
  }
  const std::string bytes(size, 'x');
  grpc::Slice slice(bytes);
  const grpc::ByteBuffer request(&slice, 1);
  std::atomic<uint64_t> completed{0}, failed{0};
  std::atomic<bool> stop{false};
  std::atomic<int> running{outstanding};
  std::promise<void> drained;
  struct Call {
    grpc::ClientContext context;
    grpc::ByteBuffer response;
    std::chrono::steady_clock::time_point start;
  };
  // With one call outstanding, each call's round trip once warm.
  std::atomic<bool> recording{false};
  std::mutex mu;
  std::vector<double> rtt_us;
  std::function<void(grpc::GenericStub*)> issue = [&](grpc::GenericStub* stub) {
    auto* call = new Call;
    if (outstanding == 1) call->start = std::chrono::steady_clock::now();
    stub->UnaryCall(
        &call->context, kMethod, grpc::StubOptions(), &request, &call->response,
        [&, stub, call](grpc::Status status) {
          if (status.ok() && call->response.Length() == size) {
            completed.fetch_add(1, std::memory_order_relaxed);
            if (recording.load(std::memory_order_relaxed)) {
              std::lock_guard lock(mu);
              rtt_us.push_back(
                  std::chrono::duration<double, std::micro>(
                      std::chrono::steady_clock::now() - call->start)
                      .count());
            }
          } else {
            if (failed.fetch_add(1) == 0) {
              std::fprintf(stderr, "grpc_echo: %s\n",
                           status.error_message().c_str());
            }
          }
          delete call;
          if (!stop.load(std::memory_order_relaxed)) {
            return issue(stub);
          }
          if (running.fetch_sub(1) == 1) drained.set_value();
        });
  };
  for (int i = 0; i < outstanding; ++i) {
    issue(stubs[i % stubs.size()].get());
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(warmup));
  const uint64_t from = completed.load();
  const auto start = std::chrono::steady_clock::now();
  recording = outstanding == 1;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const uint64_t to = completed.load();
  recording = false;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  stop = true;
  drained.get_future().wait();
  std::printf("calls/s %.1f\n", static_cast<double>(to - from) / elapsed);
  if (outstanding == 1) {
    std::lock_guard lock(mu);
    if (!rtt_us.empty()) {
      std::nth_element(rtt_us.begin(), rtt_us.begin() + rtt_us.size() / 2,
                       rtt_us.end());
      std::printf("p50_us %.1f\n", rtt_us[rtt_us.size() / 2]);
    }
  }
  return failed.load() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strncmp(argv[i], "--", 2) == 0) flags[argv[i] + 2] = argv[i + 1];
  }
  const auto get = [&](const char* name, const char* fallback) {
    auto found = flags.find(name);
    return found == flags.end() ? std::string(fallback) : found->second;
  };
  PinProcess(std::stoi(get("cpu", "-1")));
  if (flags.count("serve")) {
    return Serve(flags["serve"],
                 ServerCredentials(get("tls-cert", ""), get("tls-key", "")));
  }
  if (!flags.count("target")) {
    std::fprintf(stderr, "usage: grpc_echo --serve ADDRESS | --target ...\n");
    return 64;
  }
  return Load(flags["target"], std::stoull(get("size", "16")),
              std::stoi(get("outstanding", "1")),
              std::stoi(get("channels", "1")), std::stod(get("warmup", "0.3")),
              std::stod(get("seconds", "1")),
              ChannelCredentials(get("tls-ca", "")));
}
