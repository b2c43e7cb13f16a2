// Fuzzes the checks an RDMA receiver applies to its peer (peer_checks.h) as
// a sequence of events, the way RdmaConnection applies them: SENDs landing
// in receive buffers (frames and CREDIT/RTS/GRANT control messages, with
// credits in every prefix), WRITE WITH IMMEDIATE completions, and our own
// sends using up credits. Whatever the peer does, an accepted event keeps
// the invariants the connection relies on: credits never exceed the depth
// the peer announced, a grant never exceeds the limits or the budget, at
// most max_open_grants transfers are under way, a payload over the budget
// waits only behind transfers of this peer, a landing names the oldest open
// grant and fits it, and a GRANT answers exactly the oldest transfer we
// asked for. Standing grants: a transfer into one uses our oldest (by key)
// and fits it, a RELEASE gives back our oldest ones and no more than are
// out, and the peer's standing grants to us come in turn, a few at most,
// each no larger than a pool block. Admission: a header is asked for once,
// with no key, and a refusal ends only a transfer whose header was sent.
// Authentication: before it, a SEND is taken only as a CREDIT, handshake
// bytes within kRdmaAuthMaxBytes, or a client's VERIFIED.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "rdmarpc/tunables.h"
#include "tests/fuzz/fuzz_check.h"
#include "transport/rdma/peer_checks.h"

using namespace rdmarpc::transport;
using namespace rdmarpc::transport::rdma;

namespace {

constexpr uint64_t kMaxPayload = 1 << 20;

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), left_(size) {}
  bool empty() const { return left_ == 0; }
  template <typename T>
  T Take() {
    T value{};
    const size_t n = left_ < sizeof(T) ? left_ : sizeof(T);
    std::memcpy(&value, data_, n);
    data_ += n;
    left_ -= n;
    return value;
  }
  std::span<const std::byte> Bytes(size_t n) {
    if (n > left_) n = left_;
    auto out = std::as_bytes(std::span(data_, n));
    data_ += n;
    left_ -= n;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t left_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  // The session: the depth the peer announced, how many transfers we let it
  // have under way, our grant budget (split among our open grants), and two
  // large frames of ours waiting for their GRANTs, oldest first.
  const uint32_t depth = 4 + in.Take<uint8_t>();
  const uint32_t max_open = 1 + in.Take<uint8_t>() % 4;
  const uint64_t budget = uint64_t{in.Take<uint32_t>()};
  uint32_t credits = depth;
  std::vector<OpenGrant> open;  // Oldest first.
  uint64_t granted_bytes = 0;
  std::vector<PendingTransfer> pending;
  size_t granted = 0;  // GRANTs answer them in order.
  // Standing grants: ours, oldest first, and the peer's that we hold.
  std::vector<StandingGrant> offered;
  uint32_t next_offer = 0;
  size_t held = 0;
  uint32_t next_held = 0;
  for (int i = 0; i < 2; ++i) {
    pending.push_back(PendingTransfer{in.Take<uint32_t>(), in.Take<uint16_t>(),
                                      in.Take<uint32_t>()});
  }

  while (!in.empty()) {
    switch (in.Take<uint8_t>() % 6) {
      case 0: {  // A SEND from the peer.
        const auto message = in.Bytes(in.Take<uint8_t>());
        auto inbound = CheckInbound(message, kMaxPayload);
        if (!inbound.ok()) return 0;  // The connection closes.
        FUZZ_CHECK(message.size() == rdmarpc::tunables::kFramePrefixSize +
                                         inbound->prefix.header_size +
                                         inbound->prefix.payload_size);
        if (!CheckCreditReturn(credits, inbound->prefix.credits, depth).ok()) {
          return 0;
        }
        credits += inbound->prefix.credits;
        FUZZ_CHECK(credits <= depth);
        {
          // The same message from a peer not yet authenticated: only a
          // CREDIT, handshake bytes within the limit, or VERIFIED to a
          // client whose handshake is done.
          const auto flags = in.Take<uint8_t>();
          const bool server = flags & 1;
          const bool done = flags & 2;
          const uint64_t before = in.Take<uint16_t>();
          auto auth = CheckBeforeAuth(*inbound, server, done, before);
          if (auth.ok()) {
            FUZZ_CHECK(inbound->control.has_value());
            const ControlMessage& control = *inbound->control;
            if (*auth == AuthInbound::kCredit) {
              FUZZ_CHECK(control.kind == ControlKind::kCredit);
            } else if (*auth == AuthInbound::kVerified) {
              FUZZ_CHECK(control.kind == ControlKind::kAuth && !server &&
                         done && inbound->attached.empty());
            } else {
              FUZZ_CHECK(control.kind == ControlKind::kAuth &&
                         control.flags == 0);
              FUZZ_CHECK(!inbound->attached.empty() &&
                         inbound->attached.size() == control.length);
              FUZZ_CHECK(before + control.length <=
                         rdmarpc::tunables::kRdmaAuthMaxBytes);
            }
          }
        }
        if (!inbound->control) {
          FUZZ_CHECK(inbound->prefix.type == FrameType::kRpc);
          FUZZ_CHECK(inbound->payload_too_large ==
                     (inbound->prefix.payload_size > kMaxPayload));
          break;
        }
        const ControlMessage& control = *inbound->control;
        if (control.kind == ControlKind::kRts && control.flags != 0) {
          std::optional<StandingGrant> oldest;
          if (!offered.empty()) oldest = offered.front();
          const auto ahead = static_cast<uint32_t>(open.size());
          if (!CheckStandingRts(control, ahead, max_open, oldest).ok()) {
            return 0;
          }
          FUZZ_CHECK(control.flags == kRtsStanding && ahead < max_open);
          FUZZ_CHECK(oldest && oldest->rkey == control.rkey);
          const uint64_t total =
              uint64_t{control.header_size} + control.payload_size;
          FUZZ_CHECK(total <= oldest->length);
          FUZZ_CHECK(control.header_size <=
                     rdmarpc::tunables::kMaxCallHeaderSize);
          // Open like any grant until it lands.
          open.push_back(OpenGrant{control.transfer, total});
          granted_bytes += total;
          offered.erase(offered.begin());
        } else if (control.kind == ControlKind::kHeader) {
          // The header we asked for (admission): which, and of what size.
          const AwaitedHeader awaited{in.Take<uint32_t>(), in.Take<uint16_t>()};
          if (!CheckHeader(control, inbound->attached, awaited).ok()) return 0;
          FUZZ_CHECK(control.transfer == awaited.id);
          FUZZ_CHECK(inbound->attached.size() == awaited.header_size);
          FUZZ_CHECK(inbound->prefix.payload_size == control.length);
        } else if (control.kind == ControlKind::kRelease) {
          std::optional<StandingGrant> oldest;
          if (!offered.empty()) oldest = offered.front();
          if (!CheckRelease(control, oldest, offered.size()).ok()) return 0;
          FUZZ_CHECK(oldest && oldest->number == control.transfer);
          FUZZ_CHECK(control.length >= 1 && control.length <= offered.size());
          offered.erase(offered.begin(), offered.begin() + control.length);
        } else if (control.kind == ControlKind::kGrant &&
                   (control.flags & kGrantStanding)) {
          if (!CheckStandingGrant(control, next_held, held).ok()) return 0;
          FUZZ_CHECK(control.flags == kGrantStanding && !control.dropped);
          FUZZ_CHECK(control.transfer == next_held);
          FUZZ_CHECK(held < rdmarpc::tunables::kRdmaStandingGrants);
          FUZZ_CHECK(control.length >= 1 &&
                     control.length <=
                         rdmarpc::tunables::kRdmaGrantPoolMaxBlock);
          ++held;
          ++next_held;
        } else if (control.kind == ControlKind::kRts) {
          // Grants of headers alone are not held to the budget.
          const auto left = [&] {
            return granted_bytes < budget ? budget - granted_bytes : 0;
          };
          auto ahead = static_cast<uint32_t>(open.size());
          auto plan = PlanGrant(control, ahead, max_open, kMaxPayload, left());
          if (!plan.ok()) return 0;
          FUZZ_CHECK(ahead < max_open);
          FUZZ_CHECK(control.header_size <=
                     rdmarpc::tunables::kMaxCallHeaderSize);
          while (plan->wait) {
            // Only behind transfers of this peer, whose landings free
            // memory; the connection plans it again after each one.
            FUZZ_CHECK(ahead > 0 && plan->drop_reason == DropReason::kNone);
            FUZZ_CHECK(uint64_t{control.header_size} + control.payload_size >
                       left());
            granted_bytes -= open.front().length;
            open.erase(open.begin());
            ahead = static_cast<uint32_t>(open.size());
            plan = PlanGrant(control, ahead, max_open, kMaxPayload, left());
            FUZZ_CHECK(plan.ok());
          }
          const uint64_t total =
              uint64_t{control.header_size} + control.payload_size;
          if (plan->segment) {
            // Over the budget with none ahead: the first segment, of what
            // the budget allows, no less than the smallest.
            FUZZ_CHECK(ahead == 0 && plan->drop_reason == DropReason::kNone);
            FUZZ_CHECK(total > left());
            FUZZ_CHECK(left() >= rdmarpc::tunables::kRdmaMinSegment);
            FUZZ_CHECK(plan->length <= left() && plan->length < total);
            FUZZ_CHECK(plan->length >= rdmarpc::tunables::kRdmaMinSegment &&
                       plan->length <= rdmarpc::tunables::kRdmaSegmentSize);
          } else if (plan->drop_reason == DropReason::kNone) {
            FUZZ_CHECK(control.payload_size <= kMaxPayload);
            FUZZ_CHECK(plan->length <= left());
            FUZZ_CHECK(plan->length == total);
          } else {
            FUZZ_CHECK(plan->length == control.header_size);
            FUZZ_CHECK(plan->dropped_payload == control.payload_size);
            FUZZ_CHECK(
                plan->drop_reason == DropReason::kTooLarge ||
                (ahead == 0 && left() < rdmarpc::tunables::kRdmaMinSegment));
          }
          open.push_back(OpenGrant{control.transfer, plan->length});
          granted_bytes += plan->length;
        } else if (control.kind == ControlKind::kGiveBack) {
          // What the peer holds, as this side counts it.
          const uint32_t held = in.Take<uint8_t>();
          if (!CheckGiveBack(control.length, held).ok()) return 0;
          FUZZ_CHECK(control.length >= 1 && control.length <= held);
        } else if (control.kind == ControlKind::kGrant) {
          std::optional<PendingTransfer> oldest;
          if (granted < pending.size()) oldest = pending[granted];
          if (!CheckGrant(control, oldest).ok()) return 0;
          FUZZ_CHECK(oldest && oldest->id == control.transfer);
          PendingTransfer& transfer = pending[granted];
          const uint64_t total = transfer.header_size + transfer.payload_size;
          if (control.flags == kGrantHeaderFirst) {
            // Admission: its header asked for, once, with no key.
            FUZZ_CHECK(!transfer.header_sent && transfer.covered == 0);
            FUZZ_CHECK(control.rkey == 0 && control.addr == 0);
            FUZZ_CHECK(control.length == transfer.header_size &&
                       control.length <= kMaxHeaderFirst);
            transfer.header_sent = true;
          } else if (control.flags == kGrantRefused) {
            // Refused after its header was seen: over, nothing written.
            FUZZ_CHECK(transfer.header_sent && transfer.covered == 0);
            FUZZ_CHECK(control.rkey == 0 && control.addr == 0);
            ++granted;
          } else if (control.flags & rdmarpc::transport::rdma::kGrantSegment) {
            // The next part of the frame, after its last was written.
            FUZZ_CHECK(!transfer.writing && !control.dropped);
            FUZZ_CHECK(control.length > 0 &&
                       transfer.covered + control.length <= total);
            transfer.covered += control.length;
            transfer.writing = true;
          } else {
            FUZZ_CHECK(transfer.covered == 0);
            FUZZ_CHECK(control.length ==
                       transfer.header_size +
                           (control.dropped ? 0 : transfer.payload_size));
            transfer.covered = total;
          }
          if (transfer.covered == total) ++granted;
        }
        break;
      }
      case 1: {  // A WRITE WITH IMMEDIATE landed.
        const auto imm = in.Take<uint32_t>();
        const auto bytes = in.Take<uint32_t>();
        std::optional<OpenGrant> oldest;
        if (!open.empty()) oldest = open.front();
        if (!CheckLanding(imm, bytes, oldest).ok()) return 0;
        FUZZ_CHECK(oldest && oldest->id == imm && bytes <= oldest->length);
        granted_bytes -= open.front().length;
        open.erase(open.begin());
        break;
      }
      case 2:  // We send something: a credit is used up.
        if (credits > 1) --credits;
        break;
      case 3:  // We posted the WRITEs of the segment granted last.
        if (granted < pending.size()) pending[granted].writing = false;
        break;
      case 4:  // A frame landed: we offer a standing grant.
        if (offered.size() < rdmarpc::tunables::kRdmaStandingGrants) {
          const auto rkey = in.Take<uint32_t>();
          offered.push_back(StandingGrant{next_offer++, rkey,
                                          uint64_t{in.Take<uint16_t>()} + 1});
        }
        break;
      case 5:  // We wrote a frame into the peer's oldest standing grant.
        if (held > 0) --held;
        break;
    }
  }
  return 0;
}
