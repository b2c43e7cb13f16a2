// rpc: a command-line client for any rdmarpc server that enables
// rdmarpc.Introspection (rpc::EnableIntrospection), in the spirit of grpc_cli.
//
//   rpc list URI                           services and their methods
//   rpc describe URI SERVICE               the service's .proto definitions
//   rpc call URI SERVICE/METHOD 'TEXT'     one call; TEXT is the request in
//                                          protobuf text format
//   rpc call URI SERVICE/METHOD ['TEXT']   a streaming method: requests are
//                                          JSON lines on stdin (a server-
//                                          streaming one's may be TEXT), and
//                                          each response message is printed
//                                          as a JSON line (protobuf's JSON
//                                          mapping, proto field names)
//   rpc stats URI                          per-method and per-connection table
//   rpc devices                            this host's RDMA devices: limits,
//                                          ports, GIDs (for ?device= and
//                                          gid choices), as ibv_devinfo -v
// Options: --timeout MS (default 30000); -H 'KEY: VALUE' (or --header),
// repeatable: a header sent with every call, e.g. -H 'authorization: Bearer
// TOKEN' for a server that checks a token.
//
// Exit status: 0 on success; a failed call exits with its status code (5 for
// NOT_FOUND, 14 for UNAVAILABLE, ...); 64 for bad usage.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <boost/asio/use_future.hpp>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/flags.h"
#include "base/log.h"
#include "proto/introspection.rdmarpc.h"
#include "rdmarpc/channel.h"
#include "transport/rdma/device_info.h"

namespace rdmarpc {
namespace {

namespace pb = google::protobuf;
using namespace std::chrono_literals;

constexpr int kUsage = 64;

int Usage() {
  std::fprintf(stderr,
               "usage: rpc list URI\n"
               "       rpc describe URI SERVICE\n"
               "       rpc call URI SERVICE/METHOD 'TEXT-FORMAT REQUEST'\n"
               "       rpc call URI SERVICE/METHOD ['TEXT'] < JSON-LINES"
               "   (streaming methods)\n"
               "       rpc stats URI\n"
               "       rpc devices\n"
               "options: --timeout MS (default 30000), -H 'KEY: VALUE' "
               "(a header on every call; repeatable),\n"
               "         --tls-ca FILE, --tls-cert FILE, --tls-key FILE, "
               "--tls-server-name NAME (tls://)\n");
  return kUsage;
}

int Fail(const Status& status) {
  std::fprintf(stderr, "rpc: %s\n", status.ToString().c_str());
  return status.ok() ? 1 : static_cast<int>(status.code());
}

class Client {
 public:
  Client(const std::string& uri, std::chrono::milliseconds timeout,
         rpc::Metadata headers, const rpc::ChannelOptions& channel_options)
      : channel_(std::make_shared<rpc::Channel>(uri, channel_options)),
        stub_(channel_),
        options_(rpc::CallOptions::WithTimeout(timeout)) {
    options_.metadata = std::move(headers);
  }

  rpc::Channel& channel() { return *channel_; }
  const rpc::CallOptions& options() const { return options_; }

  StatusOr<ListServicesResponse> List() {
    auto [status, response] =
        stub_.async_ListServices({}, options_, boost::asio::use_future).get();
    if (!status.ok()) return status;
    return response;
  }

  StatusOr<ServerMetrics> Metrics() {
    auto [status, response] =
        stub_.async_GetMetrics({}, options_, boost::asio::use_future).get();
    if (!status.ok()) return status;
    return response;
  }

  // Builds `pool_` from the server's descriptors of `service`.
  StatusOr<const pb::ServiceDescriptor*> Describe(const std::string& service) {
    GetFileDescriptorsRequest request;
    request.set_service(service);
    auto [status, response] =
        stub_
            .async_GetFileDescriptors(request, options_,
                                      boost::asio::use_future)
            .get();
    if (!status.ok()) return status;
    for (const pb::FileDescriptorProto& file : response.files().file()) {
      if (pool_.FindFileByName(file.name()) != nullptr) continue;
      if (pool_.BuildFile(file) == nullptr) {
        return Status(
            StatusCode::kInternal,
            "the server's descriptor of " + file.name() + " does not build");
      }
    }
    const pb::ServiceDescriptor* descriptor = pool_.FindServiceByName(service);
    if (descriptor == nullptr) {
      return Status(StatusCode::kInternal,
                    "the server's descriptors lack service " + service);
    }
    return descriptor;
  }

 private:
  std::shared_ptr<rpc::Channel> channel_;
  Introspection::Stub stub_;
  rpc::CallOptions options_;
  pb::DescriptorPool pool_;
};

int List(Client& client) {
  auto services = client.List();
  if (!services.ok()) return Fail(services.status());
  for (const ServiceInfo& service : services->services()) {
    std::printf("%s%s\n", service.name().c_str(),
                service.has_descriptor() ? "" : "  (no descriptor)");
    for (const std::string& method : service.methods()) {
      std::printf("  %s\n", method.c_str());
    }
  }
  return 0;
}

int Describe(Client& client, const std::string& service) {
  auto descriptor = client.Describe(service);
  if (!descriptor.ok()) return Fail(descriptor.status());
  std::printf("// %s\n%s", (*descriptor)->file()->name().c_str(),
              (*descriptor)->DebugString().c_str());
  // The request and response types, each once.
  std::set<const pb::Descriptor*> printed;
  for (int i = 0; i < (*descriptor)->method_count(); ++i) {
    const pb::MethodDescriptor* method = (*descriptor)->method(i);
    for (const pb::Descriptor* type :
         {method->input_type(), method->output_type()}) {
      if (printed.insert(type).second) {
        std::printf("\n%s", type->DebugString().c_str());
      }
    }
  }
  return 0;
}

// A message as one line of JSON (protobuf's mapping, proto field names).
std::string JsonLine(const pb::Message& message) {
  pb::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string out;
  const auto printed = pb::util::MessageToJsonString(message, &out, options);
  if (!printed.ok()) return "{}";  // Every message has a JSON form.
  return out;
}

// A streaming call: requests from stdin, one JSON object a line (a
// server-streaming call's one request may come as `text`, in text format,
// instead); each message the server streams printed as a JSON line as it
// comes, and a client-streaming call's response at the end.
int CallStream(Client& client, const std::string& service,
               const std::string& method_name,
               const pb::MethodDescriptor* method,
               pb::DynamicMessageFactory& factory, const std::string& text) {
  const bool client_sends = method->client_streaming();
  const bool server_sends = method->server_streaming();
  const rpc::StreamKind kind =
      client_sends && server_sends ? rpc::StreamKind::kBidiStreaming
      : client_sends               ? rpc::StreamKind::kClientStreaming
                                   : rpc::StreamKind::kServerStreaming;
  const pb::Message* input = factory.GetPrototype(method->input_type());
  const pb::Message* output = factory.GetPrototype(method->output_type());
  int line_number = 0;
  // The next request from stdin; nullopt at its end.
  const auto next_request =
      [&]() -> std::optional<StatusOr<std::unique_ptr<pb::Message>>> {
    std::string line;
    while (std::getline(std::cin, line)) {
      ++line_number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      std::unique_ptr<pb::Message> request(input->New());
      const auto parsed = pb::util::JsonStringToMessage(line, request.get());
      if (!parsed.ok()) {
        return StatusOr<std::unique_ptr<pb::Message>>(
            Status(StatusCode::kInvalidArgument,
                   "stdin line " + std::to_string(line_number) +
                       " is not a JSON " + method->input_type()->full_name() +
                       ": " + std::string(parsed.message())));
      }
      return StatusOr<std::unique_ptr<pb::Message>>(std::move(request));
    }
    return std::nullopt;
  };

  rpc::Payload first;
  if (!client_sends) {
    std::unique_ptr<pb::Message> request(input->New());
    if (!text.empty()) {
      if (!pb::TextFormat::ParseFromString(text, request.get())) {
        return Fail(Status(StatusCode::kInvalidArgument,
                           "request is not a text-format " +
                               method->input_type()->full_name()));
      }
    } else {
      auto read = next_request();
      if (!read) {
        return Fail(Status(StatusCode::kInvalidArgument,
                           "no request: give TEXT or a JSON line on stdin"));
      }
      if (!read->ok()) return Fail(read->status());
      request = std::move(**read);
    }
    first = rpc::Payload(Buffer::CopyOf(request->SerializeAsString()));
  }
  const rpc::MethodRef ref(service, method_name);
  std::unique_ptr<rpc::ClientStream> stream = client.channel().OpenStream(
      ref, kind, client.options(), std::move(first));

  // The server's messages, printed as they come (beside our writes: a bidi
  // server may wait for us to read before it reads more).
  std::promise<Status> read_all;
  std::function<void()> read_next = [&] {
    stream->Read(
        [&](const Status& status, std::optional<rpc::Payload> message) {
          if (!message) return read_all.set_value(status);
          std::unique_ptr<pb::Message> response(output->New());
          if (!response->ParseFromArray(
                  message->message.data(),
                  static_cast<int>(message->message.size()))) {
            stream->Cancel();
            return read_all.set_value(Status(
                StatusCode::kInternal, "a streamed message is not a " +
                                           method->output_type()->full_name()));
          }
          std::printf("%s\n", JsonLine(*response).c_str());
          std::fflush(stdout);
          read_next();
        });
  };
  if (server_sends) read_next();

  Status failure;
  if (client_sends) {
    while (auto read = next_request()) {
      if (!read->ok()) {
        failure = read->status();
        stream->Cancel();
        break;
      }
      std::promise<Status> written;
      stream->Write(rpc::Payload(Buffer::CopyOf((**read)->SerializeAsString())),
                    [&](const Status& status) { written.set_value(status); });
      // Not written: the call has ended; Finish says how.
      if (!written.get_future().get().ok()) break;
    }
    stream->WritesDone();
  }
  Status read_status;
  if (server_sends) read_status = read_all.get_future().get();
  std::promise<std::pair<Status, Buffer>> finished;
  stream->Finish([&](const Status& status, rpc::Payload response) {
    finished.set_value({status, std::move(response.message)});
  });
  auto [status, bytes] = finished.get_future().get();
  if (!failure.ok()) return Fail(failure);
  if (!status.ok()) return Fail(status);
  if (!read_status.ok()) return Fail(read_status);
  if (!server_sends) {
    std::unique_ptr<pb::Message> response(output->New());
    if (!response->ParseFromArray(bytes.data(),
                                  static_cast<int>(bytes.size()))) {
      return Fail(
          Status(StatusCode::kInternal,
                 "response is not a " + method->output_type()->full_name()));
    }
    std::printf("%s\n", JsonLine(*response).c_str());
  }
  return 0;
}

int Call(Client& client, const std::string& target, const std::string& text) {
  const size_t slash = target.rfind('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == target.size()) {
    std::fprintf(stderr, "rpc: expected SERVICE/METHOD, got '%s'\n",
                 target.c_str());
    return kUsage;
  }
  const std::string service = target.substr(0, slash);
  const std::string method_name = target.substr(slash + 1);
  auto descriptor = client.Describe(service);
  if (!descriptor.ok()) return Fail(descriptor.status());
  const pb::MethodDescriptor* method =
      (*descriptor)->FindMethodByName(method_name);
  if (method == nullptr) {
    return Fail(Status(StatusCode::kUnimplemented,
                       "service " + service + " has no method " + method_name));
  }
  pb::DynamicMessageFactory factory;
  if (method->client_streaming() || method->server_streaming()) {
    return CallStream(client, service, method_name, method, factory, text);
  }
  std::unique_ptr<pb::Message> request(
      factory.GetPrototype(method->input_type())->New());
  struct Collector : pb::io::ErrorCollector {
    void AddError(int line, int column, const std::string& message) override {
      errors += std::to_string(line + 1) + ":" + std::to_string(column + 1) +
                ": " + message + "\n";
    }
    std::string errors;
  } collector;
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&collector);
  if (!parser.ParseFromString(text, request.get())) {
    return Fail(Status(StatusCode::kInvalidArgument,
                       "request is not a text-format " +
                           method->input_type()->full_name() + ":\n" +
                           collector.errors));
  }
  std::promise<std::pair<Status, Buffer>> done;
  client.channel().Call(
      service, method_name, Buffer::CopyOf(request->SerializeAsString()),
      client.options(), [&](const Status& status, Buffer response) {
        done.set_value({status, std::move(response)});
      });
  auto [status, bytes] = done.get_future().get();
  if (!status.ok()) return Fail(status);
  std::unique_ptr<pb::Message> response(
      factory.GetPrototype(method->output_type())->New());
  if (!response->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Fail(
        Status(StatusCode::kInternal,
               "response is not a " + method->output_type()->full_name()));
  }
  std::string printed;
  pb::TextFormat::Printer printer;
  printer.SetUseUtf8StringEscaping(true);
  printer.PrintToString(*response, &printed);
  std::fputs(printed.c_str(), stdout);
  return 0;
}

std::string Bytes(uint64_t n) {
  char out[32];
  if (n >= (1ull << 30)) {
    std::snprintf(out, sizeof(out), "%.1fG", n / double(1ull << 30));
  } else if (n >= (1ull << 20)) {
    std::snprintf(out, sizeof(out), "%.1fM", n / double(1ull << 20));
  } else if (n >= (1ull << 10)) {
    std::snprintf(out, sizeof(out), "%.1fK", n / double(1ull << 10));
  } else {
    std::snprintf(out, sizeof(out), "%llu", static_cast<unsigned long long>(n));
  }
  return out;
}

int Stats(Client& client) {
  auto metrics = client.Metrics();
  if (!metrics.ok()) return Fail(metrics.status());
  std::printf(
      "calls started %llu, live %lld, unknown method %llu, "
      "protocol errors %llu, responses dropped %llu\n\n",
      static_cast<unsigned long long>(metrics->calls_started()),
      static_cast<long long>(metrics->live_calls()),
      static_cast<unsigned long long>(metrics->unknown_method_calls()),
      static_cast<unsigned long long>(metrics->protocol_errors()),
      static_cast<unsigned long long>(metrics->responses_dropped()));
  if (metrics->has_rdma() && metrics->rdma().queue_pairs() > 0) {
    const RdmaResources& rdma = metrics->rdma();
    std::printf(
        "rdma: %llu queue pairs, %s registered (%s in pools, %s in grants)%s, "
        "%llu ibv_reg_mr calls, %llu completion wake-ups\n\n",
        static_cast<unsigned long long>(rdma.queue_pairs()),
        Bytes(rdma.registered_bytes()).c_str(),
        Bytes(rdma.pooled_bytes()).c_str(), Bytes(rdma.granted_bytes()).c_str(),
        rdma.locked_memory_limit() > 0
            ? (" of " + Bytes(rdma.locked_memory_limit()) + " lockable").c_str()
            : "",
        static_cast<unsigned long long>(rdma.registrations()),
        static_cast<unsigned long long>(rdma.completion_wakeups()));
  }
  std::printf("%-40s %8s %8s %8s %9s %9s %9s %9s  %s\n", "METHOD", "CALLS",
              "OK", "ERRORS", "P50_US", "P99_US", "P999_US", "MAX_US",
              "ERRORS BY STATUS");
  for (const MethodMetrics& m : metrics->methods()) {
    uint64_t ok = 0, errors = 0;
    std::string by_status;
    for (const StatusCount& count : m.finished()) {
      if (count.code() == 0) {
        ok = count.count();
        continue;
      }
      errors += count.count();
      by_status += count.name() + "=" + std::to_string(count.count()) + " ";
    }
    const std::string name = m.service() + "/" + m.method();
    std::printf("%-40s %8llu %8llu %8llu %9.1f %9.1f %9.1f %9.1f  %s\n",
                name.c_str(), static_cast<unsigned long long>(m.started()),
                static_cast<unsigned long long>(ok),
                static_cast<unsigned long long>(errors), m.p50_us(), m.p99_us(),
                m.p999_us(), m.max_us(), by_status.c_str());
  }
  bool streams = false;
  for (const MethodMetrics& m : metrics->methods()) {
    if (m.messages_received() + m.messages_sent() == 0 &&
        m.streams_open() == 0) {
      continue;
    }
    if (!std::exchange(streams, true)) {
      std::printf("\n%-40s %8s %12s %12s\n", "STREAMING METHOD", "OPEN",
                  "MESSAGES_IN", "MESSAGES_OUT");
    }
    const std::string name = m.service() + "/" + m.method();
    std::printf("%-40s %8lld %12llu %12llu\n", name.c_str(),
                static_cast<long long>(m.streams_open()),
                static_cast<unsigned long long>(m.messages_received()),
                static_cast<unsigned long long>(m.messages_sent()));
  }
  std::printf("\n%-28s %9s %9s %8s %8s %7s %7s %8s %8s %7s %4s %9s %9s\n",
              "CONNECTION", "FRAMES_IN", "FRAMES_OUT", "BYTES_IN", "BYTES_OUT",
              "INLINE", "WR_IMM", "ZCOPY", "STAGED", "STALLS", "RNR",
              "CQ_EVENTS", "CQ_POLLS");
  for (const ConnectionMetrics& c : metrics->connections()) {
    std::printf(
        "%-28s %9llu %9llu %8s %8s %7llu %7llu %8s %8s %7llu %4llu %9llu "
        "%9llu\n",
        c.peer().c_str(), static_cast<unsigned long long>(c.frames_received()),
        static_cast<unsigned long long>(c.frames_sent()),
        Bytes(c.bytes_received()).c_str(), Bytes(c.bytes_sent()).c_str(),
        static_cast<unsigned long long>(c.inline_sends()),
        static_cast<unsigned long long>(c.rdma_writes()),
        Bytes(c.zero_copy_bytes()).c_str(), Bytes(c.staged_bytes()).c_str(),
        static_cast<unsigned long long>(c.credit_stalls()),
        static_cast<unsigned long long>(c.rnr_errors()),
        static_cast<unsigned long long>(c.cq_events()),
        static_cast<unsigned long long>(c.cq_polls()));
  }
  return 0;
}

int Devices() {
  const auto devices = transport::rdma::ListDevices();
  if (!devices.ok()) return Fail(devices.status());
  std::fputs(transport::rdma::FormatDevices(*devices).c_str(), stdout);
  return 0;
}

// Takes each -H/--header KEY:VALUE out of argv into `headers` (the key
// lowercased, spaces around the value trimmed, as curl and grpcurl take
// them); false on one without a key or a colon.
bool TakeHeaders(std::vector<char*>& argv, rpc::Metadata& headers) {
  std::vector<char*> rest;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string_view arg = argv[i];
    if (arg != "-H" && arg != "--header") {
      rest.push_back(argv[i]);
      continue;
    }
    if (i + 1 == argv.size()) return false;
    const std::string_view header = argv[++i];
    const size_t colon = header.find(':');
    if (colon == 0 || colon == std::string_view::npos) return false;
    std::string key(header.substr(0, colon));
    for (char& c : key) c = static_cast<char>(std::tolower(c));
    std::string_view value = header.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
    headers.Add(std::move(key), std::string(value));
  }
  argv = std::move(rest);
  return true;
}

int Main(int argc, char** argv) {
  // Connection chatter would mix with the output: warnings only, unless
  // RDMARPC_LOG asks for more.
  if (std::getenv("RDMARPC_LOG") == nullptr) {
    Log().set_level(spdlog::level::warn);
  }
  std::vector<char*> arguments(argv, argv + argc);
  rpc::Metadata headers;
  if (!TakeHeaders(arguments, headers)) return Usage();
  const rdmarpc::Flags flags(static_cast<int>(arguments.size()),
                             arguments.data());
  const auto& args = flags.positional();
  if (args.size() == 1 && args[0] == "devices") return Devices();
  if (args.size() < 2) return Usage();
  const std::string& command = args[0];
  rpc::ChannelOptions channel_options;
  const std::string tls_cert = flags.Get("tls-cert", "");
  const std::string tls_key = flags.Get("tls-key", "");
  const std::string tls_ca = flags.Get("tls-ca", "");
  const std::string tls_name = flags.Get("tls-server-name", "");
  if (!tls_cert.empty() || !tls_key.empty() || !tls_ca.empty() ||
      !tls_name.empty()) {
    TlsOptions& tls = channel_options.transport.tls.emplace();
    tls.cert_file = tls_cert;
    tls.key_file = tls_key;
    tls.ca_file = tls_ca;
    tls.server_name = tls_name;
  }
  Client client(args[1],
                std::chrono::milliseconds(flags.GetInt("timeout", 30000)),
                std::move(headers), channel_options);
  if (command == "list" && args.size() == 2) return List(client);
  if (command == "describe" && args.size() == 3) {
    return Describe(client, args[2]);
  }
  if (command == "call" && (args.size() == 3 || args.size() == 4)) {
    return Call(client, args[2], args.size() == 4 ? args[3] : "");
  }
  if (command == "stats" && args.size() == 2) return Stats(client);
  return Usage();
}

}  // namespace
}  // namespace rdmarpc

int main(int argc, char** argv) { return rdmarpc::Main(argc, argv); }
