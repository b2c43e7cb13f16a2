#include "transport/factory/factory.h"

#include <boost/asio/post.hpp>
#include <charconv>
#include <mutex>
#include <string>

#include "base/log.h"
#include "transport/rails/rail_sessions.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/rdma/verbs.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/uri.h"

namespace rdmarpc::transport {

namespace {

Status UnknownScheme(const Uri& uri) {
  return Status(StatusCode::kInvalidArgument,
                "unsupported transport '" + uri.scheme + "' in " +
                    uri.ToString() + " (supported: tcp, tls, rdma, auto)");
}

// tls:// is TCP with TLS (TransportOptions::tls, or its defaults). With TLS
// configured, every connection uses it: TCP is encrypted, RDMA
// authenticated (transport/rdma/protocol.h), and nothing falls back to
// plaintext.
StatusOr<TransportOptions> WithTls(const Uri& uri, TransportOptions options,
                                   std::string_view asked) {
  if (uri.scheme == "tls") {
    if (!uri.params.empty()) {
      return Status(
          StatusCode::kInvalidArgument,
          "bad option in " + uri.ToString() + ": tls:// takes no options");
    }
    if (!options.tls) options.tls = TlsOptions();
    return options;
  }
  (void)asked;
  return options;
}

// auto:// becomes rdma:// when this host has a usable RDMA device, tcp://
// otherwise. An info log says which and why when the choice is new to the
// process (the first time, or when a device came or went); the same choice
// again, as every reconnect makes it, logs at debug.
Uri Resolve(Uri uri) {
  if (uri.scheme != "auto") return uri;
  const Status rdma = rdma::CheckRdmaAvailable();
  uri.scheme = rdma.ok() ? "rdma" : "tcp";
  const std::string why =
      rdma.ok() ? "an RDMA device with an active port exists" : rdma.message();
  static std::mutex mu;
  static std::string last;  // The last choice logged at info.
  const std::string choice = uri.scheme + ": " + why;
  bool is_new = false;
  {
    std::lock_guard lock(mu);
    is_new = choice != last;
    if (is_new) last = choice;
  }
  Log().log(is_new ? spdlog::level::info : spdlog::level::debug,
            "auto://{}:{}: using {}", uri.host, uri.port, choice);
  return uri;
}

Status BadOption(const Uri& uri, const std::string& why) {
  return Status(StatusCode::kInvalidArgument,
                "bad option in " + uri.ToString() + ": " + why);
}

// An option's value as an integer from `low` to `high`.
StatusOr<int> IntOption(const Uri& uri, const std::string& name,
                        const std::string& value, int low, int high) {
  int parsed = 0;
  const auto [end, ec] =
      std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (value.empty() || ec != std::errc() ||
      end != value.data() + value.size() || parsed < low || parsed > high) {
    return BadOption(uri, name + "=" + value + " is not a number from " +
                              std::to_string(low) + " to " +
                              std::to_string(high));
  }
  return parsed;
}

// The URI's options applied over `options` (see factory.h for the names).
StatusOr<TransportOptions> WithUriOptions(const Uri& uri,
                                          TransportOptions options,
                                          bool from_auto) {
  if (uri.params.empty()) return options;
  if (uri.scheme == "tcp") {
    if (from_auto) {  // rdma:// options, and this host has no RDMA.
      Log().info("{}: no RDMA here: its rdma options do not apply",
                 uri.ToString());
      return options;
    }
    return BadOption(uri, "tcp:// takes no options");
  }
  for (const auto& [name, value] : uri.params) {
    StatusOr<int> number = 0;
    if (name == "rails") {
      continue;  // RailAddresses.
    } else if (name == "device") {
      if (value.empty()) return BadOption(uri, "device= names no device");
      options.rdma_device = value;
    } else if (name == "port_num") {
      number = IntOption(uri, name, value, 1, 255);
      if (number.ok()) options.rdma_port_num = static_cast<uint8_t>(*number);
    } else if (name == "gid_index") {
      number = IntOption(uri, name, value, 0, 65535);
      if (number.ok()) options.rdma_gid_index = *number;
    } else if (name == "tos") {
      number = IntOption(uri, name, value, 0, 255);
      if (number.ok()) options.rdma_tos = *number;
    } else if (name == "timeout") {
      number = IntOption(uri, name, value, 1, 31);
      if (number.ok()) options.rdma_ack_timeout = static_cast<uint8_t>(*number);
    } else if (name == "retry_count") {
      number = IntOption(uri, name, value, 0, 7);
      if (number.ok()) options.rdma_retry_count = static_cast<uint8_t>(*number);
    } else if (name == "mtu") {
      return BadOption(
          uri,
          "mtu cannot be chosen per connection: rdma_cm sets a RoCE path's "
          "MTU from the network interface's (ip link set DEV mtu N; the "
          "active MTU shows in tools/rpc devices)");
    } else {
      return BadOption(uri, "unknown option '" + name +
                                "' (rdma:// takes device, port_num, "
                                "gid_index, tos, timeout, retry_count, "
                                "rails)");
    }
    if (!number.ok()) return number.status();
  }
  if (options.rdma_device.empty() && options.rdma_gid_index >= 0) {
    return BadOption(uri,
                     "gid_index needs device= (the GID table is a "
                     "device's)");
  }
  return options;
}

// rails=HOST:PORT[+HOST:PORT...] (rdma:// only): the rails after the
// URI's own address, which is rail 0. Empty without the option.
StatusOr<std::vector<rails::RailAddress>> RailAddresses(const Uri& uri) {
  std::vector<rails::RailAddress> out;
  for (const auto& [name, value] : uri.params) {
    if (name != "rails") continue;
    out.push_back({uri.host, uri.port});
    size_t at = 0;
    while (at <= value.size()) {
      const size_t end = std::min(value.find('+', at), value.size());
      StatusOr<Uri> rail = ParseUri("rdma://" + value.substr(at, end - at));
      if (!rail.ok() || !rail->params.empty()) {
        return BadOption(uri,
                         "rails= takes HOST:PORT addresses joined by "
                         "'+' ('" +
                             value.substr(at, end - at) + "' is not one)");
      }
      out.push_back({rail->host, rail->port});
      at = end + 1;
    }
    if (out.size() > tunables::kMaxRails) {
      return BadOption(uri, "at most " + std::to_string(tunables::kMaxRails) +
                                " rails (kMaxRails), the URI's address "
                                "included");
    }
  }
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<Listener>> Listen(
    boost::asio::io_context& accept_context, std::string_view text,
    const TransportOptions& options, ContextPicker pick,
    AcceptHandler on_accept) {
  StatusOr<Uri> parsed = ParseUri(text);
  if (!parsed.ok()) return parsed.status();
  const Uri uri = Resolve(*parsed);
  StatusOr<TransportOptions> applied =
      uri.scheme == "tls"
          ? WithTls(uri, options, text)
          : WithUriOptions(uri, options, parsed->scheme == "auto");
  if (applied.ok()) applied = WithTls(uri, *applied, text);
  if (!applied.ok()) return applied.status();
  if (uri.scheme == "tcp" || uri.scheme == "tls") {
    return tcp::Listen(accept_context, uri.host, uri.port, *applied,
                       std::move(pick), std::move(on_accept));
  }
  if (uri.scheme == "rdma") {
    if (const auto rails = RailAddresses(uri); !rails.ok() || !rails->empty()) {
      return BadOption(uri,
                       "rails= is the connecting side's: a listener "
                       "accepts rails on its address(es) as they come");
    }
    return rdma::Listen(accept_context, uri.host, uri.port, *applied,
                        std::move(pick),
                        rails::AcceptRails(std::move(on_accept)));
  }
  return UnknownScheme(uri);
}

void Connect(boost::asio::io_context& context, std::string_view text,
             const TransportOptions& options, ConnectHandler done) {
  StatusOr<Uri> parsed = ParseUri(text);
  Status error = parsed.status();
  if (parsed.ok()) {
    const Uri uri = Resolve(*parsed);
    StatusOr<TransportOptions> applied =
        uri.scheme == "tls"
            ? WithTls(uri, options, text)
            : WithUriOptions(uri, options, parsed->scheme == "auto");
    if (applied.ok()) applied = WithTls(uri, *applied, text);
    if (!applied.ok()) {
      error = applied.status();
    } else if (uri.scheme == "tcp" || uri.scheme == "tls") {
      return tcp::Connect(context, uri.host, uri.port, *applied,
                          std::move(done));
    } else if (uri.scheme == "rdma") {
      StatusOr<std::vector<rails::RailAddress>> rails = RailAddresses(uri);
      if (!rails.ok()) {
        error = rails.status();
      } else if (!rails->empty()) {
        return rails::ConnectRails(context, std::move(*rails), *applied,
                                   std::move(done));
      } else {
        return rdma::Connect(context, uri.host, uri.port, *applied,
                             std::move(done));
      }
    } else {
      error = UnknownScheme(*parsed);
    }
  }
  boost::asio::post(context, [done = std::move(done), error] { done(error); });
}

}  // namespace rdmarpc::transport
