#include "tests/support/typed_services.h"

#include <chrono>
#include <cstdint>
#include <span>
#include <thread>

#include "tests/proto/multi.rdmarpc.h"

namespace rdmarpc::testing {
namespace {

using rpc::TypedCall;
using test::BlobInfo;
using test::Number;
using test::Pair;
using test::Pair_Note;
using test::Stamp;

uint64_t Fnv1a(std::span<const std::byte> bytes) {
  uint64_t hash = 14695981039346656037u;
  for (const std::byte b : bytes) {
    hash = (hash ^ static_cast<uint8_t>(b)) * 1099511628211u;
  }
  return hash;
}

class CalculatorImpl : public test::Calculator::Service {
 public:
  void Add(std::shared_ptr<TypedCall<Pair, Number>> call) override {
    if (call->request().a() < 0) {
      return call->Finish(Status(StatusCode::kOutOfRange, "negative"));
    }
    call->response().set_value(call->request().a() + call->request().b());
    call->Finish();
  }
  // Finishes later, from another thread.
  void Negate(std::shared_ptr<TypedCall<Number, Number>> call) override {
    std::thread([call] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      call->response().set_value(-call->request().value());
      call->Finish();
    }).detach();
  }
};

class ClockImpl : public test::Clock::Service {
 public:
  void Echo(std::shared_ptr<TypedCall<Stamp, Stamp>> call) override {
    call->response() = call->request();
    call->response().set_label(call->request().label() + " (seen)");
    call->Finish();
  }
  void Describe(
      std::shared_ptr<TypedCall<Pair_Note, Pair_Note>> call) override {
    if (call->request().text().empty()) {
      return call->Finish(
          Status(StatusCode::kInvalidArgument, "note text is empty"));
    }
    call->response().set_text("note: " + call->request().text());
    call->Finish();
  }
};

class BlobImpl : public test::Blob::Service {
 public:
  void Bounce(std::shared_ptr<TypedCall<BlobInfo, BlobInfo>> call) override {
    const Buffer& attachment = call->request_attachment();
    BlobInfo& seen = call->response();
    seen.set_label(call->request().label());
    seen.set_attachment_size(attachment.size());
    seen.set_checksum(Fnv1a(attachment.span()));
    seen.set_contiguous(!attachment.empty() &&
                        call->server_call().request().data() +
                                call->server_call().request().size() ==
                            attachment.data());
    call->set_response_attachment(call->TakeRequestAttachment());
    if (call->request().label() == "fail") {
      return call->Finish(Status(StatusCode::kFailedPrecondition, "fail"));
    }
    call->Finish();
  }
};

}  // namespace

std::unique_ptr<rpc::Service> MakeBlob() {
  return std::make_unique<BlobImpl>();
}

std::unique_ptr<rpc::Service> MakeCalculator() {
  return std::make_unique<CalculatorImpl>();
}
std::unique_ptr<rpc::Service> MakeClock() {
  return std::make_unique<ClockImpl>();
}

}  // namespace rdmarpc::testing
