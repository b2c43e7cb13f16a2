// The header of every RPC frame (docs/protocol.md, "The call header"): a
// fixed block of kFixedSize little-endian bytes that every call fills (kind,
// call id, method id, timeout, status code, sizes), then, for the rare
// field, the CallHeaderExtension message of proto/wire.proto. Encoded and
// decoded by hand, without allocating: the fixed block is a few loads and
// stores; the extension is the very bytes protobuf writes and accepts
// (call_header_test checks both ways). A decoded header's strings are views
// into the frame.
#ifndef RDMARPC_RPC_WIRE_CALL_HEADER_H_
#define RDMARPC_RPC_WIRE_CALL_HEADER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "rdmarpc/metadata.h"

namespace rdmarpc::rpc {

class CallHeader {
 public:
  // Bytes of the fixed block that starts every header.
  static constexpr size_t kFixedSize = 40;

  enum Kind : int32_t {
    kUnspecified = 0,
    kRequest = 1,
    kResponse = 2,
    kCancel = 3,
    kMessage = 4,
    kHalfClose = 5,
    kWindow = 6,
    kGoAway = 7
  };
  // Which way a call streams (a REQUEST's `stream`).
  enum StreamKind : int32_t {
    kUnary = 0,
    kClientStreaming = 1,
    kServerStreaming = 2,
    kBidiStreaming = 3
  };

  Kind kind() const { return kind_; }
  uint64_t call_id() const { return call_id_; }
  std::string_view service() const { return service_; }
  std::string_view method() const { return method_; }
  // 0 when the request names its method by service and method instead.
  uint64_t method_id() const { return method_id_; }
  uint64_t timeout_us() const { return timeout_us_; }
  int32_t status_code() const { return status_code_; }
  std::string_view status_message() const { return status_message_; }
  uint64_t payload_size() const { return payload_size_; }
  // How many of the payload's bytes, at its end, are the attachment.
  uint64_t attachment_size() const { return attachment_size_; }
  // Entries of the extension's reserved out_of_band field seen when
  // decoding.
  uint32_t out_of_band_count() const { return out_of_band_count_; }
  StreamKind stream() const { return stream_; }
  uint64_t window_messages() const { return window_messages_; }
  uint64_t window_bytes() const { return window_bytes_; }
  // Serialized Metadata blocks (DecodeMetadata reads them); empty when the
  // frame carries none.
  std::string_view metadata() const { return metadata_; }
  std::string_view trailers() const { return trailers_; }
  // REQUEST: the client's bulk loans (include/rdmarpc/bulk.h), encoded
  // BulkDescriptors back to back; empty when it lent none. Not written by
  // Encode: a client appends it once it has lent on the connection
  // (EncodeBulkField, BulkLoans::LendOn).
  std::string_view bulk() const { return bulk_; }
  // RESPONSE: bytes of the attachment that the server wrote into the
  // call's destination (a bulk loan, CallOptions::ResponseInto) instead of
  // sending them; 0 for nearly all. Appended like bulk
  // (EncodePlacedSizeField).
  uint64_t placed_size() const { return placed_size_; }

  CallHeader& set_kind(Kind kind) {
    kind_ = kind;
    return *this;
  }
  CallHeader& set_call_id(uint64_t id) {
    call_id_ = id;
    return *this;
  }
  CallHeader& set_service(std::string_view s) {
    service_ = s;
    return *this;
  }
  CallHeader& set_method(std::string_view m) {
    method_ = m;
    return *this;
  }
  CallHeader& set_method_id(uint64_t id) {
    method_id_ = id;
    return *this;
  }
  CallHeader& set_timeout_us(uint64_t t) {
    timeout_us_ = t;
    return *this;
  }
  CallHeader& set_status_code(int32_t c) {
    status_code_ = c;
    return *this;
  }
  CallHeader& set_status_message(std::string_view m) {
    status_message_ = m;
    return *this;
  }
  CallHeader& set_payload_size(uint64_t n) {
    payload_size_ = n;
    return *this;
  }
  CallHeader& set_attachment_size(uint64_t n) {
    attachment_size_ = n;
    return *this;
  }
  CallHeader& set_stream(StreamKind kind) {
    stream_ = kind;
    return *this;
  }
  CallHeader& set_window(uint64_t messages, uint64_t bytes) {
    window_messages_ = messages;
    window_bytes_ = bytes;
    return *this;
  }
  CallHeader& set_metadata(std::string_view block) {
    metadata_ = block;
    return *this;
  }
  CallHeader& set_trailers(std::string_view block) {
    trailers_ = block;
    return *this;
  }

  // Bytes Encode writes.
  size_t EncodedSize() const;
  // At least EncodedSize(), and cheaper to compute: every varint counted at
  // its longest.
  size_t MaxEncodedSize() const {
    // The fixed block alone for nearly every frame. Else four one-byte tags
    // and two varints of at most 10 bytes (the window), three strings with
    // their lengths; the metadata blocks (tags of up to two bytes) only when
    // there are any, so that a header without them stays within an
    // OutgoingFrame's inline capacity.
    if (!HasExtension()) return kFixedSize;
    constexpr size_t kMaxVarint = 10;
    const size_t blocks = metadata_.size() + trailers_.size();
    return kFixedSize + 5 + 5 * kMaxVarint + service_.size() + method_.size() +
           status_message_.size() +
           (blocks == 0 ? 0 : 2 * (2 + kMaxVarint) + blocks);
  }
  // Writes EncodedSize() bytes: the fixed block, then the extension
  // (proto3: fields at their default omitted); returns the end of what it
  // wrote. `out` must have room for MaxEncodedSize() bytes: varints are
  // stored eight bytes at a time, and the bytes past the returned end are
  // scratch. The payload size is written as 32 bits: a frame carries at
  // most tunables::kMaxPayloadSizeLimit bytes, and a transport refuses to
  // send more.
  std::byte* Encode(std::byte* out) const {
    EncodeFixed(out);
    if (!HasExtension()) return out + kFixedSize;
    return EncodeExtension(out + kFixedSize);
  }
  // The fixed block of a header with these fields and no extension field
  // set: Encode's bytes for it, without building one. For the frames of
  // nearly every call.
  static void EncodeFixed(std::byte* out, Kind kind, int32_t status_code,
                          uint64_t call_id, uint64_t method_id,
                          uint64_t timeout_us, uint64_t payload_size,
                          uint64_t attachment_size, StreamKind stream = kUnary);
  // nullopt when the bytes are not a well-formed header: shorter than the
  // fixed block, reserved bytes not zero, or an extension that is not a
  // well-formed CallHeaderExtension message.
  static std::optional<CallHeader> Decode(std::span<const std::byte> bytes) {
    std::optional<CallHeader> header;
    if (!DecodeInto(bytes, header.emplace())) header.reset();
    return header;
  }
  // As Decode, into `header`, which must be default-constructed; false
  // (and `header` unspecified) for bytes that are not a header.
  static bool DecodeInto(std::span<const std::byte> bytes, CallHeader& header);

 private:
  // Whether any field of the extension is set.
  bool HasExtension() const {
    return !service_.empty() || !method_.empty() || !status_message_.empty() ||
           window_messages_ != 0 || window_bytes_ != 0 || !metadata_.empty() ||
           !trailers_.empty();
  }
  void EncodeFixed(std::byte* out) const {
    EncodeFixed(out, kind_, status_code_, call_id_, method_id_, timeout_us_,
                payload_size_, attachment_size_, stream_);
  }
  std::byte* EncodeExtension(std::byte* out) const;
  bool DecodeFixed(std::span<const std::byte> bytes);
  bool DecodeCanonical(std::span<const std::byte> extension);
  bool DecodeAny(std::span<const std::byte> extension);
  // Stores one decoded field (`value` if `varint`, else `text`). A known
  // field with another wire type is, to protobuf, an unknown field: ignored
  // like any other.
  void SetField(uint64_t field, bool varint, uint64_t value,
                std::string_view text);

  Kind kind_ = kUnspecified;
  uint64_t call_id_ = 0;
  std::string_view service_;
  std::string_view method_;
  uint64_t timeout_us_ = 0;
  int32_t status_code_ = 0;
  std::string_view status_message_;
  uint64_t payload_size_ = 0;
  uint32_t out_of_band_count_ = 0;
  uint64_t method_id_ = 0;
  uint64_t attachment_size_ = 0;
  StreamKind stream_ = kUnary;
  uint64_t window_messages_ = 0;
  uint64_t window_bytes_ = 0;
  std::string_view metadata_;
  std::string_view trailers_;
  std::string_view bulk_;
  uint64_t placed_size_ = 0;
};

// The bulk field (CallHeader::bulk) holding `descriptors`, as it goes after
// an encoded header: protobuf reads fields in any order.
std::string EncodeBulkField(std::span<const std::byte> descriptors);
// The placed_size field, likewise.
std::string EncodePlacedSizeField(uint64_t bytes);

// A Metadata message (proto/wire.proto) holding `metadata`'s entries, and
// its reverse: false, and `out` unspecified, when `block` is not a
// well-formed Metadata message. Neither checks keys or values
// (ValidateMetadata does).
std::string EncodeMetadata(const Metadata& metadata);
bool DecodeMetadata(std::string_view block, Metadata& out);

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_WIRE_CALL_HEADER_H_
