// The KV client:
//   client --uri URI put KEY VALUE      (VALUE "@FILE" reads the file)
//   client --uri URI get KEY            (the value alone on stdout, byte-exact)
//   client --uri URI del KEY
//   client --uri URI scan PREFIX [--limit N]
//   client --uri URI scan-stream PREFIX [--limit N]
//                                       (a server-streaming call: every key
//                                        and its value's size, no limit)
//   client --uri URI put-stream KEY VALUE [KEY VALUE...]
//                                       (a client-streaming call: the puts
//                                        in order, then what was stored)
//   client --uri URI load --count N --size BYTES [--bulk 1]
//                                       (with --bulk, each Put lends its
//                                        value and each Get names where its
//                                        value lands: include/rdmarpc/bulk.h;
//                                        prints copies and registrations
//                                        per call)
//   client --uri URI session            (one command a line from stdin, one
//                                        connection; prints each call)
//   client --uri URI wire               (the server's counters of what crossed
//                                        the wire, examples/common/wire.h)
// URI may name a cluster (list://, etcd://: docs/cluster.md); --balance
// round-robin|least-loaded|hash spreads the calls, hash by each call's key,
// and a session then also takes `endpoints`, `wait-endpoints N` and
// `lookup KEY` (a get for which an absent key is no failure). An etcd that
// wants credentials: the server's --etcd-* flags (server.cc).
// With a token (the first line of --token-file FILE, or $KV_TOKEN), every
// call carries "authorization: Bearer TOKEN" (the server's token). Over
// tls:// --tls-ca FILE checks the server (--tls-cert and --tls-key prove the
// client's identity; --tls-server-name the name to check). --timing 1
// prints each call's latency on stderr. A failed call prints its status on
// stderr and exits non-zero (1; 2 for bad usage).
#include <boost/asio/use_future.hpp>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>
#include <vector>

#include "examples/common/flags.h"
#include "examples/common/wire.h"
#include "examples/kv/kv_service.h"
#include "rdmarpc/bulk.h"
#include "rdmarpc/introspection.h"
#include "rdmarpc/memory.h"

namespace rdmarpc::examples::kv {
namespace {

using boost::asio::use_future;

int Usage() {
  std::fprintf(
      stderr,
      "usage: client --uri URI put KEY VALUE|@FILE | get KEY | del KEY"
      " | scan PREFIX [--limit N] | scan-stream PREFIX [--limit N]"
      " | put-stream KEY VALUE [KEY VALUE...]"
      " | load --count N --size BYTES [--bulk 1]"
      " | session | wire"
      " [--balance round-robin|least-loaded|hash]\n"
      "A session also takes: endpoints | wait-endpoints N | lookup KEY\n");
  return 2;
}

class Cli {
 public:
  Cli(const Flags& flags)
      : flags_(flags), timing_(flags.GetInt("timing", 0) != 0) {
    rpc::ChannelOptions options;
    options.transport.max_payload_size = kMaxMessageSize;
    options.transport.tls = flags.Tls(/*server=*/false);
    options.max_request_size = kMaxMessageSize;
    if (const std::string token = flags.Secret("token", "KV_TOKEN");
        !token.empty()) {
      options.interceptors.push_back(
          std::make_shared<rpc::TokenClientInterceptor>(token));
    }
    // A cluster (list://, etcd://): spread as --balance says; by key, each
    // key's calls go to the server that holds it. Idempotent methods (Put,
    // Get, Scan: kv.proto) are sent again if their server dies.
    const std::string balance = flags.Get("balance", "round-robin");
    by_key_ = balance == "hash";
    options.cluster.policy = by_key_ ? rpc::LoadBalancing::kHashRing
                             : balance == "least-loaded"
                                 ? rpc::LoadBalancing::kLeastLoaded
                                 : rpc::LoadBalancing::kRoundRobin;
    options.retry.max_attempts = 3;
    options.cluster.naming.etcd = flags.Etcd();
    channel_ = std::make_shared<rpc::Channel>(
        flags.Get("uri", "auto://127.0.0.1:5001"), options);
    stub_ = std::make_unique<KeyValue::Stub>(channel_);
  }

  int Run(const std::vector<std::string>& args) {
    if (args.empty()) return Usage();
    const std::string& command = args[0];
    if (command == "put" && args.size() == 3) return Put(args[1], args[2]);
    if (command == "get" && args.size() == 2) return Get(args[1]);
    if (command == "del" && args.size() == 2) return Delete(args[1]);
    if (command == "scan" && args.size() == 2) return Scan(args[1]);
    if (command == "scan-stream" && args.size() == 2) {
      return ScanStream(args[1]);
    }
    if (command == "put-stream" && args.size() >= 3 && args.size() % 2 == 1) {
      return PutStream(args);
    }
    if (command == "load" && args.size() == 1) return Load();
    if (command == "session" && args.size() == 1) return Session();
    if (command == "wire" && args.size() == 1) {
      return examples::PrintWire(channel_);
    }
    if (command == "endpoints" && args.size() == 1) return Endpoints();
    if (command == "wait-endpoints" && args.size() == 2) {
      return WaitEndpoints(std::stoul(args[1]));
    }
    if (command == "lookup" && args.size() == 2) return Get(args[1], true);
    return Usage();
  }

 private:
  static rpc::CallOptions Options() {
    return rpc::CallOptions::WithTimeout(std::chrono::seconds(60));
  }
  // A call about `key`: with --balance hash, the key picks the server.
  rpc::CallOptions Options(const std::string& key) const {
    rpc::CallOptions options = Options();
    if (by_key_) options.balance_key = rpc::BalanceKey(key);
    return options;
  }

  // A cluster's endpoints and the calls each has answered.
  int Endpoints() {
    for (const rpc::EndpointStats& endpoint : channel_->endpoints()) {
      std::printf("  %s: %s, %llu calls\n", endpoint.uri.c_str(),
                  endpoint.connected ? "connected" : "not connected",
                  static_cast<unsigned long long>(endpoint.calls));
    }
    return 0;
  }

  // Waits (up to 30 s) until the cluster lists `n` endpoints and each is
  // connected.
  int WaitEndpoints(size_t n) {
    const auto give_up = rpc::Clock::now() + std::chrono::seconds(30);
    const auto start = rpc::Clock::now();
    while (rpc::Clock::now() < give_up) {
      const auto endpoints = channel_->endpoints();
      size_t connected = 0;
      for (const auto& endpoint : endpoints) connected += endpoint.connected;
      if (endpoints.size() == n && connected == n) {
        std::printf(
            "  %zu endpoints after %.1f s\n", n,
            std::chrono::duration<double>(rpc::Clock::now() - start).count());
        return 0;
      }
      // Calls connect a cluster's endpoints: one that is cheap.
      ScanRequest request;
      request.set_limit(1);
      stub_->async_Scan(request, Options(), use_future).get();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::printf("  still not %zu connected endpoints after 30 s\n", n);
    return 1;
  }

  // Waits for a call, reports its latency and status; true when OK.
  template <typename Future>
  auto Wait(const char* what, Future future) {
    const auto start = rpc::Clock::now();
    auto result = future.get();
    if (timing_) {
      const std::chrono::duration<double, std::micro> took =
          rpc::Clock::now() - start;
      std::fprintf(
          session_ ? stdout : stderr, "  [%s: %s, %.1f us]\n", what,
          std::string(StatusCodeName(std::get<0>(result).code())).c_str(),
          took.count());
    }
    return result;
  }

  int Fail(const Status& status) const {
    std::fprintf(session_ ? stdout : stderr, "%s%s\n", session_ ? "  " : "",
                 status.ToString().c_str());
    return 1;
  }

  int Put(const std::string& key, const std::string& value) {
    PutRequest request;
    request.set_key(key);
    if (!value.empty() && value[0] == '@') {
      std::ifstream file(value.substr(1), std::ios::binary);
      if (!file) {
        std::fprintf(stderr, "cannot read %s\n", value.substr(1).c_str());
        return 2;
      }
      std::ostringstream contents;
      contents << file.rdbuf();
      request.set_value(contents.str());
    } else {
      request.set_value(value);
    }
    auto [status, reply] =
        Wait("Put", stub_->async_Put(request, Options(key), use_future));
    return status.ok() ? 0 : Fail(status);
  }

  // `lookup`: a key that is absent is an answer, not a failure.
  int Get(const std::string& key, bool lookup = false) {
    GetRequest request;
    request.set_key(key);
    auto [status, reply] =
        Wait("Get", stub_->async_Get(request, Options(key), use_future));
    if (lookup && status.code() == StatusCode::kNotFound) {
      std::printf("  (absent)\n");
      return 0;
    }
    if (!status.ok()) return Fail(status);
    if (session_) {
      const std::string& v = reply.value();
      if (v.size() <= 64) {
        std::printf("  = \"%s\"\n", v.c_str());
      } else {
        std::printf("  = <%zu bytes>\n", v.size());
      }
      return 0;
    }
    std::fwrite(reply.value().data(), 1, reply.value().size(), stdout);
    return 0;
  }

  // Runs one command a line from stdin over this client's one connection,
  // echoing each and its outcome; returns how many did not succeed (an
  // expected failure is written "!cmd ...": it counts when it succeeds).
  int Session() {
    session_ = true;
    timing_ = true;
    int unexpected = 0;
    std::string line;
    char buffer[4096];
    while (std::fgets(buffer, sizeof(buffer), stdin) != nullptr) {
      line = buffer;
      while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) {
        line.pop_back();
      }
      if (line.empty() || line[0] == '#') continue;
      const bool expect_failure = line[0] == '!';
      std::istringstream words(expect_failure ? line.substr(1) : line);
      std::vector<std::string> args;
      for (std::string word; words >> word;) {
        args.push_back(word == "\"\"" ? std::string() : word);  // "" is empty.
      }
      std::printf("> %s\n", line.c_str());
      std::fflush(stdout);
      const int rc = Run(args);
      std::fflush(stderr);
      std::fflush(stdout);  // Each result as it comes, into a pipe or file too.
      if ((rc == 0) == expect_failure) {
        std::printf("  UNEXPECTED %s\n",
                    expect_failure ? "success" : "failure");
        ++unexpected;
      }
    }
    return unexpected == 0 ? 0 : 1;
  }

  int Delete(const std::string& key) {
    DeleteRequest request;
    request.set_key(key);
    auto [status, reply] =
        Wait("Delete", stub_->async_Delete(request, Options(key), use_future));
    return status.ok() ? 0 : Fail(status);
  }

  int Scan(const std::string& prefix) {
    ScanRequest request;
    request.set_prefix(prefix);
    request.set_limit(static_cast<uint32_t>(flags_.GetInt("limit", 0)));
    auto [status, reply] =
        Wait("Scan", stub_->async_Scan(request, Options(), use_future));
    if (!status.ok()) return Fail(status);
    for (const auto& entry : reply.entries()) {
      std::printf("%s\t%llu\n", entry.key().c_str(),
                  static_cast<unsigned long long>(entry.value_size()));
    }
    if (reply.truncated()) std::printf("... (more past the limit)\n");
    return 0;
  }

  int ScanStream(const std::string& prefix) {
    ScanRequest request;
    request.set_prefix(prefix);
    request.set_limit(static_cast<uint32_t>(flags_.GetInt("limit", 0)));
    auto stream = stub_->OpenScanStream(request, Options());
    for (;;) {
      auto [status, entry] = stream->async_Read(use_future).get();
      if (!entry) return status.ok() ? 0 : Fail(status);
      std::printf("%s\t%zu\n", entry->key().c_str(), entry->value().size());
    }
  }

  int PutStream(const std::vector<std::string>& args) {
    auto stream = stub_->OpenPutStream(Options());
    for (size_t i = 1; i + 1 < args.size(); i += 2) {
      PutRequest put;
      put.set_key(args[i]);
      put.set_value(args[i + 1]);
      // A failed write: the server ended the call; Finish says why.
      if (!stream->async_Write(put, use_future).get().ok()) break;
    }
    stream->WritesDone();
    auto [status, reply] = stream->async_Finish(use_future).get();
    if (!status.ok()) return Fail(status);
    std::printf("stored %llu keys, %llu value bytes\n",
                static_cast<unsigned long long>(reply.keys()),
                static_cast<unsigned long long>(reply.value_bytes()));
    return 0;
  }

  // The server's ibv_reg_mr calls so far (rdmarpc.Introspection); 0 where
  // it cannot say.
  uint64_t ServerRegistrations() {
    rdmarpc::Introspection::Stub stub(channel_);
    auto [status, metrics] =
        stub.async_GetMetrics({}, Options(), use_future).get();
    return status.ok() ? metrics.rdma().registrations() : 0;
  }

  // Writes N keys, reads them back with up to kWindow calls in flight,
  // verifies every value, and prints the rates. With --bulk, values move
  // between the server's memory and this process's registered slots (one
  // per call in flight) without a copy where the transport allows.
  int Load() {
    const long long count = flags_.GetInt("count", 1000);
    const long long size = flags_.GetInt("size", 100);
    const bool bulk = flags_.GetInt("bulk", 0) != 0;
    if (count < 1 || size < 0 || (bulk && size < 1)) return Usage();
    constexpr size_t kWindow = 32;
    auto key = [](long long i) { return "load/" + std::to_string(i); };
    auto value = [size](long long i) {
      std::string v(static_cast<size_t>(size), '\0');
      for (size_t j = 0; j < v.size(); ++j)
        v[j] = static_cast<char>('a' + (i + j) % 26);
      return v;
    };
    std::shared_ptr<MemoryRegistration> slots;
    if (bulk) {
      auto allocated =
          MemoryRegistration::Allocate(kWindow * static_cast<size_t>(size));
      if (!allocated.ok()) return Fail(allocated.status());
      slots = std::move(*allocated);
    }
    // Call i's slot: free again once call i - kWindow has completed.
    auto slot = [&](long long i) {
      return std::span<std::byte>(
          slots->data() + (i % kWindow) * static_cast<size_t>(size),
          static_cast<size_t>(size));
    };
    const BulkCosts costs_before = ReadBulkCosts();
    const uint64_t server_before = bulk ? ServerRegistrations() : 0;

    const auto put_start = rpc::Clock::now();
    std::deque<std::future<std::tuple<Status, PutReply>>> puts;
    for (long long i = 0; i < count; ++i) {
      PutRequest request;
      request.set_key(key(i));
      rpc::CallOptions options = Options();
      if (bulk) {
        const std::string v = value(i);
        std::memcpy(slot(i).data(), v.data(), v.size());  // The data, made.
        options.bulk.push_back(
            {slot(i).data(), slot(i).size(), BulkAccess::kRead});
      } else {
        request.set_value(value(i));
      }
      puts.push_back(stub_->async_Put(request, options, use_future));
      while (puts.size() >= kWindow || (i == count - 1 && !puts.empty())) {
        auto [status, reply] = puts.front().get();
        puts.pop_front();
        if (!status.ok()) return Fail(status);
      }
    }
    const std::chrono::duration<double> put_time =
        rpc::Clock::now() - put_start;

    const auto get_start = rpc::Clock::now();
    struct Get {
      long long which;
      std::unique_ptr<ClientContext> context;
      std::future<std::tuple<Status, GetReply>> reply;
    };
    std::deque<Get> gets;
    for (long long i = 0; i < count; ++i) {
      GetRequest request;
      request.set_key(key(i));
      auto context = std::make_unique<ClientContext>(Options());
      if (bulk) {
        request.set_value_as_attachment(true);
        context->set_response_destination(slot(i));
      }
      auto reply = stub_->async_Get(*context, request, use_future);
      gets.push_back({i, std::move(context), std::move(reply)});
      while (gets.size() >= kWindow || (i == count - 1 && !gets.empty())) {
        Get& done = gets.front();
        auto [status, reply] = done.reply.get();
        if (!status.ok()) return Fail(status);
        const std::string_view got =
            bulk ? done.context->response_attachment().view()
                 : std::string_view(reply.value());
        if (got != value(done.which)) {
          std::fprintf(stderr, "load: value of %s differs\n",
                       key(done.which).c_str());
          return 1;
        }
        gets.pop_front();
      }
    }
    const std::chrono::duration<double> get_time =
        rpc::Clock::now() - get_start;
    const double mb =
        static_cast<double>(count) * static_cast<double>(size) / 1e6;
    std::printf("load: %lld keys of %lld bytes, all verified\n", count, size);
    std::printf("  put: %.0f calls/s, %.1f MB/s\n", count / put_time.count(),
                mb / put_time.count());
    std::printf("  get: %.0f calls/s, %.1f MB/s\n", count / get_time.count(),
                mb / get_time.count());
    if (bulk) {
      // Warm-up (the first use of each slot and arena chunk) included.
      const BulkCosts costs = ReadBulkCosts();
      const double calls = 2.0 * static_cast<double>(count);
      std::printf(
          "  bulk: %.3f copies into place per get; registrations per call "
          "%.3f here, %.3f at the server\n",
          static_cast<double>(costs.response_copies -
                              costs_before.response_copies) /
              static_cast<double>(count),
          static_cast<double>(costs.registrations -
                              costs_before.registrations) /
              calls,
          static_cast<double>(ServerRegistrations() - server_before) / calls);
    }
    return 0;
  }

  const Flags& flags_;
  bool timing_;
  bool session_ = false;
  std::shared_ptr<rpc::Channel> channel_;
  bool by_key_ = false;  // --balance hash.
  std::unique_ptr<KeyValue::Stub> stub_;
};

}  // namespace
}  // namespace rdmarpc::examples::kv

int main(int argc, char** argv) {
  const rdmarpc::examples::Flags flags(argc, argv);
  rdmarpc::examples::kv::Cli cli(flags);
  return cli.Run(flags.positional());
}
