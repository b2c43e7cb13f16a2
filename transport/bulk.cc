#include "transport/bulk.h"

#include <cstring>

#include "base/little_endian.h"
#include "rdmarpc/tunables.h"

namespace rdmarpc {
namespace {

constexpr uint8_t kDescriptorFormat = 1;
constexpr uint8_t kRailedFormat = 2;     // With rail entries.
constexpr uint8_t kDestinationFlag = 1;  // Flags bit 0.

const char* AccessName(BulkAccess access) {
  switch (access) {
    case BulkAccess::kRead:
      return "reading only";
    case BulkAccess::kWrite:
      return "writing only";
    case BulkAccess::kReadWrite:
      return "reading and writing";
  }
  return "nothing";
}

}  // namespace

BulkDescriptor::Encoded BulkDescriptor::Encode() const {
  Encoded out{};
  std::byte* at = out.bytes.data();
  at[0] = std::byte{rail_count == 0 ? kDescriptorFormat : kRailedFormat};
  at[1] = std::byte{static_cast<uint8_t>(access)};
  at[2] = std::byte{response_destination ? kDestinationFlag : uint8_t{0}};
  at[3] = std::byte{rail_count};
  PutLe<uint32_t>(&at[4], rkey);
  PutLe<uint64_t>(&at[8], key);
  PutLe<uint64_t>(&at[16], address);
  PutLe<uint64_t>(&at[24], length);
  out.length = kEncodedSize;
  for (size_t i = 0; i < rail_count && i < rails.size(); ++i) {
    std::byte* entry = at + out.length;
    entry[0] = std::byte{rails[i].rail};
    PutLe<uint16_t>(&entry[2], rails[i].epoch);
    PutLe<uint32_t>(&entry[4], rails[i].rkey);
    PutLe<uint64_t>(&entry[8], rails[i].key);
    out.length += kRailEntrySize;
  }
  return out;
}

size_t BulkDescriptor::EncodedSizeAt(std::span<const std::byte> bytes) {
  if (bytes.size() < kEncodedSize) return 0;
  const auto format = std::to_integer<uint8_t>(bytes[0]);
  const auto entries = std::to_integer<uint8_t>(bytes[3]);
  if (format == kDescriptorFormat) return entries == 0 ? kEncodedSize : 0;
  if (format != kRailedFormat || entries < 1 || entries > tunables::kMaxRails) {
    return 0;
  }
  return kEncodedSize + kRailEntrySize * entries;
}

std::optional<BulkDescriptor> BulkDescriptor::Decode(
    std::span<const std::byte> bytes) {
  const size_t size = EncodedSizeAt(bytes);
  if (size == 0 || bytes.size() != size ||
      (std::to_integer<uint8_t>(bytes[2]) & ~kDestinationFlag) != 0) {
    return std::nullopt;
  }
  const auto access = std::to_integer<uint8_t>(bytes[1]);
  if (access < 1 || access > 3) return std::nullopt;
  BulkDescriptor out;
  out.access = static_cast<BulkAccess>(access);
  out.response_destination =
      (std::to_integer<uint8_t>(bytes[2]) & kDestinationFlag) != 0;
  out.rkey = GetLe<uint32_t>(&bytes[4]);
  out.key = GetLe<uint64_t>(&bytes[8]);
  out.address = GetLe<uint64_t>(&bytes[16]);
  out.length = GetLe<uint64_t>(&bytes[24]);
  if (out.length == 0 || out.length > tunables::kMaxBulkLength) {
    return std::nullopt;
  }
  out.rail_count = std::to_integer<uint8_t>(bytes[3]);
  for (size_t i = 0; i < out.rail_count; ++i) {
    const std::byte* entry = &bytes[kEncodedSize + i * kRailEntrySize];
    if (entry[1] != std::byte{0}) return std::nullopt;
    RailKey& rail = out.rails[i];
    rail.rail = std::to_integer<uint8_t>(entry[0]);
    rail.epoch = GetLe<uint16_t>(&entry[2]);
    if (rail.rail >= tunables::kMaxRails ||
        (i > 0 && rail.rail <= out.rails[i - 1].rail)) {
      return std::nullopt;
    }
    rail.rkey = GetLe<uint32_t>(&entry[4]);
    rail.key = GetLe<uint64_t>(&entry[8]);
  }
  return out;
}

namespace transport {
namespace {

std::atomic<uint64_t> live_loans{0};

}  // namespace

Status CheckBulkRange(const BulkDescriptor& loan, uint64_t offset,
                      uint64_t length, BulkAccess wanted) {
  const auto want = static_cast<uint8_t>(wanted);
  if ((static_cast<uint8_t>(loan.access) & want) != want) {
    return Status(
        StatusCode::kPermissionDenied,
        std::string("bulk loan ") + std::to_string(loan.key) + " is lent for " +
            AccessName(loan.access) + "; a " +
            (wanted == BulkAccess::kRead ? "pull" : "push") + " needs " +
            (wanted == BulkAccess::kRead ? "read" : "write") + " access");
  }
  if (offset > loan.length || length > loan.length - offset) {
    return Status(StatusCode::kOutOfRange,
                  "bulk range [" + std::to_string(offset) + ", " +
                      std::to_string(offset) + " + " + std::to_string(length) +
                      ") is outside loan " + std::to_string(loan.key) + " of " +
                      std::to_string(loan.length) + " bytes");
  }
  return Status();
}

StatusOr<std::shared_ptr<MemoryRegistration>> FindRegistered(
    std::span<const std::byte> bytes, const char* what) {
  if (bytes.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  std::string(what) + " is empty");
  }
  std::shared_ptr<MemoryRegistration> found = MemoryRegistration::Find(bytes);
  if (!found) {
    return Status(StatusCode::kInvalidArgument,
                  std::string(what) + " (" + std::to_string(bytes.size()) +
                      " bytes) is not inside one live MemoryRegistration: "
                      "bulk bytes move only from and to registered memory "
                      "(include/rdmarpc/memory.h)");
  }
  return found;
}

StatusOr<std::shared_ptr<MemoryRegistration>> CheckLoan(
    std::span<std::byte> bytes) {
  auto registration = FindRegistered(bytes, "the loan");
  if (!registration.ok()) return registration.status();
  if (bytes.size() > tunables::kMaxBulkLength) {
    return Status(StatusCode::kInvalidArgument,
                  "a loan of " + std::to_string(bytes.size()) +
                      " bytes is over kMaxBulkLength");
  }
  return registration;
}

Status CheckConnectionLoans(size_t held) {
  if (held < tunables::kMaxBulkLoansPerConnection) return Status();
  return Status(StatusCode::kResourceExhausted,
                "this connection holds " + std::to_string(held) +
                    " bulk loans already (kMaxBulkLoansPerConnection)");
}

StatusOr<std::shared_ptr<MemoryRegistration>> CheckTransfer(
    const BulkDescriptor& loan, uint64_t offset,
    std::span<const std::byte> local, BulkAccess wanted) {
  if (loan.rail_count != 0) {
    return Status(StatusCode::kInvalidArgument,
                  "bulk loan " + std::to_string(loan.key) + " was lent over " +
                      std::to_string(loan.rail_count) +
                      " rail(s), and this connection has one: it names no "
                      "key here");
  }
  Status allowed = CheckBulkRange(loan, offset, local.size(), wanted);
  if (!allowed.ok()) return allowed;
  if (local.empty()) return std::shared_ptr<MemoryRegistration>();
  return FindRegistered(local, wanted == BulkAccess::kRead
                                   ? "the pull's destination"
                                   : "the push's source");
}

uint64_t LiveBulkLoans() { return live_loans.load(std::memory_order_relaxed); }

Status TakeBulkLoan() {
  if (live_loans.fetch_add(1, std::memory_order_relaxed) <
      tunables::kMaxBulkLoans) {
    return Status();
  }
  live_loans.fetch_sub(1, std::memory_order_relaxed);
  return Status(StatusCode::kResourceExhausted,
                "the process holds " + std::to_string(tunables::kMaxBulkLoans) +
                    " bulk loans already (kMaxBulkLoans)");
}

void GiveBackBulkLoans(uint64_t n) {
  live_loans.fetch_sub(n, std::memory_order_relaxed);
}

LoanTable::~LoanTable() { Clear(); }

StatusOr<BulkDescriptor> LoanTable::Lend(std::span<std::byte> bytes,
                                         BulkAccess access) {
  auto registration = CheckLoan(bytes);
  if (!registration.ok()) return registration.status();
  std::lock_guard lock(mu_);
  if (Status room = CheckConnectionLoans(loans_.size()); !room.ok()) {
    return room;
  }
  if (Status taken = TakeBulkLoan(); !taken.ok()) return taken;
  BulkDescriptor descriptor;
  descriptor.key = next_key_++;
  descriptor.length = bytes.size();
  descriptor.access = access;
  loans_.emplace(descriptor.key,
                 Loan{std::move(*registration), bytes.data(), descriptor});
  return descriptor;
}

void LoanTable::EndLocked(std::unique_lock<std::mutex>& lock,
                          std::unordered_map<uint64_t, Loan>::iterator it) {
  const uint64_t key = it->first;
  it->second.ending = true;
  used_.wait(lock, [&] {
    const auto found = loans_.find(key);
    return found == loans_.end() || found->second.uses == 0;
  });
  // Another Revoke of the same key may have ended it meanwhile.
  if (loans_.erase(key) != 0) {
    live_loans.fetch_sub(1, std::memory_order_relaxed);
  }
}

void LoanTable::Revoke(uint64_t key) {
  std::unique_lock lock(mu_);
  const auto it = loans_.find(key);
  if (it != loans_.end()) EndLocked(lock, it);
}

void LoanTable::Clear() {
  std::unique_lock lock(mu_);
  while (!loans_.empty()) EndLocked(lock, loans_.begin());
}

size_t LoanTable::size() const {
  std::lock_guard lock(mu_);
  return loans_.size();
}

Status LoanTable::NotLent(uint64_t key) {
  return Status(StatusCode::kFailedPrecondition,
                "bulk loan " + std::to_string(key) +
                    " is not lent on this connection: its call ended (the "
                    "loan was revoked) or it was never lent");
}

}  // namespace transport
}  // namespace rdmarpc
