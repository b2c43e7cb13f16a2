#include "rpc/client/call_table.h"

#include <catch2/catch_test_macros.hpp>
#include <set>

namespace rdmarpc::rpc {
namespace {

using namespace std::chrono_literals;

ResponseCallback Noop() {
  return [](const Status&, Buffer) {};
}

TEST_CASE("CallTable: ids are unique, never 0, and not reused for a slot") {
  CallTable table;
  const uint64_t a = table.Add(Noop(), std::nullopt);
  CHECK(a != 0);
  REQUIRE(table.Take(a).has_value());
  const uint64_t b = table.Add(Noop(), std::nullopt);
  // Same slot, new generation: a late reply to `a` does not match `b`.
  CHECK(static_cast<uint32_t>(a) == static_cast<uint32_t>(b));
  CHECK(a != b);
  CHECK_FALSE(table.Take(a).has_value());
  CHECK(table.Contains(b));
}

TEST_CASE("CallTable: Take completes a call once") {
  CallTable table;
  const uint64_t id = table.Add(Noop(), std::nullopt);
  CHECK(table.size() == 1);
  CHECK(table.Take(id).has_value());
  CHECK_FALSE(table.Take(id).has_value());
  CHECK(table.size() == 0);
}

TEST_CASE("CallTable: deadlines expire in order; completed calls leave") {
  CallTable table;
  const auto t0 = Clock::now();
  const uint64_t late = table.Add(Noop(), t0 + 30ms);
  const uint64_t early = table.Add(Noop(), t0 + 10ms);
  const uint64_t middle = table.Add(Noop(), t0 + 20ms);
  table.Add(Noop(), std::nullopt);
  CHECK(table.NextDeadline() == t0 + 10ms);
  REQUIRE(table.Take(early).has_value());
  CHECK(table.NextDeadline() == t0 + 20ms);

  std::vector<CallTable::Entry> expired;
  table.TakeExpired(t0 + 25ms, &expired);
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].first == middle);
  expired.clear();
  table.TakeExpired(t0 + 1h, &expired);
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].first == late);
  CHECK_FALSE(table.NextDeadline().has_value());
  CHECK(table.size() == 1);  // The call without a deadline remains.
}

TEST_CASE("CallTable: heap stays ordered under random removals") {
  CallTable table;
  const auto t0 = Clock::now();
  std::vector<uint64_t> ids;
  for (int i = 0; i < 1000; ++i) {
    ids.push_back(
        table.Add(Noop(), t0 + std::chrono::milliseconds((i * 7919) % 1000)));
  }
  for (size_t i = 0; i < ids.size(); i += 3) REQUIRE(table.Take(ids[i]));
  std::vector<CallTable::Entry> expired;
  table.TakeExpired(t0 + 1h, &expired);
  CHECK(expired.size() == 1000 - 334);
  std::set<uint64_t> seen;
  for (auto& [id, done] : expired) CHECK(seen.insert(id).second);
  CHECK(table.size() == 0);
}

}  // namespace
}  // namespace rdmarpc::rpc
