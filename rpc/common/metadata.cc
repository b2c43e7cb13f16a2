#include "rdmarpc/metadata.h"

#include "base/log.h"  // fmt, through spdlog.

namespace rdmarpc {
namespace {

bool KeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

bool Binary(std::string_view key) { return key.ends_with("-bin"); }

// Printable ASCII: what a text value may hold.
bool TextChar(char c) { return c >= 0x20 && c <= 0x7e; }

// The key or value as a message may quote it: at most 64 bytes, bytes
// outside printable ASCII escaped.
std::string Quote(std::string_view text) {
  std::string out;
  for (const char c : text.substr(0, 64)) {
    if (TextChar(c) && c != '\\') {
      out += c;
    } else {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    }
  }
  if (text.size() > 64) out += "...";
  return out;
}

}  // namespace

bool ValidMetadataKey(std::string_view key) {
  if (key.empty() || key.size() > 255) return false;
  for (const char c : key) {
    if (!KeyChar(c)) return false;
  }
  return true;
}

Status ValidateMetadata(const Metadata& metadata, std::string_view what) {
  for (const auto& [key, value] : metadata) {
    if (!ValidMetadataKey(key)) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("{}: key '{}' is not 1 to 255 lowercase "
                                "letters, digits and '-_.'",
                                what, Quote(key)));
    }
    if (Binary(key)) continue;
    for (const char c : value) {
      if (!TextChar(c)) {
        return Status(StatusCode::kInvalidArgument,
                      fmt::format("{}: the value of '{}' is not printable "
                                  "ASCII (binary values go under keys "
                                  "ending in -bin)",
                                  what, key));
      }
    }
  }
  return Status();
}

}  // namespace rdmarpc
