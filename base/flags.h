// Flags: the command line of rdmarpc's programs (tools/rpc, the benchmarks,
// the fault tools, the test peers). "--name value" or "--name=value" set a
// flag; anything else is positional. Every flag takes a value.
//
//   const rdmarpc::Flags flags(argc, argv);
//   const std::string uri = flags.Get("uri", "tcp://127.0.0.1:7000");
//   const long long calls = flags.GetInt("calls", 1000);
#ifndef RDMARPC_BASE_FLAGS_H_
#define RDMARPC_BASE_FLAGS_H_

#include <map>
#include <string>
#include <vector>

namespace rdmarpc {

class Flags {
 public:
  Flags(int argc, char** argv);

  // The flag's value, or `fallback` when it was not given.
  std::string Get(const std::string& name, const std::string& fallback) const;
  // The flag's value as an integer, or `fallback` when it was not given. A
  // value that is not one ends the program with a message and status 64
  // (EX_USAGE), as a mistyped command line should.
  long long GetInt(const std::string& name, long long fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string, std::less<>> values_;
  std::vector<std::string> positional_;
};

}  // namespace rdmarpc

#endif  // RDMARPC_BASE_FLAGS_H_
