#include "base/log_throttle.h"

#include <mutex>
#include <unordered_map>
#include <utility>

namespace rdmarpc {

namespace {

// Hosts and kinds remembered before the quiet ones are forgotten.
constexpr size_t kRemembered = 1024;

struct Entry {
  std::chrono::steady_clock::time_point logged;
  uint64_t held = 0;
};

std::mutex& Mutex() {
  static std::mutex mu;
  return mu;
}

// By kind and host. Guarded by Mutex().
std::unordered_map<std::string, Entry>& Entries() {
  static auto* const entries = new std::unordered_map<std::string, Entry>();
  return *entries;
}

}  // namespace

std::string PeerHost(std::string_view peer) {
  const size_t colon = peer.rfind(':');
  const size_t scheme = peer.find("://");
  if (colon == std::string_view::npos || scheme == std::string_view::npos ||
      colon < scheme + 3) {
    return std::string(peer);
  }
  return std::string(peer.substr(0, colon));
}

void ForgetThrottledLogs() {
  std::lock_guard lock(Mutex());
  Entries().clear();
}

std::optional<uint64_t> ThrottleLog(std::string_view kind,
                                    std::string_view peer) {
  const auto now = std::chrono::steady_clock::now();
  std::string key(kind);
  key += ' ';
  key += PeerHost(peer);
  std::lock_guard lock(Mutex());
  std::unordered_map<std::string, Entry>& entries = Entries();
  if (entries.size() >= kRemembered) {
    std::erase_if(entries, [&](const auto& entry) {
      return now - entry.second.logged >= kLogThrottleInterval;
    });
  }
  auto [it, fresh] = entries.try_emplace(std::move(key));
  Entry& entry = it->second;
  if (!fresh && now - entry.logged < kLogThrottleInterval) {
    ++entry.held;
    return std::nullopt;
  }
  entry.logged = now;
  return std::exchange(entry.held, 0);
}

std::string HeldBack(uint64_t held) {
  if (held == 0) return "";
  return " (" + std::to_string(held) + " more from this host held back)";
}

}  // namespace rdmarpc
