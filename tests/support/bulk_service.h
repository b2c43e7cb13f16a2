// test.Bulk (tests/bulk_test.cc): a service whose handlers pull from and push
// into the loans of their calls, some of them hostile, and its server.
#ifndef RDMARPC_TESTS_SUPPORT_BULK_SERVICE_H_
#define RDMARPC_TESTS_SUPPORT_BULK_SERVICE_H_

#include <atomic>
#include <catch2/catch_test_macros.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "rdmarpc/bulk.h"
#include "rdmarpc/memory.h"
#include "rdmarpc/server.h"
#include "tests/support/test_support.h"

namespace rdmarpc::testing {

// FNV-1a of `bytes`.
uint64_t Fnv(std::span<const std::byte> bytes);
// Fills `bytes` with a pattern of `seed`.
void Fill(std::span<std::byte> bytes, uint64_t seed);
// How many of `memory`'s bytes are not `expected`.
size_t BytesNot(const MemoryRegistration& memory, std::byte expected);
// `size` bytes of registered memory (the test fails if they cannot be had).
std::shared_ptr<MemoryRegistration> Arena(size_t size);
// Call options lending `size` bytes at `data` with `access`.
CallOptions Lending(std::byte* data, size_t size, BulkAccess access);

// test.Bulk: each method reads its request as words.
//   Pull LEN [OFFSET]  pulls LEN bytes of loan 0 and answers their hash
//   Push LEN SEED [OFFSET]  pushes LEN bytes of a pattern into loan 0
//   Keep               keeps loan 0 for Late, and finishes
//   Late pull|push     uses the kept loan, after its call ended
//   Loose              pulls into memory that is not registered
//   Answer LEN SEED registered|heap  answers with a LEN-byte attachment of
//                      a pattern, from registered memory or the heap
//   PullWarm|PushWarm|AnswerWarm LEN  as Pull, Push and Answer, with the
//                      server's memory registered once (warm_)
//   PullFor MS         pulls all of loan 0 again and again for MS ms, and
//                      answers how many times
//   Forge, Hold, Across, Release, Small: see their definitions
// An operation's error is the call's.
class BulkService {
 public:
  BulkService();
  Service& service() { return service_; }
  int pulls_started() const { return pulls_started_; }
  bool holding() {
    std::lock_guard lock(mu_);
    return held_ != nullptr;
  }
  // How the last hostile transfer (Late, Forge, Across) ended, as the
  // attacker saw it; OK until it has ended (after the client may have
  // seen its call fail), and once taken.
  Status TakeAttack();

 private:
  // PullFor: pulls the whole of loan 0 into warm_ again and again until
  // `until`, and answers how many times.
  void PullUntil(std::shared_ptr<ServerCall> call, Clock::time_point until,
                 uint64_t pulls);
  void Attacked(const Status& status);

  Service service_;
  std::mutex mu_;
  BulkDescriptor kept_;
  std::shared_ptr<ServerCall> held_;
  Status attack_;
  std::atomic<int> pulls_started_{0};
  const std::shared_ptr<MemoryRegistration> warm_ = Arena(1 << 20);
};

struct BulkServer {
  explicit BulkServer(rpc::ServerOptions options = {})
      : server(std::move(options)) {
    server.RegisterService(&bulk.service());
    const StatusOr<std::string> listening = server.Listen(ListenUri());
    REQUIRE(listening.ok());
    uri = *listening;
  }
  BulkService bulk;
  rpc::Server server;
  std::string uri;
};

}  // namespace rdmarpc::testing

#endif  // RDMARPC_TESTS_SUPPORT_BULK_SERVICE_H_
