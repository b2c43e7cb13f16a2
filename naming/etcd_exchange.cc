// EtcdExchange (naming/etcd_exchange.h): one POST to etcd's
// gateway over Boost.Beast, plain or TLS, failing over member to member.
#include "naming/etcd_exchange.h"

#include <google/protobuf/util/json_util.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>
#include <boost/asio/dispatch.hpp>
#include <limits>

#include "naming/etcd.pb.h"
#include "transport/tls/tls.h"

namespace rdmarpc::naming {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

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
  // Not the gateway's JSON: etcd's own text (a refused client certificate,
  // say), its first line, shortened.
  std::string text(body.substr(0, std::min(body.find('\n'), size_t{200})));
  return Status(StatusCode::kInternal, "etcd answered HTTP " +
                                           std::to_string(http_status) +
                                           (text.empty() ? "" : ": " + text));
}

namespace {

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

EtcdExchange::EtcdExchange(
    asio::any_io_executor executor, const std::vector<std::string>& endpoints,
    const EtcdOptions& options, std::shared_ptr<std::atomic<size_t>> preferred,
    std::shared_ptr<transport::tls::TlsContext> credentials)
    : executor(executor),
      endpoints(endpoints),
      options(options),
      preferred(std::move(preferred)),
      first(this->preferred->load(std::memory_order_relaxed)),
      credentials(std::move(credentials)),
      resolver(executor),
      plain(executor) {}

template <typename F>
void EtcdExchange::OnStream(F&& f) {
  if (tls) {
    f(*tls);
  } else {
    f(plain);
  }
}

void EtcdExchange::CloseSocket() {
  beast::error_code ignored;
  tcp().socket().close(ignored);
}

void EtcdExchange::Start() {
  asio::dispatch(executor, [self = shared_from_this()] { self->TryNext(); });
}

void EtcdExchange::Cancel() {
  cancelled.store(true);
  asio::dispatch(executor, [self = shared_from_this()] {
    self->resolver.cancel();
    self->CloseSocket();
  });
}

// Ends the exchange with `status` before it started (a token refused).
void EtcdExchange::Fail(Status status) {
  asio::dispatch(executor,
                 [self = shared_from_this(), status = std::move(status)] {
                   self->Finish(status);
                 });
}

void EtcdExchange::TryNext() {
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
  CloseSocket();
  if (credentials != nullptr) {
    tls.reset();  // Before the context it was made with.
    ssl_context.emplace(credentials->NativeContext().release());
    tls.emplace(executor, *ssl_context);
    if (Status named = credentials->NameServer(tls->native_handle(), host);
        !named.ok()) {
      return Finish(named);
    }
  }
  buffer.clear();
  parser.emplace();
  status = 0;
  parser->body_limit(std::numeric_limits<uint64_t>::max());  // Ours: below.
  body.clear();
  request = {http::verb::post, path, 11};
  request.set(http::field::host, endpoint);
  request.set(http::field::content_type, "application/json");
  if (!token.empty()) request.set(http::field::authorization, token);
  request.body() = request_body;
  request.prepare_payload();
  resolver.async_resolve(
      host, endpoint.substr(colon + 1),
      [self = shared_from_this()](beast::error_code error,
                                  const tcp::resolver::results_type& results) {
        if (self->Failed(error, "resolve")) return;
        self->tcp().expires_after(self->options.request_timeout);
        self->tcp().async_connect(results, [self](beast::error_code error,
                                                  const auto&) {
          if (self->Failed(error, "connect")) return;
          if (self->on_line) EnableKeepalive(self->tcp().socket());
          if (!self->tls) return self->Send();
          self->tls->async_handshake(
              asio::ssl::stream_base::client, [self](beast::error_code error) {
                if (error && !self->cancelled.load()) {
                  // Name the certificate fault, not just "verify
                  // failed".
                  const long verify =  // NOLINT(runtime/int)
                      SSL_get_verify_result(self->tls->native_handle());
                  if (verify != X509_V_OK) {
                    return self->FailedBecause(
                        std::string("TLS handshake: the member's "
                                    "certificate is refused: ") +
                        X509_verify_cert_error_string(verify));
                  }
                }
                if (self->Failed(error, "TLS handshake")) return;
                self->Send();
              });
        });
      });
}

void EtcdExchange::Send() {
  OnStream([this](auto& stream) {
    http::async_write(
        stream, request,
        [self = shared_from_this()](beast::error_code error, size_t) {
          if (self->Failed(error, "send")) return;
          self->ReadHeader();
        });
  });
}

void EtcdExchange::ReadHeader() {
  OnStream([this](auto& stream) {
    http::async_read_header(
        stream, buffer, *parser,
        [self = shared_from_this()](beast::error_code error, size_t) {
          // An etcd with TLS closes a plaintext request unanswered.
          if (self->Failed(error,
                           !self->tls && error == http::error::end_of_stream
                               ? "read (does the member want TLS? "
                                 "EtcdOptions::tls)"
                               : "read")) {
            return;
          }
          self->status = self->parser->get().result_int();
          if (self->on_line && self->status == 200) {
            // A watch: answered, and now open for as long as it lasts.
            self->preferred->store(self->index, std::memory_order_relaxed);
            self->tcp().expires_never();
          }
          self->ReadBody();
        });
  });
}

void EtcdExchange::ReadBody() {
  if (parser->is_done()) return BodyDone();
  parser->get().body().data = chunk;
  parser->get().body().size = sizeof chunk;
  OnStream([this](auto& stream) { ReadSome(stream); });
}

template <typename Stream>
void EtcdExchange::ReadSome(Stream& stream) {
  http::async_read_some(
      stream, buffer, *parser,
      [self = shared_from_this()](beast::error_code error, size_t) {
        if (self->cancelled.load()) return;
        if (error == http::error::need_buffer) error = {};
        if (error) {
          return self->Finish(
              Status(StatusCode::kUnavailable,
                     "etcd " + self->endpoints[self->index] + " " + self->path +
                         ": connection lost: " + error.message()));
        }
        const size_t got = sizeof self->chunk - self->parser->get().body().size;
        self->body.append(self->chunk, got);
        if (self->body.size() > self->options.max_response_bytes) {
          return self->Finish(Status(
              StatusCode::kResourceExhausted,
              "etcd's answer to " + self->path + " exceeds " +
                  std::to_string(self->options.max_response_bytes) + " bytes"));
        }
        if (self->on_line && self->status == 200 && !self->DeliverLines()) {
          return;
        }
        self->ReadBody();
      });
}

// A streamed body: one JSON object per line. False once the receiver has
// ended the exchange.
bool EtcdExchange::DeliverLines() {
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

void EtcdExchange::BodyDone() {
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
bool EtcdExchange::Stop() {
  cancelled.store(true);
  CloseSocket();
  return false;
}

// A failure before the member answered moves on to the next member.
bool EtcdExchange::Failed(const beast::error_code& error, const char* step) {
  if (cancelled.load()) return true;
  if (!error) return false;
  std::string why = std::string(step) + ": " +
                    (error == beast::error::timeout ? std::string("timed out")
                                                    : error.message());
  // TLS 1.3 ends the client's handshake before the member has checked the
  // client's certificate: a refusal then comes as an alert the client may
  // not get to read before the connection is reset.
  if (tls && SSL_is_init_finished(tls->native_handle()) && status == 0 &&
      why.find("alert") == std::string::npos) {
    why +=
        " (right after the TLS handshake: the member may have refused "
        "this client's certificate)";
  }
  FailedBecause(why);
  return true;
}

void EtcdExchange::FailedBecause(const std::string& why) {
  last_error = Status(StatusCode::kUnavailable, endpoints[index] + ": " + why);
  TryNext();
}

void EtcdExchange::Finish(StatusOr<std::string> result) {
  CloseSocket();
  if (cancelled.exchange(true)) return;
  if (done) done(std::move(result));
}

}  // namespace rdmarpc::naming
