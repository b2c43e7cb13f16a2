#include "base/flags.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace rdmarpc {

Flags::Flags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (!arg.starts_with("--") || arg.size() == 2) {
      positional_.emplace_back(arg);
      continue;
    }
    const std::string_view body = arg.substr(2);
    if (const size_t equals = body.find('='); equals != body.npos) {
      values_[std::string(body.substr(0, equals))] = body.substr(equals + 1);
    } else if (i + 1 < argc) {
      values_[std::string(body)] = argv[++i];
    } else {
      positional_.emplace_back(arg);  // A trailing --name has no value.
    }
  }
}

std::string Flags::Get(const std::string& name,
                       const std::string& fallback) const {
  const auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

long long Flags::GetInt(const std::string& name, long long fallback) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string& text = it->second;
  long long value = 0;
  const auto [end, error] =
      std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    std::fprintf(stderr, "error: --%s wants an integer, not \"%s\"\n",
                 name.c_str(), text.c_str());
    std::exit(64);
  }
  return value;
}

}  // namespace rdmarpc
