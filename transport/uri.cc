#include "transport/uri.h"

#include <charconv>

namespace rdmarpc::transport {
namespace {

Status Invalid(std::string_view text, std::string_view why) {
  return Status(StatusCode::kInvalidArgument,
                "bad URI '" + std::string(text) + "': " + std::string(why) +
                    " (expected scheme://host:port[?name=value&...])");
}

}  // namespace

std::string Uri::ToString() const {
  const bool v6 = host.find(':') != std::string::npos;
  std::string text = scheme + "://" + (v6 ? "[" + host + "]" : host) + ":" +
                     std::to_string(port);
  for (size_t i = 0; i < params.size(); ++i) {
    text += (i == 0 ? "?" : "&") + params[i].first + "=" + params[i].second;
  }
  return text;
}

StatusOr<Uri> ParseUri(std::string_view text) {
  const size_t sep = text.find("://");
  if (sep == std::string_view::npos || sep == 0) {
    return Invalid(text, "no scheme");
  }
  Uri uri;
  uri.scheme = std::string(text.substr(0, sep));
  std::string_view rest = text.substr(sep + 3);
  if (const size_t question = rest.find('?');
      question != std::string_view::npos) {
    std::string_view query = rest.substr(question + 1);
    rest = rest.substr(0, question);
    while (true) {
      const size_t amp = query.find('&');
      const std::string_view item = query.substr(0, amp);
      const size_t equals = item.find('=');
      if (equals == std::string_view::npos || equals == 0) {
        return Invalid(text,
                       "option '" + std::string(item) + "' is not name=value");
      }
      std::string name(item.substr(0, equals));
      for (const auto& [seen, value] : uri.params) {
        if (seen == name) return Invalid(text, "option '" + name + "' twice");
      }
      uri.params.emplace_back(std::move(name),
                              std::string(item.substr(equals + 1)));
      if (amp == std::string_view::npos) break;
      query = query.substr(amp + 1);
    }
  }
  std::string_view port;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return Invalid(text, "unclosed '['");
    uri.host = std::string(rest.substr(1, close - 1));
    rest = rest.substr(close + 1);
    if (rest.empty() || rest.front() != ':') return Invalid(text, "no port");
    port = rest.substr(1);
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) return Invalid(text, "no port");
    uri.host = std::string(rest.substr(0, colon));
    port = rest.substr(colon + 1);
  }
  if (uri.host.empty()) return Invalid(text, "no host");
  unsigned value = 0;
  const auto [end, ec] =
      std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() ||
      value > 65535) {
    return Invalid(text, "port is not a number from 0 to 65535");
  }
  uri.port = static_cast<uint16_t>(value);
  return uri;
}

}  // namespace rdmarpc::transport
