// Bulk loans against a hostile borrower with raw verbs, on a real RDMA
// device (run in the Soft-RoCE VM by tools/test; without RXE_IP or a device
// every case fails: there is no silent skip).
//
// The victim is a real rdmarpc client that lends part of its registered
// memory to a call (include/rdmarpc/bulk.h). The attacker is a raw
// librdmacm + libibverbs listener (tests/support/hostile_peer.h) that the
// client connects to as to a server: it reads the loan's descriptor from
// the call's header and posts RDMA READs and WRITEs of its own choosing
// with the loan's rkey, no rdmarpc code between it and the device. Each
// case breaks the loan in one way: out of its range, against its access,
// from another queue pair, after its call ended. Each must end in a remote
// access error for the attacker (IBV_WC_REM_ACCESS_ERR) and no change to
// the victim's memory, inside the loan or around it; the victim's call
// ends, and the client stays usable.
#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rdmarpc/bulk.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/memory.h"
#include "rpc/wire/call_header.h"
#include "rpc/wire/wire_codec.h"
#include "tests/support/hostile_peer.h"
#include "tests/support/test_support.h"
#include "transport/bulk.h"

namespace rdmarpc::hostile {
namespace {

using namespace std::chrono_literals;

constexpr size_t kPage = 4096;
constexpr std::byte kVictim{0xaa};
const std::string kRemoteAccessError = WcName(IBV_WC_REM_ACCESS_ERR);

// The victim's memory, three pages of kVictim; loans are of the middle one.
struct Victim {
  Victim() {
    const char* rxe_ip = std::getenv("RXE_IP");
    if (rxe_ip == nullptr || *rxe_ip == '\0') {
      FAIL("RXE_IP is not set: run under tools/softroce/run (tools/test does)");
    }
    const Status available = transport::rdma::CheckRdmaAvailable();
    INFO(available.ToString());
    REQUIRE(available.ok());
    listener.emplace(rxe_ip);
    auto allocated = MemoryRegistration::Allocate(3 * kPage);
    REQUIRE(allocated.ok());
    arena = *allocated;
    std::memset(arena->data(), static_cast<int>(kVictim), arena->size());
  }

  std::byte* loaned() { return arena->data() + kPage; }

  // Bytes of the arena that are no longer kVictim.
  size_t changed() const {
    size_t count = 0;
    for (size_t i = 0; i < arena->size(); ++i) {
      count += arena->data()[i] != kVictim;
    }
    return count;
  }

  std::optional<RawListener> listener;
  std::shared_ptr<MemoryRegistration> arena;
};

// A call on `channel` lending the middle page with `access`, which `peer`
// accepts (the call connects the channel to it) and reads: the loan's
// descriptor, and the call's status once it ends.
struct Borrowed {
  BulkDescriptor loan;
  std::future<Status> ended;
};

Borrowed Lend(Victim& victim, rpc::Channel& channel, HostilePeer& peer,
              BulkAccess access, CallOptions options = {}) {
  options.bulk.push_back({victim.loaned(), kPage, access});
  auto ended = std::make_shared<std::promise<Status>>();
  Borrowed borrowed;
  borrowed.ended = ended->get_future();
  channel.Call(
      "test.Bulk", "Borrow", Buffer::CopyOf("x"), options,
      [ended](const Status& status, Payload) { ended->set_value(status); });
  peer.Accept(*victim.listener);
  const Received frame = peer.WaitForFrame();
  REQUIRE(frame.prefix.type == transport::FrameType::kRpc);
  const std::optional<rpc::CallHeader> header =
      rpc::CallHeader::Decode(frame.header);
  REQUIRE(header.has_value());
  std::vector<BulkDescriptor> loans;
  std::optional<BulkDescriptor> destination;
  const Status read = rpc::ReadBulk(header->bulk(), loans, destination);
  INFO(read.ToString());
  REQUIRE(read.ok());
  REQUIRE(loans.size() == 1);
  borrowed.loan = loans[0];
  CHECK(borrowed.loan.address == reinterpret_cast<uint64_t>(victim.loaned()));
  CHECK(borrowed.loan.length == kPage);
  return borrowed;
}

// The victim's call ends (its connection failed under the attack, or its
// deadline passed), nothing of the arena changed, no loan is left (but
// `loans_left` of other calls), and the client serves a next call on a new
// connection (lending again, read by a new raw peer, which answers nothing:
// the call is cancelled).
void ExpectVictimWhole(Victim& victim, rpc::Channel& channel,
                       Borrowed& borrowed, StatusCode code,
                       uint64_t loans_left = 0) {
  REQUIRE(borrowed.ended.wait_for(kWait) == std::future_status::ready);
  const Status ended = borrowed.ended.get();
  INFO(ended.ToString());
  CHECK(ended.code() == code);
  CHECK(victim.changed() == 0);
  CHECK(testing::WaitFor(
      [&] { return transport::LiveBulkLoans() == loans_left; }));
  HostilePeer next;
  CallOptions options;
  options.cancellation = std::make_shared<rpc::CallCancellation>();
  Borrowed again = Lend(victim, channel, next, BulkAccess::kRead, options);
  // The loan it received this time can be read, whole.
  CHECK(next.Read(again.loan.address, again.loan.rkey, kPage) ==
        WcName(IBV_WC_SUCCESS));
  options.cancellation->Cancel();
}

TEST_CASE("bulk hostile: out of a loan's range, the device refuses") {
  Victim victim;
  for (const char* where : {"past its end", "before its start"}) {
    INFO(where);
    rpc::Channel channel(victim.listener->uri());
    HostilePeer peer;
    Borrowed borrowed = Lend(victim, channel, peer, BulkAccess::kReadWrite);
    const std::vector<std::byte> bytes(kPage, std::byte{0x55});
    const bool past = std::string(where) == "past its end";
    // One byte out of range, and the rest in it.
    const uint64_t address =
        past ? borrowed.loan.address + 1 : borrowed.loan.address - 1;
    CHECK(peer.Write(address, borrowed.loan.rkey, bytes) == kRemoteAccessError);
    ExpectVictimWhole(victim, channel, borrowed, StatusCode::kUnavailable);
  }
}

TEST_CASE("bulk hostile: against a loan's access, the device refuses") {
  Victim victim;
  for (const char* how : {"write a read loan", "read a write loan"}) {
    INFO(how);
    rpc::Channel channel(victim.listener->uri());
    HostilePeer peer;
    const bool write = std::string(how) == "write a read loan";
    Borrowed borrowed = Lend(victim, channel, peer,
                             write ? BulkAccess::kRead : BulkAccess::kWrite);
    const std::vector<std::byte> bytes(64, std::byte{0x55});
    CHECK((write ? peer.Write(borrowed.loan.address, borrowed.loan.rkey, bytes)
                 : peer.Read(borrowed.loan.address, borrowed.loan.rkey, 64)) ==
          kRemoteAccessError);
    ExpectVictimWhole(victim, channel, borrowed, StatusCode::kUnavailable);
  }
}

TEST_CASE("bulk hostile: from another queue pair, the device refuses") {
  Victim victim;
  // Two channels, two connections; the loan of the first is used on the
  // second's queue pair.
  rpc::Channel lender(victim.listener->uri());
  rpc::Channel other(victim.listener->uri());
  HostilePeer lender_peer, other_peer;
  Borrowed lent = Lend(victim, lender, lender_peer, BulkAccess::kReadWrite);
  Borrowed own = Lend(victim, other, other_peer, BulkAccess::kRead);
  const std::vector<std::byte> bytes(64, std::byte{0x55});
  CHECK(other_peer.Write(lent.loan.address, lent.loan.rkey, bytes) ==
        kRemoteAccessError);
  // The lender's connection is untouched: its loan still reads, on its own
  // queue pair, and its call goes on.
  CHECK(lender_peer.Read(lent.loan.address, lent.loan.rkey, 64) ==
        WcName(IBV_WC_SUCCESS));
  CHECK(lent.ended.wait_for(0s) == std::future_status::timeout);
  ExpectVictimWhole(victim, other, own, StatusCode::kUnavailable,
                    /*loans_left=*/1);
}

// The raw peer never answers: the call passes its deadline and, with no
// word that the borrower's transfers are over, ends after
// tunables::kBulkReleaseGrace, its window invalidated first.
TEST_CASE("bulk hostile: after its call ended, the device refuses") {
  Victim victim;
  rpc::Channel channel(victim.listener->uri());
  HostilePeer peer;
  Borrowed borrowed = Lend(victim, channel, peer, BulkAccess::kReadWrite,
                           CallOptions::WithTimeout(200ms));
  // Valid while the call lasts.
  CHECK(peer.Read(borrowed.loan.address, borrowed.loan.rkey, 64) ==
        WcName(IBV_WC_SUCCESS));
  const auto asked = std::chrono::steady_clock::now();
  REQUIRE(borrowed.ended.wait_for(kWait) == std::future_status::ready);
  const Status ended = borrowed.ended.get();
  INFO(ended.ToString());
  CHECK(ended.code() == StatusCode::kDeadlineExceeded);
  // It waited for the grace, the borrower having said nothing.
  CHECK(std::chrono::steady_clock::now() - asked >=
        tunables::kBulkReleaseGrace - 1s);
  CHECK(channel.stats().bulk_releases_timed_out == 1);
  CHECK(transport::LiveBulkLoans() == 0);
  const std::vector<std::byte> bytes(64, std::byte{0x55});
  CHECK(peer.Write(borrowed.loan.address, borrowed.loan.rkey, bytes) ==
        kRemoteAccessError);
  CHECK(victim.changed() == 0);
}

}  // namespace
}  // namespace rdmarpc::hostile
