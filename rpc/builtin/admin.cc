// rpc/builtin/admin.h: the admin endpoint's HTTP server, on Boost.Beast.
#include "rpc/builtin/admin.h"

#include <sys/stat.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <list>
#include <mutex>
#include <optional>
#include <type_traits>

#include "base/log.h"
#include "transport/uri.h"

namespace rdmarpc::rpc {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

namespace {
constexpr uint32_t kHeaderLimit = 8 * 1024;
constexpr uint64_t kBodyLimit = 0;  // GET and HEAD carry none.
constexpr std::chrono::seconds kIdleTimeout{10};
}  // namespace

struct AdminEndpoint::State {
  explicit State(asio::io_context& loop) : acceptor(loop) {}
  std::mutex mu;  // Held while a page is made, so none outlives Stop.
  bool stopped = false;
  Pages pages;
  // With ?token_file=: what every request but /healthz must carry, as
  // "Authorization: Bearer <token>".
  std::string token;
  tcp::acceptor acceptor;  // The loop's thread only.
  // https://: the certificate and key every connection's TLS uses.
  std::unique_ptr<asio::ssl::context> tls;
  // The open connections' sockets, to close on stop (the loop's thread).
  std::list<std::weak_ptr<beast::tcp_stream>> streams;
};

namespace {

// One connection: plain HTTP on a beast::tcp_stream, or HTTPS on a
// beast::ssl_stream over one (its TLS handshake first).
template <typename Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  Session(std::shared_ptr<AdminEndpoint::State> state, tcp::socket socket)
      : state_(std::move(state)), stream_(MakeStream(std::move(socket))) {}

  void Start() {
    // The socket, shared with the stream: closed on stop.
    state_->streams.push_back(std::shared_ptr<beast::tcp_stream>(
        stream_, &beast::get_lowest_layer(*stream_)));
    if constexpr (kTls) {
      Lowest().expires_after(kIdleTimeout);
      stream_->async_handshake(
          asio::ssl::stream_base::server,
          [self = this->shared_from_this()](beast::error_code error) {
            if (error) {
              Log().debug("admin endpoint: TLS handshake failed: {}",
                          error.message());
              return self->Close();
            }
            self->Read();
          });
    } else {
      Read();
    }
  }

 private:
  std::shared_ptr<Stream> MakeStream(tcp::socket socket) {
    if constexpr (kTls) {
      return std::make_shared<Stream>(std::move(socket), *state_->tls);
    } else {
      return std::make_shared<Stream>(std::move(socket));
    }
  }
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(*stream_); }

  void Read() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(kBodyLimit);
    Lowest().expires_after(kIdleTimeout);
    http::async_read(
        *stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code error, size_t) {
          self->OnRead(error);
        });
  }

  void OnRead(beast::error_code error) {
    if (error == http::error::end_of_stream || error == beast::error::timeout ||
        error == asio::error::operation_aborted ||
        error == asio::error::connection_reset || error == asio::error::eof) {
      return Close();
    }
    if (error == http::error::header_limit) {
      return Reply(http::status::request_header_fields_too_large,
                   "request header over 8 KiB\n", false);
    }
    if (error == http::error::body_limit) {
      return Reply(http::status::payload_too_large,
                   "the admin endpoint takes no request body\n", false);
    }
    if (error) {
      return Reply(http::status::bad_request,
                   "bad request: " + error.message() + "\n", false);
    }
    const auto& request = parser_->get();
    const bool head = request.method() == http::verb::head;
    if (request.method() != http::verb::get && !head) {
      return Reply(http::status::method_not_allowed, "GET or HEAD only\n",
                   false);
    }
    std::string_view target(request.target().data(), request.target().size());
    target = target.substr(0, target.find('?'));
    if (!state_->token.empty() && target != "/healthz" && !Authorized([&] {
          const auto value = request[http::field::authorization];
          return std::string_view(value.data(), value.size());
        }())) {
      return Reply(http::status::unauthorized,
                   "unauthorized: this endpoint takes \"Authorization: Bearer "
                   "<token>\" (its token_file)\n",
                   request.keep_alive());
    }
    std::string body;
    const char* type = "text/plain; charset=utf-8";
    http::status status = http::status::ok;
    {
      std::lock_guard lock(state_->mu);
      if (state_->stopped) return Close();
      if (target == "/metrics") {
        body = state_->pages.metrics();
        type = "text/plain; version=0.0.4; charset=utf-8";
      } else if (target == "/healthz") {
        const bool healthy = state_->pages.healthy();
        status = healthy ? http::status::ok : http::status::service_unavailable;
        body = healthy ? "ok\n" : "shutting down\n";
      } else if (target == "/") {
        body = state_->pages.status_html();
        type = "text/html; charset=utf-8";
      } else {
        status = http::status::not_found;
        body = "not found: try /, /metrics or /healthz\n";
      }
    }
    Reply(status, std::move(body), request.keep_alive(), type, head);
  }

  // Whether `header` is "Bearer <the token>", compared in constant time.
  bool Authorized(std::string_view header) const {
    constexpr std::string_view kScheme = "Bearer ";
    if (!header.starts_with(kScheme)) return false;
    const std::string_view given = header.substr(kScheme.size());
    const std::string& token = state_->token;
    unsigned char differ = given.size() == token.size() ? 0 : 1;
    for (size_t i = 0; i < token.size(); ++i) {
      differ |= static_cast<unsigned char>(
          token[i] ^ (i < given.size() ? given[i] : '\0'));
    }
    return differ == 0;
  }

  void Reply(http::status status, std::string body, bool keep_alive,
             const char* type = "text/plain; charset=utf-8",
             bool head = false) {
    response_ = {status, 11};
    response_.set(http::field::server, "rdmarpc-admin");
    response_.set(http::field::content_type, type);
    if (status == http::status::unauthorized) {
      response_.set(http::field::www_authenticate, "Bearer realm=\"rdmarpc\"");
    }
    response_.body() = std::move(body);
    response_.keep_alive(keep_alive);
    response_.prepare_payload();
    if (head) response_.body().clear();  // Content-Length stays.
    http::async_write(
        *stream_, response_,
        [self = this->shared_from_this()](beast::error_code error, size_t) {
          if (error || !self->response_.keep_alive()) {
            return self->Close();
          }
          self->Read();
        });
  }

  void Close() {
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Lowest().close();
  }

  std::shared_ptr<AdminEndpoint::State> state_;
  std::shared_ptr<Stream> stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::empty_body>> parser_;
  http::response<http::string_body> response_;
};

void Accept(const std::shared_ptr<AdminEndpoint::State>& state) {
  state->acceptor.async_accept([state](beast::error_code error,
                                       tcp::socket socket) {
    if (error == asio::error::operation_aborted || !state->acceptor.is_open())
      return;
    if (!error) {
      std::erase_if(state->streams,
                    [](const auto& stream) { return stream.expired(); });
      if (state->tls) {
        std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
            state, std::move(socket))
            ->Start();
      } else {
        std::make_shared<Session<beast::tcp_stream>>(state, std::move(socket))
            ->Start();
      }
    }
    Accept(state);
  });
}

// The token in `path`: its first line, without surrounding blanks. A file
// others may read is refused (the token is a secret), as is an empty one.
StatusOr<std::string> ReadToken(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return Status(StatusCode::kInvalidArgument,
                  "admin endpoint: cannot read token_file " + path + ": " +
                      std::strerror(errno));
  }
  if ((info.st_mode & S_IRWXO) != 0) {
    return Status(StatusCode::kFailedPrecondition,
                  "admin endpoint: token_file " + path +
                      " may be read or written by others: chmod o-rwx it");
  }
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  const auto first = line.find_first_not_of(" \t\r");
  const auto last = line.find_last_not_of(" \t\r");
  if (first == std::string::npos) {
    return Status(StatusCode::kInvalidArgument,
                  "admin endpoint: token_file " + path + " holds no token");
  }
  return line.substr(first, last - first + 1);
}

// https://'s TLS: the certificate chain and key (a key others may use is
// refused, as the RPC transports refuse one), TLS 1.2 or later.
StatusOr<std::unique_ptr<asio::ssl::context>> TlsContext(
    const std::string& cert_file, const std::string& key_file) {
  if (cert_file.empty() || key_file.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "admin endpoint: https:// needs cert_file=PATH and "
                  "key_file=PATH");
  }
  struct stat info {};
  if (::stat(key_file.c_str(), &info) == 0 && (info.st_mode & S_IRWXO) != 0) {
    return Status(StatusCode::kFailedPrecondition,
                  "admin endpoint: key_file " + key_file +
                      " may be used by others: chmod o-rwx it");
  }
  auto tls =
      std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
  SSL_CTX_set_min_proto_version(tls->native_handle(), TLS1_2_VERSION);
  beast::error_code error;
  tls->use_certificate_chain_file(cert_file, error);
  if (!error)
    tls->use_private_key_file(key_file, asio::ssl::context::pem, error);
  if (error) {
    return Status(StatusCode::kInvalidArgument,
                  "admin endpoint: cannot load " + cert_file + " and " +
                      key_file + ": " + error.message());
  }
  return tls;
}

}  // namespace

StatusOr<std::unique_ptr<AdminEndpoint>> AdminEndpoint::Start(
    asio::io_context& loop, std::string_view uri, Pages pages) {
  StatusOr<transport::Uri> parsed = transport::ParseUri(uri);
  if (!parsed.ok() || (parsed->scheme != "http" && parsed->scheme != "https")) {
    return Status(StatusCode::kInvalidArgument,
                  "admin endpoint: expected http://HOST:PORT or "
                  "https://HOST:PORT?cert_file=...&key_file=..., got \"" +
                      std::string(uri) + "\"");
  }
  const bool https = parsed->scheme == "https";
  beast::error_code error;
  const auto address = asio::ip::make_address(parsed->host, error);
  if (error) {
    return Status(StatusCode::kInvalidArgument,
                  "admin endpoint: \"" + parsed->host +
                      "\" is not an IP address: " + error.message());
  }
  // It shows every method, limit and client address, unauthenticated: on
  // loopback unless the URI says otherwise (?remote=1).
  bool remote = false;
  std::string token, cert_file, key_file;
  for (const auto& [name, value] : parsed->params) {
    if (name == "remote" && (value == "1" || value == "0")) {
      remote = value == "1";
    } else if (https && name == "cert_file") {
      cert_file = value;
    } else if (https && name == "key_file") {
      key_file = value;
    } else if (name == "token_file") {
      StatusOr<std::string> read = ReadToken(value);
      if (!read.ok()) return read.status();
      token = std::move(*read);
    } else {
      std::string why = "admin endpoint: unknown parameter \"";
      why += name;
      why += '=';
      why += value;
      why +=
          "\" (it takes remote=1, token_file=PATH and, with https://, "
          "cert_file=PATH and key_file=PATH)";
      return Status(StatusCode::kInvalidArgument, std::move(why));
    }
  }
  if (!address.is_loopback() && !remote) {
    return Status(StatusCode::kInvalidArgument,
                  "admin endpoint: " + parsed->host +
                      " is not a loopback address, and the endpoint shows "
                      "every method, limit and client address to whoever "
                      "connects: add ?remote=1 to serve it there");
  }
  auto endpoint = std::unique_ptr<AdminEndpoint>(new AdminEndpoint);
  endpoint->state_ = std::make_shared<State>(loop);
  State& state = *endpoint->state_;
  state.pages = std::move(pages);
  state.token = std::move(token);
  if (https) {
    auto tls = TlsContext(cert_file, key_file);
    if (!tls.ok()) return tls.status();
    state.tls = std::move(*tls);
  }
  const tcp::endpoint where(address, parsed->port);
  state.acceptor.open(where.protocol(), error);
  if (!error) state.acceptor.set_option(tcp::acceptor::reuse_address(true));
  if (!error) state.acceptor.bind(where, error);
  if (!error)
    state.acceptor.listen(asio::socket_base::max_listen_connections, error);
  if (error) {
    return Status(StatusCode::kUnavailable,
                  "admin endpoint: cannot listen on " + std::string(uri) +
                      ": " + error.message());
  }
  const tcp::endpoint bound = state.acceptor.local_endpoint();
  const std::string host = bound.address().is_v6()
                               ? "[" + bound.address().to_string() + "]"
                               : bound.address().to_string();
  endpoint->uri_ = (https ? "https://" : "http://") + host + ":" +
                   std::to_string(bound.port());
  asio::post(loop, [state = endpoint->state_] { Accept(state); });
  Log().info("admin endpoint on {}", endpoint->uri_);
  return endpoint;
}

AdminEndpoint::~AdminEndpoint() {
  if (!state_) return;
  {
    std::lock_guard lock(state_->mu);  // Waits out a page being made.
    state_->stopped = true;
  }
  // The acceptor and the sockets belong to the loop's thread.
  asio::post(state_->acceptor.get_executor(), [state = state_] {
    beast::error_code ignored;
    state->acceptor.close(ignored);
    for (const auto& weak : state->streams) {
      if (const auto stream = weak.lock()) stream->close();
    }
    state->streams.clear();
  });
}

}  // namespace rdmarpc::rpc
