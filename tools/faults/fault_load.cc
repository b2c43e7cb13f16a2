// The fault table's load (tools/fault-table): mixed calls whose every byte is
// checked end to end, and a server that counts what it executed.
//
//   fault_load server --uri URI
//   fault_load client --uri URI --seconds S [--concurrency N]
//       [--max-size BYTES] [--deadline-ms MS] [--name ROW]
//       [--retry-count N]   (TransportOptions::rdma_retry_count)
//       [--bulk BYTES]      (bulk calls instead, below)
//   Either side: [--pooled-grants 0|1] (TransportOptions::rdma_pooled_grants)
//
// With --bulk, each call carries only the header and lends two regions of
// BYTES of registered memory (include/rdmarpc/bulk.h): the server pulls the
// first (the payload), checks its checksum, and pushes it into the second;
// the client checks the second is the first, byte for byte. Over a URI with
// rails= (transport/rails) the pulls and pushes are sliced over the rails.
// The client also prints the longest time without a call completing:
//   FAULTGAP name longest_ms=N after_mark_ms=M from=HH:MM:SS.mmm
// where, with --mark FILE, M is the longest time without a completion since
// FILE's modification (a fault script touches it as it injects the fault),
// counted from it (-1: no completion after it, or no mark), and `from` is
// when that gap began (UTC).
//
// Each request is a 24-byte header (client id, sequence number, payload
// length, checksum of the payload) and the payload: 16 B to 4 MiB of bytes
// derived from the sequence number. The server checks the checksum (a
// mismatch fails the call DATA_LOSS and is counted), records the sequence
// number (a second execution of one is counted), and echoes the request.
// The client checks that each OK reply is its own request, byte for byte.
//
// The client keeps --concurrency calls in flight for --seconds, then waits
// for the last ones; a call neither completed by its deadline plus a grace
// period is "lost". It ends by asking the server what it saw and prints one
// line, which tools/fault-table turns into a row, and, if a call failed, a
// second with the first failure's status:
//   FAULTROW name ok=N failed=N lost=N twice=N corrupted=N statuses=CODE:N,...
//   FAULTFIRST name CODE: message
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/flags.h"
#include "rdmarpc/bulk.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/memory.h"
#include "rdmarpc/server.h"
#include "rdmarpc/service.h"
#include "tools/faults/checked_payload.h"

namespace rdmarpc::tools {
namespace {

using Clock = std::chrono::steady_clock;

class FaultService : public rpc::Service {
 public:
  FaultService() : rpc::Service("fault.Load") {
    AddMethod("Call", [this](std::shared_ptr<rpc::ServerCall> call) {
      const Buffer& request = call->request();
      Header header;
      if (!RequestIntact(request, &header)) {
        corrupted_.fetch_add(1);
        return call->Finish(
            Status(StatusCode::kDataLoss, "request checksum mismatch"));
      }
      Executed(header);
      call->Finish(Status(), Buffer::CopyOf(request.span()));
    });
    // --bulk: pull loan 0, check it, push it into loan 1.
    AddMethod("Bulk", [this](std::shared_ptr<rpc::ServerCall> call) {
      Header header;
      if (call->request().size() != sizeof(Header) ||
          call->bulk().size() != 2 ||
          call->bulk()[0].length != call->bulk()[1].length) {
        return call->Finish(Status(StatusCode::kInvalidArgument,
                                   "a header and two loans of one size"));
      }
      std::memcpy(&header, call->request().data(), sizeof(header));
      const uint64_t length = call->bulk()[0].length;
      std::shared_ptr<MemoryRegistration> arena = TakeArena(length);
      if (!arena) {
        return call->Finish(
            Status(StatusCode::kResourceExhausted, "no registered memory"));
      }
      call->Pull(call->bulk()[0], 0, {arena->data(), length},
                 [this, call, arena, header, length](const Status& pulled) {
                   if (!pulled.ok()) {
                     GiveBack(arena);
                     return call->Finish(pulled);
                   }
                   if (Checksum(arena->data(), length) != header.checksum) {
                     corrupted_.fetch_add(1);
                     GiveBack(arena);
                     return call->Finish(Status(StatusCode::kDataLoss,
                                                "bulk checksum mismatch"));
                   }
                   Executed(header);
                   call->Push({arena->data(), length}, call->bulk()[1], 0,
                              [this, call, arena](const Status& pushed) {
                                GiveBack(arena);
                                call->Finish(pushed);
                              });
                 });
    });
    // The request is a client id: what this server saw of that client.
    AddMethod("Stats", [this](std::shared_ptr<rpc::ServerCall> call) {
      uint64_t id = 0;
      std::memcpy(&id, call->request().data(),
                  std::min(sizeof(id), call->request().size()));
      std::string text;
      {
        std::lock_guard lock(mu_);
        const PerClient& client = clients_[id];
        text = "executed=" + std::to_string(client.executed.size()) +
               " twice=" + std::to_string(client.twice) +
               " corrupted_in=" + std::to_string(corrupted_.load());
      }
      call->Finish(Status(), Buffer::CopyOf(text));
    });
  }

 private:
  void Executed(const Header& header) {
    std::lock_guard lock(mu_);
    PerClient& client = clients_[header.client];
    if (++client.executed[header.seq] == 2) client.twice++;
  }
  // Registered memory for bulk calls, reused.
  std::shared_ptr<MemoryRegistration> TakeArena(uint64_t length) {
    {
      std::lock_guard lock(mu_);
      for (size_t i = 0; i < arenas_.size(); ++i) {
        if (arenas_[i]->size() == length) {
          auto arena = std::move(arenas_[i]);
          arenas_.erase(arenas_.begin() + static_cast<ptrdiff_t>(i));
          return arena;
        }
      }
    }
    auto fresh = MemoryRegistration::Allocate(length);
    return fresh.ok() ? *fresh : nullptr;
  }
  void GiveBack(std::shared_ptr<MemoryRegistration> arena) {
    std::lock_guard lock(mu_);
    arenas_.push_back(std::move(arena));
  }

  struct PerClient {
    std::unordered_map<uint64_t, int> executed;  // By sequence number.
    uint64_t twice = 0;
  };
  std::mutex mu_;
  std::unordered_map<uint64_t, PerClient> clients_;
  std::vector<std::shared_ptr<MemoryRegistration>> arenas_;  // Guarded by mu_.
  std::atomic<uint64_t> corrupted_{0};
};

int Serve(const rdmarpc::Flags& flags) {
  FaultService service;
  rpc::ServerOptions options;
  options.transport.max_payload_size = 8 << 20;
  options.max_response_size = 8 << 20;
  options.transport.rdma_pooled_grants =
      flags.GetInt("pooled-grants", options.transport.rdma_pooled_grants) != 0;
  rpc::Server server(options);
  server.RegisterService(&service);
  const StatusOr<std::string> uri = server.Listen(flags.Get("uri", ""));
  if (!uri.ok()) {
    std::fprintf(stderr, "fault_load server: %s\n",
                 uri.status().ToString().c_str());
    return 1;
  }
  std::printf("fault server listening on %s\n", uri->c_str());
  std::fflush(stdout);
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

struct Tally {
  std::mutex mu;
  std::condition_variable changed;
  uint64_t in_flight = 0;
  uint64_t ok = 0, failed = 0, corrupted = 0;
  std::map<std::string, uint64_t> statuses;
  std::string first_error;  // The first failed call's status, whole.
  // The longest time without a completion, from the first to the last.
  Clock::time_point last_completion{};
  Clock::duration longest_gap{};
  // --mark: the file, its time once it exists, the longest time without a
  // completion since, and the last completion's time.
  std::string mark_file;
  std::optional<std::chrono::system_clock::time_point> mark;
  std::optional<std::chrono::system_clock::duration> after_mark;
  std::chrono::system_clock::time_point after_mark_from{};  // Its start.
  std::chrono::system_clock::time_point last_wall{};
  std::vector<std::shared_ptr<MemoryRegistration>> arenas;  // --bulk's free.

  // Under mu.
  void Completed() {
    const auto now = Clock::now();
    if (last_completion != Clock::time_point{}) {
      longest_gap = std::max(longest_gap, now - last_completion);
    }
    last_completion = now;
    const auto wall = std::chrono::system_clock::now();
    if (!mark_file.empty()) {
      struct stat st {};
      if (!mark && ::stat(mark_file.c_str(), &st) == 0) {
        mark = std::chrono::system_clock::time_point(
            std::chrono::duration_cast<std::chrono::system_clock::duration>(
                std::chrono::seconds(st.st_mtim.tv_sec) +
                std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
      }
      if (mark && wall > *mark) {
        const auto gap = wall - std::max(*mark, last_wall);
        if (!after_mark || gap > *after_mark) {
          after_mark = gap;
          after_mark_from = std::max(*mark, last_wall);
        }
      }
    }
    last_wall = wall;
    in_flight--;
    changed.notify_all();
  }
};

// --bulk's call: its header as the request, its arena's halves lent (the
// payload to pull, where the server pushes it back).
void StartBulk(rpc::Channel& channel, Tally& tally, uint64_t client,
               uint64_t seq, size_t size, std::chrono::milliseconds deadline) {
  std::shared_ptr<MemoryRegistration> arena;
  {
    std::lock_guard lock(tally.mu);
    tally.in_flight++;
    if (!tally.arenas.empty()) {
      arena = std::move(tally.arenas.back());
      tally.arenas.pop_back();
    }
  }
  if (!arena) {
    auto fresh = MemoryRegistration::Allocate(2 * size);
    if (!fresh.ok()) {
      std::fprintf(stderr, "fault_load: %s\n",
                   fresh.status().ToString().c_str());
      std::_Exit(1);
    }
    arena = *fresh;
  }
  Buffer payload = MakeRequest(client, seq, size);
  std::memcpy(arena->data(), payload.data() + sizeof(Header), size);
  std::memset(arena->data() + size, 0, size);
  Header header;
  std::memcpy(&header, payload.data(), sizeof(header));
  Buffer request = Buffer::Allocate(sizeof(Header));
  std::memcpy(request.data(), &header, sizeof(header));
  rpc::CallOptions options = rpc::CallOptions::WithTimeout(deadline);
  options.bulk.push_back({arena->data(), size, BulkAccess::kRead});
  options.bulk.push_back({arena->data() + size, size, BulkAccess::kWrite});
  channel.Call("fault.Load", "Bulk", std::move(request), options,
               [&tally, arena, size](const Status& status, Buffer) {
                 const bool intact =
                     status.ok() &&
                     std::memcmp(arena->data(), arena->data() + size, size) ==
                         0;
                 std::lock_guard lock(tally.mu);
                 if (!status.ok()) {
                   tally.failed++;
                   tally.statuses[std::string(StatusCodeName(status.code()))]++;
                   if (tally.first_error.empty()) {
                     tally.first_error = status.ToString();
                   }
                 } else if (!intact) {
                   tally.corrupted++;
                 } else {
                   tally.ok++;
                 }
                 tally.arenas.push_back(arena);
                 tally.Completed();
               });
}

int Load(const rdmarpc::Flags& flags) {
  const std::string name = flags.Get("name", "load");
  const auto seconds = std::chrono::seconds(flags.GetInt("seconds", 10));
  const uint64_t concurrency = flags.GetInt("concurrency", 4);
  const size_t max_size = flags.GetInt("max-size", 4 << 20);
  const auto deadline =
      std::chrono::milliseconds(flags.GetInt("deadline-ms", 15000));
  const uint64_t client = std::random_device()();
  const size_t bulk = flags.GetInt("bulk", 0);

  rpc::ChannelOptions channel_options;
  channel_options.transport.max_payload_size = 8 << 20;
  channel_options.transport.rdma_retry_count = static_cast<uint8_t>(
      flags.GetInt("retry-count", tunables::kRdmaRetryCount));
  channel_options.transport.rdma_pooled_grants =
      flags.GetInt("pooled-grants",
                   channel_options.transport.rdma_pooled_grants) != 0;
  rpc::Channel channel(flags.Get("uri", ""), channel_options);
  Tally tally;
  tally.mark_file = flags.Get("mark", "");
  uint64_t seq = 0;
  const auto stop_at = Clock::now() + seconds;
  auto start_one = [&] {
    const uint64_t s = ++seq;
    if (bulk > 0) {
      return StartBulk(channel, tally, client, s, bulk, deadline);
    }
    Buffer request = MakeRequest(client, s, SizeFor(s, max_size));
    const uint32_t sent_checksum = Checksum(request.data(), request.size());
    const size_t sent_size = request.size();
    {
      std::lock_guard lock(tally.mu);
      tally.in_flight++;
    }
    channel.Call(
        "fault.Load", "Call", std::move(request),
        rpc::CallOptions::WithTimeout(deadline),
        [&tally, sent_checksum, sent_size](const Status& status,
                                           Buffer response) {
          std::lock_guard lock(tally.mu);
          tally.Completed();
          if (!status.ok()) {
            tally.failed++;
            tally.statuses[std::string(StatusCodeName(status.code()))]++;
            if (tally.first_error.empty()) {
              tally.first_error = status.ToString();
            }
          } else if (response.size() != sent_size ||
                     Checksum(response.data(), response.size()) !=
                         sent_checksum) {
            tally.corrupted++;
          } else {
            tally.ok++;
          }
        });
  };
  {
    std::unique_lock lock(tally.mu);
    while (Clock::now() < stop_at) {
      while (tally.in_flight < concurrency && Clock::now() < stop_at) {
        lock.unlock();
        start_one();
        lock.lock();
      }
      tally.changed.wait_until(
          lock,
          std::min(stop_at, Clock::now() + std::chrono::milliseconds(100)));
    }
    // The last calls: each has its deadline; a little grace on top.
    tally.changed.wait_until(lock,
                             Clock::now() + deadline + std::chrono::seconds(5),
                             [&] { return tally.in_flight == 0; });
  }
  std::string server_stats = "unreachable";
  {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    // Waits for the link to come back (the link-down rows restore it late).
    rpc::CallOptions options =
        rpc::CallOptions::WithTimeout(std::chrono::seconds(60));
    options.wait_for_ready = true;
    Buffer id = Buffer::Allocate(sizeof(client));
    std::memcpy(id.data(), &client, sizeof(client));
    channel.Call("fault.Load", "Stats", std::move(id), options,
                 [&](const Status& status, Buffer response) {
                   std::lock_guard lock(mu);
                   server_stats = status.ok() ? std::string(response.view())
                                              : status.ToString();
                   done = true;
                   cv.notify_all();
                 });
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
  }
  std::lock_guard lock(tally.mu);
  uint64_t twice = 0;
  if (const auto at = server_stats.find("twice="); at != std::string::npos) {
    twice = std::strtoull(server_stats.c_str() + at + 6, nullptr, 10);
  }
  std::string statuses;
  for (const auto& [code, count] : tally.statuses) {
    statuses +=
        (statuses.empty() ? "" : ",") + code + ":" + std::to_string(count);
  }
  std::printf(
      "FAULTROW %s calls=%llu ok=%llu failed=%llu lost=%llu twice=%llu "
      "corrupted=%llu statuses=%s server=[%s]\n",
      name.c_str(), static_cast<unsigned long long>(seq),
      static_cast<unsigned long long>(tally.ok),
      static_cast<unsigned long long>(tally.failed),
      static_cast<unsigned long long>(tally.in_flight),
      static_cast<unsigned long long>(twice),
      static_cast<unsigned long long>(tally.corrupted),
      statuses.empty() ? "-" : statuses.c_str(), server_stats.c_str());
  const auto ms = [](auto duration) {
    return static_cast<long long>(
        std::chrono::duration_cast<std::chrono::milliseconds>(duration)
            .count());
  };
  std::string from = "-";
  if (tally.after_mark) {
    const auto since_epoch = tally.after_mark_from.time_since_epoch();
    const std::time_t seconds =
        std::chrono::system_clock::to_time_t(tally.after_mark_from);
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    char text[32];
    std::snprintf(text, sizeof(text), "%02d:%02d:%02d.%03lld", utc.tm_hour,
                  utc.tm_min, utc.tm_sec, ms(since_epoch) % 1000);
    from = text;
  }
  std::printf("FAULTGAP %s longest_ms=%lld after_mark_ms=%lld from=%s\n",
              name.c_str(), ms(tally.longest_gap),
              tally.after_mark ? ms(*tally.after_mark) : -1LL, from.c_str());
  if (!tally.first_error.empty()) {
    std::printf("FAULTFIRST %s %s\n", name.c_str(), tally.first_error.c_str());
  }
  std::fflush(stdout);
  // Lost calls would complete (CANCELLED) as the channel goes: not counted.
  std::_Exit(0);
}

}  // namespace
}  // namespace rdmarpc::tools

int main(int argc, char** argv) {
  const rdmarpc::Flags flags(argc, argv);
  const auto& mode = flags.positional();
  if (!mode.empty() && mode[0] == "server") return rdmarpc::tools::Serve(flags);
  if (!mode.empty() && mode[0] == "client") return rdmarpc::tools::Load(flags);
  std::fprintf(stderr,
               "usage: fault_load server --uri URI | client --uri URI "
               "--seconds S [--concurrency N] [--max-size B] "
               "[--deadline-ms MS] [--name ROW]\n");
  return 64;
}
