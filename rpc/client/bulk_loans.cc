#include "rpc/client/bulk_loans.h"

#include <cstring>
#include <string>
#include <utility>

#include "rpc/wire/call_header.h"
#include "rpc/wire/wire_codec.h"
#include "transport/rdma/verbs.h"

namespace rdmarpc::rpc {

Status BulkLoans::Validate() const {
  if (regions_.size() > tunables::kMaxBulkLoansPerCall) {
    return Status(StatusCode::kResourceExhausted,
                  "a call lends at most " +
                      std::to_string(tunables::kMaxBulkLoansPerCall) +
                      " regions (kMaxBulkLoansPerCall); this one lends " +
                      std::to_string(regions_.size()));
  }
  int destinations = 0;
  for (size_t i = 0; i < regions_.size(); ++i) {
    const BulkRegion& region = regions_[i];
    const auto access = static_cast<uint8_t>(region.access);
    if (region.data == nullptr || region.size == 0 || access < 1 ||
        access > 3) {
      return Status(
          StatusCode::kInvalidArgument,
          "bulk region " + std::to_string(i) + " is empty or names no access");
    }
    if (region.response_destination &&
        (++destinations > 1 || (access & 2) == 0)) {
      return Status(StatusCode::kInvalidArgument,
                    "bulk region " + std::to_string(i) +
                        ": a call has one response destination, writable");
    }
  }
  return Status();
}

std::atomic<uint64_t> BulkLoans::copies_{0};

}  // namespace rdmarpc::rpc

namespace rdmarpc {

BulkCosts ReadBulkCosts() {
  return {rpc::BulkLoans::copies(), transport::rdma::RegistrationCalls(),
          transport::rdma::LocalOpWaits()};
}

}  // namespace rdmarpc

namespace rdmarpc::rpc {

std::span<std::byte> BulkLoans::destination() const {
  for (const BulkRegion& region : regions_) {
    if (region.response_destination) return {region.data, region.size};
  }
  return {};
}

bool BulkLoans::SetPlaced(uint64_t n) {
  if (n == 0 || n > destination().size()) return false;
  placed_ = n;
  return true;
}

Status BulkLoans::Land(Payload& response) const {
  const std::span<std::byte> to = destination();
  if (to.empty()) return Status();
  if (placed_ != 0) {
    if (!response.attachment.empty()) {
      return Status(StatusCode::kInternal,
                    "the server both wrote the response's attachment into "
                    "its destination and sent one");
    }
    response.attachment = Buffer::Borrow(to.first(placed_));
    return Status();
  }
  const size_t n = response.attachment.size();
  if (n == 0) return Status();
  if (n > to.size()) {
    return Status(StatusCode::kResourceExhausted,
                  "the response's attachment of " + std::to_string(n) +
                      " bytes does not fit its destination of " +
                      std::to_string(to.size()) + " bytes");
  }
  std::memcpy(to.data(), response.attachment.data(), n);
  copies_.fetch_add(1, std::memory_order_relaxed);
  response.attachment = Buffer::Borrow(to.first(n));
  return Status();
}

Status BulkLoans::LendOn(
    const std::shared_ptr<transport::Connection>& connection,
    transport::OutgoingFrame& frame) {
  std::lock_guard lock(mu_);
  if (ended_) {
    return Status(StatusCode::kFailedPrecondition,
                  "the call ended before its bulk regions were lent");
  }
  RevokeLocked([] {});  // Lent on an earlier connection that was lost.
  lent_on_ = connection;
  std::vector<std::byte> descriptors;
  descriptors.reserve(regions_.size() * BulkDescriptor::kEncodedSize);
  for (size_t i = 0; i < regions_.size(); ++i) {
    const BulkRegion& region = regions_[i];
    StatusOr<BulkDescriptor> lent = connection->Lend(
        std::span<std::byte>(region.data, region.size), region.access);
    if (!lent.ok()) {
      RevokeLocked([] {});
      return Status(lent.status().code(), "bulk region " + std::to_string(i) +
                                              ": " + lent.status().message());
    }
    keys_.push_back(lent->key);
    windows_ = windows_ || lent->rkey != 0;
    lent->response_destination = region.response_destination;
    const BulkDescriptor::Encoded encoded = lent->Encode();
    descriptors.insert(descriptors.end(), encoded.begin(), encoded.end());
  }
  AppendToHeader(frame, EncodeBulkField(descriptors));
  return Status();
}

namespace {

using transport::Countdown;

void RevokeAll(const std::shared_ptr<transport::Connection>& connection,
               const std::vector<uint64_t>& keys,
               UniqueFunction<void()> revoked) {
  if (!connection || keys.empty()) return revoked();
  auto countdown = std::make_shared<Countdown>(std::move(revoked));
  for (const uint64_t key : keys) {
    connection->Revoke(key, [countdown] {});
  }
}

}  // namespace

bool BulkLoans::AwaitRelease(const transport::Connection* connection) {
  std::lock_guard lock(mu_);
  if (ended_ || !windows_ || keys_.empty() || lent_on_.get() != connection) {
    return false;
  }
  awaiting_release_ = true;
  return true;
}

void BulkLoans::Released() {
  UniqueFunction<void()> revoked;
  bool waiting;
  {
    std::lock_guard lock(mu_);
    if (!awaiting_release_) return;
    awaiting_release_ = false;
    waiting = static_cast<bool>(deferred_);
    revoked = std::move(deferred_);
  }
  if (waiting) Revoke(std::move(revoked));
}

void BulkLoans::Revoke(UniqueFunction<void()> revoked) {
  std::shared_ptr<transport::Connection> connection;
  std::vector<uint64_t> keys;
  {
    std::lock_guard lock(mu_);
    ended_ = true;
    if (awaiting_release_) {  // Released() goes on.
      deferred_ = std::move(revoked);
      return;
    }
    connection = std::move(lent_on_);
    keys.swap(keys_);
  }
  // Outside the lock: `revoked` may run here, and it is the caller's.
  RevokeAll(connection, keys, std::move(revoked));
}

void BulkLoans::RevokeLocked(UniqueFunction<void()> revoked) {
  std::vector<uint64_t> keys;
  keys.swap(keys_);
  const std::shared_ptr<transport::Connection> connection =
      std::exchange(lent_on_, nullptr);
  RevokeAll(connection, keys, std::move(revoked));
}

}  // namespace rdmarpc::rpc
