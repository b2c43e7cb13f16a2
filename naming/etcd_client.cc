// EtcdClient (naming/etcd_client.h): one HTTP/1.1 POST per request over
// Boost.Beast, a new TCP connection each (requests are rare: a lease
// renewed every few seconds, a list on a watch's restart), failing over
// from member to member; a watch is one POST whose response never ends.
#include "naming/etcd_client.h"

#include <google/protobuf/util/json_util.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <limits>
#include <optional>

#include "transport/uri.h"

namespace rdmarpc::naming {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

std::string PrefixRangeEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // Every key.
}

namespace {

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string json;
  // Printing a message of ours cannot fail.
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

Status FromJson(std::string_view json, google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto parsed =
      google::protobuf::util::JsonStringToMessage(json, message, options);
  if (parsed.ok()) return Status();
  return Status(StatusCode::kInternal,
                "etcd sent a " + message->GetDescriptor()->name() +
                    " that does not parse: " + std::string(parsed.message()));
}

// An HTTP error's body is the gateway's {"error", "message", "code"}.
Status GatewayStatus(unsigned http_status, std::string_view body) {
  etcd::GatewayError error;
  if (FromJson(body, &error).ok() && error.code() > 0 && error.code() <= 16) {
    return Status(
        static_cast<StatusCode>(error.code()),
        "etcd: " + (error.message().empty() ? error.error() : error.message()));
  }
  return Status(StatusCode::kInternal,
                "etcd answered HTTP " + std::to_string(http_status));
}

// A watch's connection can stay silent for minutes: TCP keepalive notices
// a member that is gone without a FIN (a host that died) in seconds.
void EnableKeepalive(tcp::socket& socket) {
  boost::system::error_code ignored;
  socket.set_option(asio::socket_base::keep_alive(true), ignored);
  const int fd = socket.native_handle();
  const int idle = 5, interval = 1, count = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

}  // namespace

// One POST: to each member in turn until one answers. A streaming exchange
// (a watch) hands over each line of the body as it comes, and never ends
// by itself.
struct EtcdClient::Exchange : std::enable_shared_from_this<Exchange> {
  Exchange(asio::any_io_executor executor, const EtcdClient& client)
      : executor(executor),
        endpoints(client.endpoints_),
        options(client.options_),
        preferred(client.preferred_),
        first(preferred->load(std::memory_order_relaxed)),
        resolver(executor),
        stream(executor) {}

  void Start() {
    asio::dispatch(executor, [self = shared_from_this()] { self->TryNext(); });
  }

  void Cancel() {
    cancelled.store(true);
    asio::dispatch(executor, [self = shared_from_this()] {
      self->resolver.cancel();
      beast::error_code ignored;
      self->stream.socket().close(ignored);
    });
  }

  void TryNext() {
    if (cancelled.load()) return;
    if (attempt == endpoints.size()) {
      return Finish(Status(
          StatusCode::kUnavailable,
          "no etcd member answered " + path + ": " + last_error.message()));
    }
    index = (first + attempt++) % endpoints.size();
    const std::string& endpoint = endpoints[index];
    const auto colon = endpoint.rfind(':');
    std::string host = endpoint.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[') {
      host = host.substr(1, host.size() - 2);
    }
    beast::error_code ignored;
    stream.socket().close(ignored);
    buffer.clear();
    parser.emplace();
    parser->body_limit(std::numeric_limits<uint64_t>::max());  // Ours: below.
    body.clear();
    request = {http::verb::post, path, 11};
    request.set(http::field::host, endpoint);
    request.set(http::field::content_type, "application/json");
    request.body() = request_body;
    request.prepare_payload();
    resolver.async_resolve(
        host, endpoint.substr(colon + 1),
        [self = shared_from_this()](
            beast::error_code error,
            const tcp::resolver::results_type& results) {
          if (self->Failed(error, "resolve")) return;
          self->stream.expires_after(self->options.request_timeout);
          self->stream.async_connect(
              results, [self](beast::error_code error, const auto&) {
                if (self->Failed(error, "connect")) return;
                if (self->on_line) EnableKeepalive(self->stream.socket());
                http::async_write(self->stream, self->request,
                                  [self](beast::error_code error, size_t) {
                                    if (self->Failed(error, "send")) return;
                                    self->ReadHeader();
                                  });
              });
        });
  }

  void ReadHeader() {
    http::async_read_header(
        stream, buffer, *parser,
        [self = shared_from_this()](beast::error_code error, size_t) {
          if (self->Failed(error, "read")) return;
          self->status = self->parser->get().result_int();
          if (self->on_line && self->status == 200) {
            // A watch: answered, and now open for as long as it lasts.
            self->preferred->store(self->index, std::memory_order_relaxed);
            self->stream.expires_never();
          }
          self->ReadBody();
        });
  }

  void ReadBody() {
    if (parser->is_done()) return BodyDone();
    parser->get().body().data = chunk;
    parser->get().body().size = sizeof chunk;
    http::async_read_some(
        stream, buffer, *parser,
        [self = shared_from_this()](beast::error_code error, size_t) {
          if (self->cancelled.load()) return;
          if (error == http::error::need_buffer) error = {};
          if (error) {
            return self->Finish(Status(
                StatusCode::kUnavailable,
                "etcd " + self->endpoints[self->index] + " " + self->path +
                    ": connection lost: " + error.message()));
          }
          const size_t got =
              sizeof self->chunk - self->parser->get().body().size;
          self->body.append(self->chunk, got);
          if (self->body.size() > self->options.max_response_bytes) {
            return self->Finish(
                Status(StatusCode::kResourceExhausted,
                       "etcd's answer to " + self->path + " exceeds " +
                           std::to_string(self->options.max_response_bytes) +
                           " bytes"));
          }
          if (self->on_line && self->status == 200 && !self->DeliverLines()) {
            return;
          }
          self->ReadBody();
        });
  }

  // A streamed body: one JSON object per line. False once the receiver has
  // ended the exchange.
  bool DeliverLines() {
    size_t start = 0;
    for (size_t end; (end = body.find('\n', start)) != std::string::npos;
         start = end + 1) {
      const std::string_view line(body.data() + start, end - start);
      if (line.find_first_not_of(" \r\t") == std::string_view::npos) continue;
      if (!on_line(line)) return Stop();
      if (cancelled.load()) return false;
    }
    body.erase(0, start);
    return true;
  }

  void BodyDone() {
    if (status != 200) return Finish(GatewayStatus(status, body));
    preferred->store(index, std::memory_order_relaxed);
    if (on_line) {
      if (!DeliverLines()) return;
      if (!body.empty() && !on_line(body)) return (void)Stop();
      return Finish(
          Status(StatusCode::kUnavailable, "etcd ended the stream of " + path));
    }
    Finish(std::move(body));
  }

  // The receiver ended a stream: nothing more is delivered.
  bool Stop() {
    cancelled.store(true);
    beast::error_code ignored;
    stream.socket().close(ignored);
    return false;
  }

  // A failure before the member answered moves on to the next member.
  bool Failed(const beast::error_code& error, const char* step) {
    if (cancelled.load()) return true;
    if (!error) return false;
    last_error =
        Status(StatusCode::kUnavailable,
               endpoints[index] + ": " + step + ": " +
                   (error == beast::error::timeout ? std::string("timed out")
                                                   : error.message()));
    TryNext();
    return true;
  }

  void Finish(StatusOr<std::string> result) {
    beast::error_code ignored;
    stream.socket().close(ignored);
    if (cancelled.exchange(true)) return;
    if (done) done(std::move(result));
  }

  asio::any_io_executor executor;
  const std::vector<std::string>& endpoints;  // The client's: it outlives us.
  const EtcdOptions options;
  std::shared_ptr<std::atomic<size_t>> preferred;
  const size_t first;
  std::string path;
  std::string request_body;
  // A streaming exchange's receiver of each line; false ends the exchange.
  std::function<bool(std::string_view)> on_line;
  // The body of a 200 (a stream: why it ended), or the error.
  UniqueFunction<void(StatusOr<std::string>)> done;

  std::atomic<bool> cancelled{false};
  size_t attempt = 0;
  size_t index = 0;
  Status last_error;
  tcp::resolver resolver;
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  http::request<http::string_body> request;
  std::optional<http::response_parser<http::buffer_body>> parser;
  char chunk[8192];
  std::string body;
  unsigned status = 0;
};

namespace {

// Splits "h1:p1,http://h2:p2" into "h1:p1", "h2:p2", checking each.
StatusOr<std::vector<std::string>> ParseEndpoints(std::string_view list) {
  std::vector<std::string> out;
  while (!list.empty()) {
    const auto comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view()
                                           : list.substr(comma + 1);
    if (item.starts_with("http://")) item.remove_prefix(7);
    StatusOr<transport::Uri> uri =
        transport::ParseUri("tcp://" + std::string(item));
    if (!uri.ok() || uri->port == 0 || !uri->params.empty()) {
      return Status(
          StatusCode::kInvalidArgument,
          "etcd endpoint \"" + std::string(item) + "\" is not host:port");
    }
    out.emplace_back(item);
  }
  if (out.empty()) {
    return Status(StatusCode::kInvalidArgument, "no etcd endpoint given");
  }
  return out;
}

}  // namespace

EtcdClient::EtcdClient(asio::any_io_executor executor,
                       std::vector<std::string> endpoints, EtcdOptions options)
    : executor_(std::move(executor)),
      endpoints_(std::move(endpoints)),
      options_(options),
      preferred_(std::make_shared<std::atomic<size_t>>(0)) {}

StatusOr<std::shared_ptr<EtcdClient>> EtcdClient::Create(
    asio::any_io_executor executor, std::string_view endpoints,
    EtcdOptions options) {
  StatusOr<std::vector<std::string>> parsed = ParseEndpoints(endpoints);
  if (!parsed.ok()) return parsed.status();
  return std::make_shared<EtcdClient>(std::move(executor), std::move(*parsed),
                                      options);
}

void EtcdClient::Post(std::string path, std::string body,
                      UniqueFunction<void(StatusOr<std::string>)> done) {
  auto exchange = std::make_shared<Exchange>(executor_, *this);
  exchange->path = std::move(path);
  exchange->request_body = std::move(body);
  // The exchange holds the client: its endpoints must outlive it.
  exchange->done = [client = shared_from_this(), done = std::move(done)](
                       StatusOr<std::string> r) mutable { done(std::move(r)); };
  exchange->Start();
}

template <typename Response, typename Request>
void EtcdClient::Unary(const std::string& path, const Request& request,
                       Callback<Response> done) {
  Post(path, ToJson(request),
       [done = std::move(done)](StatusOr<std::string> body) mutable {
         if (!body.ok()) return done(body.status());
         Response response;
         if (Status parsed = FromJson(*body, &response); !parsed.ok()) {
           return done(parsed);
         }
         done(std::move(response));
       });
}

void EtcdClient::Range(std::string prefix, Callback<etcd::RangeResponse> done) {
  etcd::RangeRequest request;
  request.set_range_end(PrefixRangeEnd(prefix));
  request.set_key(std::move(prefix));
  Unary<etcd::RangeResponse>("/v3/kv/range", request, std::move(done));
}

void EtcdClient::Put(std::string key, std::string value, int64_t lease,
                     Callback<etcd::PutResponse> done) {
  etcd::PutRequest request;
  request.set_key(std::move(key));
  request.set_value(std::move(value));
  request.set_lease(lease);
  Unary<etcd::PutResponse>("/v3/kv/put", request, std::move(done));
}

void EtcdClient::Delete(std::string key,
                        Callback<etcd::DeleteRangeResponse> done) {
  etcd::DeleteRangeRequest request;
  request.set_key(std::move(key));
  Unary<etcd::DeleteRangeResponse>("/v3/kv/deleterange", request,
                                   std::move(done));
}

void EtcdClient::GrantLease(int64_t ttl_seconds,
                            Callback<etcd::LeaseGrantResponse> done) {
  etcd::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  Unary<etcd::LeaseGrantResponse>("/v3/lease/grant", request, std::move(done));
}

void EtcdClient::KeepAlive(int64_t lease,
                           Callback<etcd::LeaseKeepAliveResponse> done) {
  etcd::LeaseKeepAliveRequest request;
  request.set_id(lease);
  // A gRPC stream behind the gateway: its one answer is {"result": ...}.
  Unary<etcd::KeepAliveStreamLine>(
      "/v3/lease/keepalive", request,
      [done =
           std::move(done)](StatusOr<etcd::KeepAliveStreamLine> line) mutable {
        if (!line.ok()) return done(line.status());
        if (line->has_error()) {
          return done(GatewayStatus(200, ToJson(line->error())));
        }
        done(std::move(*line->mutable_result()));
      });
}

void EtcdClient::RevokeLease(int64_t lease,
                             Callback<etcd::LeaseRevokeResponse> done) {
  etcd::LeaseRevokeRequest request;
  request.set_id(lease);
  Unary<etcd::LeaseRevokeResponse>("/v3/kv/lease/revoke", request,
                                   std::move(done));
}

namespace {
class WatchHandle final : public EtcdClient::Watch {
 public:
  explicit WatchHandle(std::shared_ptr<EtcdClient::Exchange> exchange)
      : exchange_(std::move(exchange)) {}
  ~WatchHandle() override { Cancel(); }
  void Cancel() override;

 private:
  std::shared_ptr<EtcdClient::Exchange> exchange_;
};
void WatchHandle::Cancel() { exchange_->Cancel(); }
}  // namespace

std::unique_ptr<EtcdClient::Watch> EtcdClient::WatchPrefix(
    std::string prefix, int64_t start_revision,
    const WatchCallback& on_response) {
  etcd::WatchRequest request;
  etcd::WatchCreateRequest& create = *request.mutable_create_request();
  create.set_range_end(PrefixRangeEnd(prefix));
  create.set_key(std::move(prefix));
  create.set_start_revision(start_revision);
  auto exchange = std::make_shared<Exchange>(executor_, *this);
  exchange->path = "/v3/watch";
  exchange->request_body = ToJson(request);
  exchange->on_line = [on_response](std::string_view text) {
    etcd::WatchStreamLine line;
    Status parsed = FromJson(text, &line);
    if (parsed.ok() && line.has_error()) {
      parsed = GatewayStatus(200, ToJson(line.error()));
    }
    if (!parsed.ok()) {
      on_response(parsed);
      return false;
    }
    const bool canceled = line.result().canceled();
    on_response(std::move(*line.mutable_result()));
    return !canceled;
  };
  exchange->done = [client = shared_from_this(),
                    on_response](const StatusOr<std::string>& end) {
    on_response(end.ok() ? Status(StatusCode::kUnavailable, "watch ended")
                         : end.status());
  };
  exchange->Start();
  return std::make_unique<WatchHandle>(std::move(exchange));
}

}  // namespace rdmarpc::naming
