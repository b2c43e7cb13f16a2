#include "base/flags.h"

#include <catch2/catch_test_macros.hpp>
#include <string>
#include <vector>

namespace rdmarpc {
namespace {

// Runs Flags on `args` (argv[0] added).
Flags Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "program");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  return Flags(static_cast<int>(argv.size()), argv.data());
}

TEST_CASE("Flags: --name value and --name=value, the rest positional") {
  const Flags flags = Parse({"call", "--uri", "tcp://h:1", "--calls=25",
                             "Echo/Say", "--size=", "--"});
  CHECK(flags.Get("uri", "") == "tcp://h:1");
  CHECK(flags.GetInt("calls", 0) == 25);
  CHECK(flags.Get("size", "unset").empty());  // Given, empty.
  CHECK(flags.Get("missing", "fallback") == "fallback");
  CHECK(flags.GetInt("missing", -7) == -7);
  CHECK(flags.positional() ==
        std::vector<std::string>{"call", "Echo/Say", "--"});
}

TEST_CASE("Flags: a trailing --name without a value is positional") {
  const Flags flags = Parse({"--outstanding", "-3", "--verbose"});
  CHECK(flags.GetInt("outstanding", 0) == -3);
  CHECK(flags.positional() == std::vector<std::string>{"--verbose"});
}

}  // namespace
}  // namespace rdmarpc
