// Fuzzes the admin endpoint (rpc/builtin/admin.h) with what an HTTP client can
// send: the input is the byte stream of one admin connection, sent in pieces
// (the first byte picks the piece size) and then half-closed. A real server
// (ServerOptions::admin_listen) serves it. Every response the endpoint
// writes must parse as HTTP/1.1 with a status it documents, the endpoint
// must close the connection once the client has finished, and a call on the
// RPC port must still succeed afterwards: nothing on the admin side reaches
// the RPC side.
#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/log.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/server.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/support/test_support.h"
#include "transport/uri.h"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

struct Target {
  Target() {
    rdmarpc::Log().set_level(spdlog::level::off);
    rdmarpc::rpc::ServerOptions options;
    options.workers = 1;  // The admin endpoint shares the RPC loop.
    options.admin_listen = "http://127.0.0.1:0";
    server = std::make_unique<rdmarpc::rpc::Server>(options);
    server->RegisterService(&service);
    const auto bound = server->Listen("tcp://127.0.0.1:0");
    FUZZ_CHECK(bound.ok());
    channel = std::make_unique<rdmarpc::rpc::Channel>(*bound);
    const auto admin = rdmarpc::transport::ParseUri(server->admin_uri());
    FUZZ_CHECK(admin.ok());
    endpoint = {asio::ip::make_address(admin->host), admin->port};
  }
  rdmarpc::testing::TestService service;
  std::unique_ptr<rdmarpc::rpc::Server> server;
  std::unique_ptr<rdmarpc::rpc::Channel> channel;
  asio::ip::tcp::endpoint endpoint;
};

bool Documented(unsigned status) {
  switch (status) {
    case 200:  // /metrics, /, /healthz
    case 400:  // not HTTP
    case 404:  // another path
    case 405:  // another method
    case 413:  // a body
    case 431:  // a header over 8 KiB
      return true;
    default:
      return false;
  }
}

// Whether each request in `bytes`, in order, is a HEAD (its response has
// no body to read), as far as they parse: with the parser and limits the
// endpoint uses (rpc/builtin/admin.cc), which answers the first that does not
// and closes.
std::vector<bool> HeadRequests(const uint8_t* data, size_t size) {
  std::vector<bool> heads;
  asio::const_buffer rest(data, size);
  for (;;) {
    http::request_parser<http::empty_body> parser;
    parser.header_limit(8 << 10);
    parser.body_limit(0);
    beast::error_code error;
    while (!parser.is_done() && rest.size() > 0) {
      const size_t used = parser.put(rest, error);
      rest += used;
      if (error || used == 0) break;
    }
    if (!parser.is_done()) return heads;
    heads.push_back(parser.get().method() == http::verb::head);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Target target;
  const std::vector<bool> heads =
      size > 0 ? HeadRequests(data + 1, size - 1) : std::vector<bool>();
  const size_t piece = size == 0 ? 1 : 1 + data[0] % 64 * 16;
  if (size > 0) {
    ++data;
    --size;
  }
  // Asynchronous, on this thread: a blocking read or write here would fail
  // with EINTR whenever libFuzzer's timer signal lands (it did), and would
  // not honour the stream's timeout.
  asio::io_context context;
  beast::tcp_stream stream(context);
  // The endpoint must answer and close well before its 10 s idle timeout,
  // since the client says it is done.
  stream.expires_after(std::chrono::seconds(5));

  // Writes the input piece by piece, then half-closes. The endpoint may
  // answer and close before it has read everything: a write that fails
  // then is not an error.
  size_t at = 0;
  std::function<void()> write_next = [&] {
    if (at >= size) {
      beast::error_code ignored;
      stream.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
      return;
    }
    stream.async_write_some(
        asio::buffer(data + at, std::min(piece, size - at)),
        [&](beast::error_code written_error, size_t written) {
          if (written_error) return;
          at += written;
          write_next();
        });
  };

  // Meanwhile reads responses until the endpoint closes.
  beast::flat_buffer buffer;
  std::optional<http::response_parser<http::string_body>> parser;
  size_t answered = 0;
  std::function<void()> read_next = [&] {
    parser.emplace();
    parser->body_limit(64 << 20);
    parser->skip(answered < heads.size() && heads[answered]);
    http::async_read(stream, buffer, *parser,
                     [&](beast::error_code read_error, size_t) {
                       if (read_error == http::error::end_of_stream ||
                           read_error == asio::error::eof ||
                           read_error == asio::error::connection_reset) {
                         return;  // Closed between responses.
                       }
                       if (read_error) {
                         std::fprintf(stderr, "response %zu: %s\n", answered,
                                      read_error.message().c_str());
                       }
                       FUZZ_CHECK(read_error != beast::error::timeout);
                       FUZZ_CHECK(!read_error);  // Else a malformed response.
                       const auto& response = parser->get();
                       FUZZ_CHECK(response.version() == 11);
                       FUZZ_CHECK(Documented(response.result_int()));
                       if (!response.keep_alive()) return;
                       ++answered;
                       read_next();
                     });
  };
  stream.async_connect(target.endpoint, [&](beast::error_code connected) {
    FUZZ_CHECK(!connected);
    write_next();
    read_next();
  });
  context.run();

  // The RPC side is untouched.
  const auto result = rdmarpc::testing::CallSync(*target.channel, "Echo", "x");
  FUZZ_CHECK(result.status.ok() && result.response == "x");
  return 0;
}
