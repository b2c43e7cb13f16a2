// Metadata: what a call carries besides its messages, as gRPC's metadata or
// HTTP's headers: a list of (key, value) pairs, in order, keys repeatable.
//
// The client sends request headers with a call (CallOptions::metadata); the
// server answers with response headers, sent with its first frame for the
// call (a unary call's RESPONSE, a stream's first message), and trailers,
// sent with the RESPONSE that ends it (ServerCall::response_headers() and
// response_trailers(); the client reads them through
// CallOptions::response_metadata or a ClientContext).
//
//   rdmarpc::CallOptions options;
//   options.metadata.Add("authorization", "Bearer 8f1e...");
//   options.metadata.Add("trace-bin", std::string("\x01\x02", 2));
//
// Keys are lowercase ASCII letters, digits and "-_.", at most 255 bytes. A
// key ending in "-bin" carries any bytes; other values are printable ASCII
// (0x20 to 0x7e). A block of metadata counts each entry as its key and value
// plus 32 bytes (HTTP/2's accounting, which gRPC's limits use too). A sender
// refuses a block above kMaxMetadataSize (include/rdmarpc/tunables.h), and a
// receiver one above its own limit (ServerOptions and ChannelOptions
// max_metadata_size, 8 KiB by default): the call, not the connection, fails
// RESOURCE_EXHAUSTED. docs/protocol.md, "Metadata", has the wire format.
#ifndef RDMARPC_METADATA_H_
#define RDMARPC_METADATA_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rdmarpc/status.h"

namespace rdmarpc {

class Metadata {
 public:
  using Entry = std::pair<std::string, std::string>;

  void Add(std::string key, std::string value) {
    entries_.emplace_back(std::move(key), std::move(value));
  }
  // The first value under `key`, if any.
  std::optional<std::string_view> Get(std::string_view key) const {
    for (const auto& [k, v] : entries_) {
      if (k == key) return v;
    }
    return std::nullopt;
  }
  // Every value under `key`, in order.
  std::vector<std::string_view> GetAll(std::string_view key) const {
    std::vector<std::string_view> values;
    for (const auto& [k, v] : entries_) {
      if (k == key) values.push_back(v);
    }
    return values;
  }
  // Removes every entry under `key`; returns how many there were.
  size_t Remove(std::string_view key) {
    return std::erase_if(
        entries_, [key](const Entry& entry) { return entry.first == key; });
  }
  void Clear() { entries_.clear(); }

  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  std::vector<Entry>::const_iterator begin() const { return entries_.begin(); }
  std::vector<Entry>::const_iterator end() const { return entries_.end(); }
  bool operator==(const Metadata&) const = default;

  // Its size as limits count it: each key and value, plus 32 per entry.
  size_t AccountedSize() const {
    size_t size = 0;
    for (const auto& [k, v] : entries_) size += k.size() + v.size() + 32;
    return size;
  }

 private:
  std::vector<Entry> entries_;
};

// What a server sent back besides its response: filled before the call's
// completion runs. `headers` arrive with the server's first frame for the
// call (for a stream, before its first message is delivered); `trailers`
// with the call's end.
struct ResponseMetadata {
  Metadata headers;
  Metadata trailers;
};

// OK, or INVALID_ARGUMENT naming the first key or value that breaks the
// rules above (`what`: "request metadata", say).
Status ValidateMetadata(const Metadata& metadata, std::string_view what);
// Whether `key` may name an entry.
bool ValidMetadataKey(std::string_view key);

// Deprecated: the name this had before it moved to rdmarpc::; it goes in
// the next release.
namespace rpc {
using rdmarpc::Metadata;
using rdmarpc::ResponseMetadata;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_METADATA_H_
