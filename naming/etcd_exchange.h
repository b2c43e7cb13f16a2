// EtcdExchange: one POST to etcd's HTTP/JSON gateway, sent to each
// member in turn until one answers, over a new TCP connection each (TLS
// when the client has credentials). A streaming exchange (a watch) hands
// over each line of the body as it comes, and never ends by itself.
// EtcdClient's (naming/etcd_client.cc); it includes nothing of the
// client's.
#ifndef RDMARPC_NAMING_ETCD_EXCHANGE_H_
#define RDMARPC_NAMING_ETCD_EXCHANGE_H_

#include <google/protobuf/message.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rdmarpc/naming_options.h"
#include "rdmarpc/status.h"
#include "rdmarpc/unique_function.h"

namespace rdmarpc::transport::tls {
class TlsContext;
}

namespace rdmarpc::naming {

// A message as the gateway's JSON (etcd's field names), and back.
std::string ToJson(const google::protobuf::Message& message);
Status FromJson(std::string_view json, google::protobuf::Message* message);
// An HTTP error's body is the gateway's {"error", "message", "code"}: its
// code and message, else INTERNAL naming the HTTP status and the body's
// first line.
Status GatewayStatus(unsigned http_status, std::string_view body);

class EtcdExchange : public std::enable_shared_from_this<EtcdExchange> {
 public:
  // `endpoints` ("host:port" each) must outlive the exchange; `preferred`
  // is the member tried first, and set to the one that answers;
  // `credentials`, null for plaintext.
  EtcdExchange(boost::asio::any_io_executor executor,
               const std::vector<std::string>& endpoints,
               const EtcdOptions& options,
               std::shared_ptr<std::atomic<size_t>> preferred,
               std::shared_ptr<transport::tls::TlsContext> credentials);

  // Sends it on the executor.
  void Start();
  // Ends it: no callback runs once this has returned on the executor.
  void Cancel();
  // Ends it with `status` before it started (a token refused).
  void Fail(Status status);

  std::string path;
  std::string request_body;
  std::string token;  // etcd's authentication token, if any.
  // A streaming exchange's receiver of each line; false ends the exchange.
  std::function<bool(std::string_view)> on_line;
  // The body of a 200 (a stream: why it ended), or the error.
  UniqueFunction<void(StatusOr<std::string>)> done;

 private:
  void TryNext();
  void Send();
  void ReadHeader();
  void ReadBody();
  template <typename Stream>
  void ReadSome(Stream& stream);
  bool DeliverLines();
  void BodyDone();
  bool Stop();
  bool Failed(const boost::beast::error_code& error, const char* step);
  void FailedBecause(const std::string& why);
  void Finish(StatusOr<std::string> result);

  // The connection to the member being tried, under TLS or not.
  boost::beast::tcp_stream& tcp() { return tls ? tls->next_layer() : plain; }
  template <typename F>
  void OnStream(F&& f);
  void CloseSocket();

  boost::asio::any_io_executor executor;
  const std::vector<std::string>& endpoints;  // The client's: it outlives us.
  const EtcdOptions options;
  std::shared_ptr<std::atomic<size_t>> preferred;
  const size_t first;

  std::atomic<bool> cancelled{false};
  size_t attempt = 0;
  size_t index = 0;
  Status last_error;
  // With TLS: the credentials, and the context and stream of this attempt.
  const std::shared_ptr<transport::tls::TlsContext> credentials;
  std::optional<boost::asio::ssl::context> ssl_context;
  std::optional<boost::beast::ssl_stream<boost::beast::tcp_stream>> tls;
  boost::asio::ip::tcp::resolver resolver;
  boost::beast::tcp_stream plain;
  boost::beast::flat_buffer buffer;
  boost::beast::http::request<boost::beast::http::string_body> request;
  std::optional<
      boost::beast::http::response_parser<boost::beast::http::buffer_body>>
      parser;
  char chunk[8192];
  std::string body;
  unsigned status = 0;
};

}  // namespace rdmarpc::naming

#endif  // RDMARPC_NAMING_ETCD_EXCHANGE_H_
