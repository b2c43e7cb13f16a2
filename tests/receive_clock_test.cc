// ReceiveClock (base/receive_clock.h): one clock read per batch taken in.
#include "base/receive_clock.h"

#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <thread>

namespace rdmarpc {
namespace {

using namespace std::chrono_literals;

// Sleeps until the steady clock has moved on.
void LetTimePass() { std::this_thread::sleep_for(1ms); }

TEST_CASE("receive clock: outside a batch, every read is the clock's") {
  const auto first = ReceiveClock::Now();
  LetTimePass();
  CHECK(ReceiveClock::Now() > first);
}

TEST_CASE("receive clock: a batch's calls share its first read") {
  const auto before = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point first;
  {
    const ReceiveClock::Batch batch;
    LetTimePass();
    first = ReceiveClock::Now();  // Read on first use, not at the start.
    CHECK(first > before);
    LetTimePass();
    CHECK(ReceiveClock::Now() == first);
    CHECK(ReceiveClock::Now() == first);
  }
  LetTimePass();
  CHECK(ReceiveClock::Now() > first);  // The batch is over.
  {
    const ReceiveClock::Batch next;  // A new batch reads the clock anew.
    CHECK(ReceiveClock::Now() > first);
  }
}

TEST_CASE("receive clock: batches nest, each with its own time") {
  const ReceiveClock::Batch outer;
  const auto outer_time = ReceiveClock::Now();
  LetTimePass();
  std::chrono::steady_clock::time_point inner_time;
  {
    const ReceiveClock::Batch inner;
    inner_time = ReceiveClock::Now();
    CHECK(inner_time > outer_time);
  }
  // Still inside the outer batch: a shared time again, read afresh.
  LetTimePass();
  const auto after = ReceiveClock::Now();
  CHECK(after > inner_time);
  CHECK(ReceiveClock::Now() == after);
}

TEST_CASE("receive clock: each thread has its own batches") {
  const ReceiveClock::Batch batch;
  const auto here = ReceiveClock::Now();
  LetTimePass();
  std::chrono::steady_clock::time_point there;
  std::thread other([&] { there = ReceiveClock::Now(); });
  other.join();
  CHECK(there > here);  // Not in a batch there: the clock's own time.
  CHECK(ReceiveClock::Now() == here);
}

}  // namespace
}  // namespace rdmarpc
