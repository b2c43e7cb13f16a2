// A tiny --flag VALUE parser for the example programs.
#ifndef RDMARPC_EXAMPLES_COMMON_FLAGS_H_
#define RDMARPC_EXAMPLES_COMMON_FLAGS_H_

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace rdmarpc::examples {

class Flags {
 public:
  // Collects "--name value" pairs; everything else is positional.
  Flags(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg.rfind("--", 0) == 0 && i + 1 < argc) {
        values_[arg.substr(2)] = argv[++i];
      } else {
        positional_.push_back(arg);
      }
    }
  }
  std::string Get(const std::string& name, const std::string& fallback) const {
    const auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second;
  }
  long long GetInt(const std::string& name, long long fallback) const {
    const auto it = values_.find(name);
    return it == values_.end() ? fallback : std::atoll(it->second.c_str());
  }
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

}  // namespace rdmarpc::examples

#endif  // RDMARPC_EXAMPLES_COMMON_FLAGS_H_
