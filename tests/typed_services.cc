#include "tests/typed_services.h"

#include <chrono>
#include <thread>

#include "tests/proto/multi.rdmarpc.h"

namespace rdmarpc::testing {
namespace {

using rpc::TypedCall;
using test::Number;
using test::Pair;
using test::Pair_Note;
using test::Stamp;

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

}  // namespace

std::unique_ptr<rpc::Service> MakeCalculator() {
  return std::make_unique<CalculatorImpl>();
}
std::unique_ptr<rpc::Service> MakeClock() {
  return std::make_unique<ClockImpl>();
}

}  // namespace rdmarpc::testing
