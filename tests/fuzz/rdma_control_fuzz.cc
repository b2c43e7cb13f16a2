// Fuzzes the checks an RDMA receiver applies to its peer (peer_checks.h) as
// a sequence of events, the way RdmaConnection applies them: SENDs landing
// in receive buffers (frames and CREDIT/RTS/GRANT control messages, with
// credits in every prefix), WRITE WITH IMMEDIATE completions, and our own
// sends using up credits. Whatever the peer does, an accepted event keeps
// the invariants the connection relies on: credits never exceed the depth
// the peer announced, a grant never exceeds the limits or the budget, one
// grant is open at a time, a landing names the open grant and fits it, and
// a GRANT answers exactly the transfer we asked for.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

#include "base/tunables.h"
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
  // The session: the depth the peer announced, our grant budget, and one
  // large frame of ours waiting for its GRANT.
  const uint32_t depth = 4 + in.Take<uint8_t>();
  const uint64_t budget = uint64_t{in.Take<uint32_t>()};
  uint32_t credits = depth;
  std::optional<OpenGrant> open;
  std::optional<PendingTransfer> pending = PendingTransfer{
      in.Take<uint32_t>(), false, in.Take<uint16_t>(), in.Take<uint32_t>()};

  while (!in.empty()) {
    switch (in.Take<uint8_t>() % 3) {
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
        if (!inbound->control) {
          FUZZ_CHECK(inbound->prefix.type == FrameType::kRpc);
          FUZZ_CHECK(inbound->payload_too_large ==
                     (inbound->prefix.payload_size > kMaxPayload));
          break;
        }
        const ControlMessage& control = *inbound->control;
        if (control.kind == ControlKind::kRts) {
          auto plan = PlanGrant(control, open.has_value(), kMaxPayload, budget);
          if (!plan.ok()) return 0;
          FUZZ_CHECK(!open);
          FUZZ_CHECK(control.header_size <=
                     rdmarpc::tunables::kMaxCallHeaderSize);
          if (plan->drop_reason == DropReason::kNone) {
            FUZZ_CHECK(control.payload_size <= kMaxPayload);
            FUZZ_CHECK(plan->length <= budget);
            FUZZ_CHECK(plan->length ==
                       uint64_t{control.header_size} + control.payload_size);
          } else {
            FUZZ_CHECK(plan->length == control.header_size);
            FUZZ_CHECK(plan->dropped_payload == control.payload_size);
          }
          open = OpenGrant{control.transfer, plan->length};
        } else if (control.kind == ControlKind::kGrant) {
          if (!CheckGrant(control, pending).ok()) return 0;
          FUZZ_CHECK(!pending->granted && pending->id == control.transfer);
          FUZZ_CHECK(control.length ==
                     pending->header_size +
                         (control.dropped ? 0 : pending->payload_size));
          pending->granted = true;
        }
        break;
      }
      case 1: {  // A WRITE WITH IMMEDIATE landed.
        const auto imm = in.Take<uint32_t>();
        const auto bytes = in.Take<uint32_t>();
        if (!CheckLanding(imm, bytes, open).ok()) return 0;
        FUZZ_CHECK(open && open->id == imm && bytes <= open->length);
        open.reset();
        break;
      }
      case 2:  // We send something: a credit is used up.
        if (credits > 1) --credits;
        break;
    }
  }
  return 0;
}
