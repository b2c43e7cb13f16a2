#include "tests/support/bulk_service.h"

#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <cstring>
#include <sstream>
#include <utility>

namespace rdmarpc::testing {

uint64_t Fnv(std::span<const std::byte> bytes) {
  uint64_t hash = 14695981039346656037ull;
  for (std::byte b : bytes) {
    hash = (hash ^ std::to_integer<uint8_t>(b)) * 1099511628211ull;
  }
  return hash;
}

void Fill(std::span<std::byte> bytes, uint64_t seed) {
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = std::byte((i * 131 + seed) & 0xff);
  }
}

// How many of `memory`'s bytes are not `expected`.
size_t BytesNot(const MemoryRegistration& memory, std::byte expected) {
  size_t count = 0;
  for (size_t i = 0; i < memory.size(); ++i) {
    count += memory.data()[i] != expected;
  }
  return count;
}

std::shared_ptr<MemoryRegistration> Arena(size_t size) {
  auto arena = MemoryRegistration::Allocate(size);
  REQUIRE(arena.ok());
  return *arena;
}

CallOptions Lending(std::byte* data, size_t size, BulkAccess access) {
  CallOptions options;
  options.bulk.push_back({data, size, access});
  return options;
}

BulkService::BulkService() : service_("test.Bulk") {
  service_.AddMethod("Pull", [this](std::shared_ptr<ServerCall> call) {
    std::istringstream in(std::string(call->request().view()));
    uint64_t length = 0, offset = 0;
    in >> length >> offset;
    REQUIRE(!call->bulk().empty());
    ++pulls_started_;
    auto into = Arena(length);
    const BulkDescriptor loan = call->bulk()[0];
    call->Pull(loan, offset, {into->data(), length},
               [call, into, length](const Status& status) {
                 if (!status.ok()) return call->Finish(status);
                 call->Finish(Status(), Buffer::CopyOf(std::to_string(
                                            Fnv({into->data(), length}))));
               });
  });
  service_.AddMethod("Push", [](std::shared_ptr<ServerCall> call) {
    std::istringstream in(std::string(call->request().view()));
    uint64_t length = 0, seed = 0, offset = 0;
    in >> length >> seed >> offset;
    auto from = Arena(length);
    Fill({from->data(), length}, seed);
    const BulkDescriptor loan =
        call->bulk().empty() ? BulkDescriptor{} : call->bulk()[0];
    call->Push({from->data(), length}, loan, offset,
               [call, from](const Status& status) { call->Finish(status); });
  });
  service_.AddMethod("Keep", [this](std::shared_ptr<ServerCall> call) {
    {
      std::lock_guard lock(mu_);
      kept_ = call->bulk()[0];
    }
    call->Finish(Status());
  });
  service_.AddMethod("Late", [this](std::shared_ptr<ServerCall> call) {
    const bool push = call->request().view() == "push";
    BulkDescriptor loan;
    {
      std::lock_guard lock(mu_);
      loan = kept_;
    }
    auto local = Arena(loan.length);
    Fill({local->data(), loan.length}, 99);
    auto done = [this, call, local](const Status& status) {
      Attacked(status);
      call->Finish(status);
    };
    // On the same connection as the call that lent it.
    if (push) {
      call->Push({local->data(), loan.length}, loan, 0, std::move(done));
    } else {
      call->Pull(loan, 0, {local->data(), loan.length}, std::move(done));
    }
  });
  // A hostile handler: it forges the descriptor it was given (more
  // length, or more access) and writes `fill` bytes through it. The
  // owner (TCP) or the device (RDMA) must refuse.
  service_.AddMethod("Forge", [this](std::shared_ptr<ServerCall> call) {
    std::istringstream in(std::string(call->request().view()));
    std::string what;
    uint64_t length = 0;
    in >> what >> length;
    BulkDescriptor forged = call->bulk()[0];
    if (what == "longer") forged.length = length;
    if (what == "access") forged.access = BulkAccess::kReadWrite;
    auto from = Arena(length);
    std::memset(from->data(), 0x55, length);
    call->Push({from->data(), length}, forged, 0,
               [this, call, from](const Status& status) {
                 Attacked(status);
                 call->Finish(status);
               });
  });
  // Hold keeps its call open with its loan; Across pushes through that
  // loan from its own call, on another connection; Release finishes the
  // held call.
  service_.AddMethod("Hold", [this](std::shared_ptr<ServerCall> call) {
    std::lock_guard lock(mu_);
    held_ = call;
  });
  service_.AddMethod("Across", [this](std::shared_ptr<ServerCall> call) {
    BulkDescriptor loan;
    {
      std::lock_guard lock(mu_);
      loan = held_->bulk()[0];
    }
    auto from = Arena(loan.length);
    std::memset(from->data(), 0x55, loan.length);
    call->Push({from->data(), loan.length}, loan, 0,
               [this, call, from](const Status& status) {
                 Attacked(status);
                 call->Finish(status);
               });
  });
  service_.AddMethod("Release", [this](std::shared_ptr<ServerCall> call) {
    std::shared_ptr<ServerCall> held;
    {
      std::lock_guard lock(mu_);
      held = std::move(held_);
    }
    held->Finish(Status());
    call->Finish(Status());
  });
  service_.AddMethod("Small", [](std::shared_ptr<ServerCall> call) {
    call->Finish(Status(), Buffer::CopyOf("small"));
  });
  service_.AddMethod("Answer", [](std::shared_ptr<ServerCall> call) {
    std::istringstream in(std::string(call->request().view()));
    uint64_t length = 0, seed = 0;
    std::string from;
    in >> length >> seed >> from;
    Buffer attachment;
    if (from == "registered") {
      auto arena = Arena(length + 1);
      attachment = arena->Slice(1, length);
    } else {
      attachment = Buffer::Allocate(length);
    }
    Fill({attachment.data(), length}, seed);
    call->Finish(Status(),
                 Payload(Buffer::CopyOf("answer"), std::move(attachment)));
  });
  service_.AddMethod("PullWarm", [this](std::shared_ptr<ServerCall> call) {
    const uint64_t length = std::stoull(std::string(call->request().view()));
    call->Pull(call->bulk()[0], 0, {warm_->data(), length},
               [call](const Status& status) { call->Finish(status); });
  });
  service_.AddMethod("PushWarm", [this](std::shared_ptr<ServerCall> call) {
    const uint64_t length = std::stoull(std::string(call->request().view()));
    call->Push({warm_->data(), length}, call->bulk()[0], 0,
               [call](const Status& status) { call->Finish(status); });
  });
  service_.AddMethod("AnswerWarm", [this](std::shared_ptr<ServerCall> call) {
    const uint64_t length = std::stoull(std::string(call->request().view()));
    call->Finish(Status(), Payload(Buffer(), warm_->Slice(0, length)));
  });
  service_.AddMethod("PullFor", [this](std::shared_ptr<ServerCall> call) {
    const auto until = Clock::now() + std::chrono::milliseconds(std::stoull(
                                          std::string(call->request().view())));
    ++pulls_started_;
    PullUntil(std::move(call), until, 0);
  });
  service_.AddMethod("Loose", [](std::shared_ptr<ServerCall> call) {
    auto loose = std::make_shared<std::vector<std::byte>>(64);
    call->Pull(call->bulk()[0], 0, *loose,
               [call, loose](const Status& status) { call->Finish(status); });
  });
}

void BulkService::Attacked(const Status& status) {
  std::lock_guard lock(mu_);
  attack_ = status;
}

Status BulkService::TakeAttack() {
  std::lock_guard lock(mu_);
  return std::exchange(attack_, Status());
}

void BulkService::PullUntil(std::shared_ptr<ServerCall> call,
                            Clock::time_point until, uint64_t pulls) {
  if (Clock::now() >= until) {
    return call->Finish(Status(), Buffer::CopyOf(std::to_string(pulls)));
  }
  const BulkDescriptor loan = call->bulk()[0];
  call->Pull(loan, 0, {warm_->data(), loan.length},
             [this, call, until, pulls](const Status& status) {
               if (!status.ok()) return call->Finish(status);
               PullUntil(call, until, pulls + 1);
             });
}

}  // namespace rdmarpc::testing
