// The admin endpoint (ServerOptions::admin_listen, rpc/builtin/admin.h):
// /metrics in Prometheus's text format with exact counts, /healthz, the status
// page, and 4xx for everything else without touching the RPC side.
#include "rdmarpc/admin.h"

#include <unistd.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <catch2/catch_test_macros.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "rdmarpc/channel.h"
#include "rdmarpc/server.h"
#include "rpc/builtin/prometheus.h"
#include "tests/support/test_pki.h"
#include "tests/support/test_support.h"
#include "transport/rdma/device_info.h"
#include "transport/uri.h"

namespace rdmarpc::testing {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

struct Reply {
  int status = 0;
  std::string content_type;
  std::string body;
};

tcp::endpoint EndpointOf(const std::string& uri) {
  const auto parsed = transport::ParseUri(uri);
  REQUIRE(parsed.ok());
  return {asio::ip::make_address(parsed->host), parsed->port};
}

// One request on `stream`, and its reply.
template <typename Stream>
Reply Exchange(Stream& stream, http::verb verb, const std::string& target,
               const std::string& authorization) {
  http::request<http::string_body> request{verb, target, 11};
  request.set(http::field::host, "localhost");
  if (!authorization.empty()) {
    request.set(http::field::authorization, authorization);
  }
  http::write(stream, request);
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  http::read(stream, buffer, response);
  return {static_cast<int>(response.result_int()),
          std::string(response[http::field::content_type]), response.body()};
}

// One request on a connection of its own.
Reply Get(const std::string& uri, const std::string& target,
          http::verb verb = http::verb::get,
          const std::string& authorization = "") {
  asio::io_context context;
  beast::tcp_stream stream(context);
  stream.connect(EndpointOf(uri));
  return Exchange(stream, verb, target, authorization);
}

// What the endpoint answers to `raw` bytes, up to the status line's code.
int RawStatus(const std::string& uri, const std::string& raw) {
  asio::io_context context;
  tcp::socket socket(context);
  socket.connect(EndpointOf(uri));
  asio::write(socket, asio::buffer(raw));
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  beast::error_code error;
  http::read(socket, buffer, response, error);
  return error ? -1 : static_cast<int>(response.result_int());
}

// The value of the sample `name{labels}` in an exposition, or -1.
double SampleValue(const std::string& text, const std::string& series) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(series + " ", 0) == 0) {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return -1;
}

struct AdminServer {
  AdminServer() {
    server = std::make_unique<rpc::Server>();
    server->RegisterService(&service);
    rpc::EnableAdmin(*server, "http://127.0.0.1:0");
    const StatusOr<std::string> bound = server->Listen(ListenUri());
    REQUIRE(bound.ok());
    uri = *bound;
    transport = uri.substr(0, uri.find("://"));
    admin = server->admin_uri();
    REQUIRE(admin.rfind("http://127.0.0.1:", 0) == 0);
  }
  TestService service;
  std::unique_ptr<rpc::Server> server;
  std::string uri, admin;
  std::string transport;  // "tcp", or "rdma" in the VM's suite.
};

TEST_CASE("admin: /metrics counts every call, in Prometheus's format") {
  AdminServer s;
  rpc::Channel channel(s.uri);
  for (int i = 0; i < 37; ++i) {
    REQUIRE(CallSync(channel, "Echo", "x").status.ok());
  }
  for (int i = 0; i < 3; ++i) {
    CHECK(CallSync(channel, "Fail", "5:no such thing").status.code() ==
          StatusCode::kNotFound);
  }
  const Reply metrics = Get(s.admin, "/metrics");
  REQUIRE(metrics.status == 200);
  CHECK(metrics.content_type.find("version=0.0.4") != std::string::npos);
  const std::string& text = metrics.body;
  const std::string echo = "service=\"test.Test\",method=\"Echo\"";
  CHECK(SampleValue(text, "rdmarpc_server_calls_total{" + echo +
                              ",code=\"OK\"}") == 37);
  CHECK(SampleValue(text, "rdmarpc_server_calls_started_total{" + echo + "}") ==
        37);
  CHECK(SampleValue(text,
                    "rdmarpc_server_calls_total{service=\"test.Test\","
                    "method=\"Fail\",code=\"NOT_FOUND\"}") == 3);
  CHECK(SampleValue(text, "rdmarpc_server_request_bytes_total{" + echo + "}") ==
        37);
  CHECK(SampleValue(
            text, "rdmarpc_server_handling_seconds_count{" + echo + "}") == 37);
  CHECK(SampleValue(text, "rdmarpc_server_handling_seconds_bucket{" + echo +
                              ",le=\"+Inf\"}") == 37);
  CHECK(SampleValue(text, "rdmarpc_server_connections") == 1);
  CHECK(SampleValue(text, "rdmarpc_transport_connections{transport=\"" +
                              s.transport + "\"}") == 1);
  CHECK(SampleValue(text, "process_open_fds") > 0);

  // Buckets rise with `le` and end at the count; every family has its HELP
  // and TYPE before its first sample; every line ends with a newline.
  std::istringstream lines(text);
  double previous = 0;
  int buckets = 0;
  std::map<std::string, int> typed;
  std::string last_family;
  for (std::string line; std::getline(lines, line);) {
    REQUIRE(!line.empty());
    if (line.rfind("# TYPE ", 0) == 0) {
      last_family = line.substr(7, line.find(' ', 7) - 7);
      typed[last_family]++;
      continue;
    }
    if (line[0] == '#') continue;
    const std::string name = line.substr(0, line.find_first_of("{ "));
    INFO(line);
    CHECK(name.rfind(last_family, 0) == 0);  // Its family's TYPE came first.
    if (line.rfind("rdmarpc_server_handling_seconds_bucket{" + echo, 0) == 0) {
      const double value = std::stod(line.substr(line.rfind(' ') + 1));
      CHECK(value >= previous);
      previous = value;
      ++buckets;
    }
  }
  CHECK(text.back() == '\n');
  CHECK(buckets == 38);  // 1 us .. 2^36 us, and +Inf.
  CHECK(previous == 37);
  for (const auto& [family, count] : typed) {
    INFO(family);
    CHECK(count == 1);
  }
  CHECK(rpc::PrometheusLabelValue("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
}

// A connection that closes keeps its counts in the transport's counters:
// summed over open connections alone, they would fall when a client leaves,
// which Prometheus takes for a restart of the process.
TEST_CASE("admin: transport counters keep closed connections' counts") {
  AdminServer s;
  const std::string frames =
      "rdmarpc_transport_frames_received_total{transport=\"" + s.transport +
      "\"}";
  const std::string open =
      "rdmarpc_transport_connections{transport=\"" + s.transport + "\"}";
  double before_close = 0;
  {
    rpc::Channel channel(s.uri);
    for (int i = 0; i < 5; ++i) {
      REQUIRE(CallSync(channel, "Echo", "x").status.ok());
    }
    const std::string text = Get(s.admin, "/metrics").body;
    before_close = SampleValue(text, frames);
    CHECK(before_close >= 5);
    CHECK(SampleValue(text, open) == 1);
  }
  // The server learns of the close on its loop.
  REQUIRE(WaitFor(
      [&] { return SampleValue(Get(s.admin, "/metrics").body, open) == 0; }));
  std::string text = Get(s.admin, "/metrics").body;
  CHECK(SampleValue(text, frames) >= before_close);
  rpc::Channel again(s.uri);
  REQUIRE(CallSync(again, "Echo", "x").status.ok());
  text = Get(s.admin, "/metrics").body;
  CHECK(SampleValue(text, open) == 1);
  CHECK(SampleValue(text, frames) >= before_close + 1);
}

// Every counter a connection keeps (transport::kConnectionCounters) is in
// /metrics under its name, between the server's sums read before and after.
TEST_CASE("admin: every transport counter is exported") {
  AdminServer s;
  rpc::Channel channel(s.uri);
  for (int i = 0; i < 5; ++i) {
    REQUIRE(CallSync(channel, "Echo", std::string(100000, 'x')).status.ok());
  }
  const auto totals = [&](transport::ConnectionStats& sum) {
    s.server->ForEachTransport([&](const std::string& transport,
                                   const rpc::Server::TransportTotals& t) {
      if (transport == s.transport) sum.Add(t.counters);
    });
  };
  transport::ConnectionStats before, after;
  totals(before);
  const std::string text = Get(s.admin, "/metrics").body;
  totals(after);
  for (const transport::ConnectionCounter& counter :
       transport::kConnectionCounters) {
    const std::string name =
        std::string("rdmarpc_transport_") + counter.name + "_total";
    INFO(name);
    CHECK(text.find("# TYPE " + name + " counter\n") != std::string::npos);
    const double value =
        SampleValue(text, name + "{transport=\"" + s.transport + "\"}");
    CHECK(value >= double((before.*counter.member).load()));
    CHECK(value <= double((after.*counter.member).load()));
  }
  CHECK(SampleValue(text, "rdmarpc_transport_sent_bytes_total{transport=\"" +
                              s.transport + "\"}") >= 5 * 100000);
}

// A process's channels, summed per target, on the server's endpoint too.
TEST_CASE("admin: /metrics shows this process's channels") {
  AdminServer s;
  rpc::Channel one(s.uri), two(s.uri);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(CallSync(one, "Echo", "x").status.ok());
    REQUIRE(CallSync(two, "Echo", "x").status.ok());
  }
  // A cluster of the server and an address where nothing listens.
  const std::string dead = s.transport + "://127.0.0.1:1";
  rpc::Channel cluster("list://" + s.uri + "," + dead);
  REQUIRE(CallSync(cluster, "Echo", "x").status.ok());
  const std::string text = Get(s.admin, "/metrics").body;
  const std::string server = "{target=\"" + s.uri + "\"}";
  CHECK(SampleValue(text, "rdmarpc_client_channels" + server) == 2);
  CHECK(SampleValue(text, "rdmarpc_client_connects_total" + server) == 2);
  CHECK(SampleValue(text, "rdmarpc_client_calls_outstanding" + server) == 0);
  const std::string list =
      "{target=\"" + rpc::PrometheusLabelValue(cluster.target()) + "\"}";
  CHECK(SampleValue(text, "rdmarpc_client_channels" + list) == 1);
  CHECK(SampleValue(text, "rdmarpc_client_endpoints" + list) == 2);
  CHECK(SampleValue(text, "rdmarpc_client_endpoints_ready" + list) == 1);
  const std::string page = Get(s.admin, "/").body;
  CHECK(page.find("<table id=\"channels\">") != std::string::npos);
  CHECK(page.find("<td class=\"name\">" + s.uri + "</td><td>2</td>") !=
        std::string::npos);
}

// brpc's "dummy server": a process with channels and no server.
TEST_CASE("admin: a process that is only a client serves its channels") {
  TestService service;  // Outlives the server.
  rpc::Server server;   // Another process's, as far as the admin knows.
  server.RegisterService(&service);
  const StatusOr<std::string> bound = server.Listen(ListenUri());
  REQUIRE(bound.ok());
  auto admin = rpc::ClientAdmin::Start("http://127.0.0.1:0");
  REQUIRE(admin.ok());
  const std::string uri = (*admin)->uri();
  rpc::Channel channel(*bound);
  for (int i = 0; i < 4; ++i) {
    REQUIRE(CallSync(channel, "Echo", "x").status.ok());
  }
  const Reply metrics = Get(uri, "/metrics");
  CHECK(metrics.status == 200);
  const std::string target = "{target=\"" + *bound + "\"}";
  CHECK(SampleValue(metrics.body, "rdmarpc_client_channels" + target) == 1);
  CHECK(SampleValue(metrics.body, "rdmarpc_client_connects_total" + target) ==
        1);
  CHECK(SampleValue(metrics.body, "process_open_fds") > 0);
  CHECK(metrics.body.find("rdmarpc_server_") == std::string::npos);
  const Reply page = Get(uri, "/");
  CHECK(page.status == 200);
  CHECK(page.body.find("<title>rdmarpc client</title>") != std::string::npos);
  CHECK(page.body.find(*bound) != std::string::npos);
  CHECK(Get(uri, "/healthz").status == 200);
  CHECK(RawStatus(uri, "POST /metrics HTTP/1.1\r\n\r\n") == 405);
  CHECK(!rpc::ClientAdmin::Start("https://127.0.0.1:0").ok());
  admin->reset();  // Closes the port.
  asio::io_context context;
  tcp::socket socket(context);
  beast::error_code error;
  socket.connect(EndpointOf(uri), error);
  CHECK(error);
}

// The device's own counters (what `rdma statistic` shows), read from a
// tree laid out as /sys/class/infiniband is.
TEST_CASE("admin: device port counters are read as sysfs lays them out") {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() /
                        ("admin_test_sysfs_" + std::to_string(::getpid()));
  const auto write = [](const fs::path& file, const std::string& text) {
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
  };
  write(root / "rxe9/ports/1/hw_counters/out_of_seq_request", "7\n");
  write(root / "rxe9/ports/1/hw_counters/rcvd_rnr_err", "0\n");
  write(root / "rxe9/ports/1/hw_counters/lifespan", "10\n");  // A setting.
  write(root / "rxe9/ports/1/hw_counters/broken", "n/a\n");
  write(root / "mlx5_0/ports/2/hw_counters/duplicate_request", "12345\n");
  fs::create_directories(root / "noports");
  const auto counters = transport::rdma::ReadPortCounters(root.string());
  fs::remove_all(root);
  REQUIRE(counters.size() == 3);
  CHECK(counters[0].device == "mlx5_0");
  CHECK(counters[0].port == 2);
  CHECK(counters[0].name == "duplicate_request");
  CHECK(counters[0].value == 12345);
  CHECK(counters[1].name == "out_of_seq_request");
  CHECK(counters[1].value == 7);
  CHECK(counters[2].name == "rcvd_rnr_err");
  CHECK(transport::rdma::ReadPortCounters("/nonexistent").empty());
}

// Over rdma:// (the VM's suite): the process's RDMA resources and every
// counter of the device's ports.
TEST_CASE("admin: /metrics shows RDMA resources and the device's counters") {
  AdminServer s;
  rpc::Channel channel(s.uri);
  REQUIRE(CallSync(channel, "Echo", std::string(100000, 'x')).status.ok());
  const std::string text = Get(s.admin, "/metrics").body;
  const double qps = SampleValue(text, "rdmarpc_rdma_queue_pairs");
  CHECK(qps >= 0);
  CHECK(SampleValue(text, "rdmarpc_rdma_registrations_total") >= 0);
  if (!OverRdma()) return;
  CHECK(qps >= 2);  // The channel's and the server's.
  CHECK(SampleValue(text, "rdmarpc_rdma_registered_bytes") > 0);
  CHECK(SampleValue(text,
                    "rdmarpc_transport_rdma_writes_total{transport="
                    "\"rdma\"}") >= 1);  // The 100,000 bytes.
  const auto counters = transport::rdma::ReadPortCounters();
  REQUIRE(!counters.empty());  // rxe keeps hw_counters.
  for (const auto& c : counters) {
    INFO(c.device << " port " << c.port << " " << c.name);
    CHECK(SampleValue(text, "rdmarpc_rdma_port_" + c.name + "_total{device=\"" +
                                c.device + "\",port=\"" +
                                std::to_string(c.port) + "\"}") >= 0);
  }
}

// The queue's depth: responses to a client that has stopped reading pile
// up at the server, and /metrics and the page say how many bytes. The
// order is fixed: every request reaches the server, the client's loop is
// held, then the server answers them all.
TEST_CASE("admin: the bytes queued for a client that stopped reading") {
  AdminServer s;
  rpc::Channel channel(s.uri);
  REQUIRE(CallSync(channel, "Echo", "warm").status.ok());
  const std::string queued =
      "rdmarpc_transport_queued_bytes{transport=\"" + s.transport + "\"}";
  constexpr int kCalls = 32;
  constexpr size_t kResponse = 1 << 20;  // 32 MiB in all: more than sockets
                                         // and grants hold.
  std::atomic<int> done{0};
  std::mutex mutex;
  std::vector<std::string> failures;
  for (int i = 0; i < kCalls; ++i) {
    channel.Call("test.Test", "GatedBytes",
                 Buffer::CopyOf(std::to_string(kResponse)),
                 rpc::CallOptions::WithTimeout(60s),
                 [&](const Status& status, Buffer response) {
                   if (status.ok() && response.size() == kResponse) {
                     done++;
                   } else {
                     std::lock_guard lock(mutex);
                     failures.push_back(status.ToString());
                   }
                 });
  }
  REQUIRE(WaitFor([&] { return s.service.gated_calls() == size_t{kCalls}; }));
  // The client's loop, held, reads nothing until released.
  LoopHold hold(channel);
  REQUIRE(hold.WaitHeld());
  s.service.OpenGate();
  double while_held = -1;
  WaitFor([&] {
    while_held = SampleValue(Get(s.admin, "/metrics").body, queued);
    return while_held > 0;
  });
  hold.Release();
  const bool all_done = WaitFor([&] { return done == kCalls; }, 60s);
  {
    std::lock_guard lock(mutex);
    INFO(failures.size() << " failed; the first: "
                         << (failures.empty() ? "-" : failures.front()));
    REQUIRE(all_done);
  }
  CHECK(while_held > 0);
  CHECK(WaitFor(
      [&] { return SampleValue(Get(s.admin, "/metrics").body, queued) == 0; },
      5s));
}

TEST_CASE("admin: /healthz and the status page") {
  AdminServer s;
  rpc::Channel channel(s.uri);
  REQUIRE(CallSync(channel, "Echo", "x").status.ok());
  const Reply health = Get(s.admin, "/healthz");
  CHECK(health.status == 200);
  CHECK(health.body == "ok\n");
  const Reply page = Get(s.admin, "/");
  CHECK(page.status == 200);
  CHECK(page.content_type.find("text/html") != std::string::npos);
  CHECK(page.body.find("<table id=\"methods\">") != std::string::npos);
  CHECK(page.body.find("test.Test/Echo") != std::string::npos);
  CHECK(page.body.find("http-equiv=\"refresh\"") != std::string::npos);
  CHECK(page.body.find(s.transport + "://") != std::string::npos);
  // The transport's totals (one connection, open) and the server's options.
  CHECK(page.body.find("<tr><td class=\"name\">" + s.transport +
                       "</td><td>1</td>") != std::string::npos);
  CHECK(page.body.find("<td class=\"name\">max request payload bytes</td><td>" +
                       std::to_string(tunables::kDefaultMaxPayloadSize) +
                       "</td>") != std::string::npos);
}

TEST_CASE("admin: bad requests get 4xx, and calls go on") {
  AdminServer s;
  rpc::Channel channel(s.uri);
  CHECK(Get(s.admin, "/nothing").status == 404);
  CHECK(Get(s.admin, "/metrics", http::verb::post).status == 405);
  CHECK(RawStatus(s.admin, "hello, admin\r\n\r\n") == 400);
  CHECK(RawStatus(s.admin,
                  "GET / HTTP/1.1\r\nX-Big: " + std::string(16 * 1024, 'x') +
                      "\r\n\r\n") == 431);
  CHECK(RawStatus(s.admin,
                  "GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello") == 413);
  CHECK(CallSync(channel, "Echo", "still").response == "still");
  CHECK(Get(s.admin, "/healthz").status == 200);  // And it still serves.
  CHECK(s.server->stats().protocol_errors == 0);
}

TEST_CASE("admin: shutdown closes the endpoint") {
  AdminServer s;
  REQUIRE(Get(s.admin, "/healthz").status == 200);
  s.server->Shutdown(std::chrono::milliseconds(0));
  asio::io_context context;
  tcp::socket socket(context);
  beast::error_code error;
  socket.connect(EndpointOf(s.admin), error);
  CHECK(error == asio::error::connection_refused);
}

TEST_CASE("admin: a bad admin address fails Listen with a clear error") {
  rpc::Server server;
  rpc::EnableAdmin(server, "ftp://127.0.0.1:0");
  const StatusOr<std::string> bound = server.Listen(ListenUri());
  REQUIRE(!bound.ok());
  CHECK(bound.status().code() == StatusCode::kInvalidArgument);
  CHECK(bound.status().message().find("http://HOST:PORT") != std::string::npos);
}

TEST_CASE(
    "admin: the endpoint listens beyond loopback only when its URI says "
    "remote=1") {
  rpc::Server server;
  rpc::EnableAdmin(server, "http://0.0.0.0:0");
  const StatusOr<std::string> refused = server.Listen(ListenUri());
  REQUIRE(!refused.ok());
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK(refused.status().message().find("?remote=1") != std::string::npos);
  CHECK(!rpc::ClientAdmin::Start("http://0.0.0.0:0").ok());
  CHECK(!rpc::ClientAdmin::Start("http://127.0.0.1:0?remote=yes").ok());
  auto remote = rpc::ClientAdmin::Start("http://0.0.0.0:0?remote=1");
  REQUIRE(remote.ok());
  CHECK((*remote)->uri().rfind("http://0.0.0.0:", 0) == 0);
}

TEST_CASE(
    "admin: with a token_file every page but /healthz asks for the token") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") +
                           "/admin-token-" + std::to_string(::getpid());
  {
    std::ofstream out(path);
    out << "  s3cret-admin \n";
  }
  std::filesystem::permissions(path, std::filesystem::perms::owner_read |
                                         std::filesystem::perms::owner_write);
  rpc::Server server;
  TestService service;
  server.RegisterService(&service);
  rpc::EnableAdmin(server, "http://127.0.0.1:0?token_file=" + path);
  REQUIRE(server.Listen(ListenUri()).ok());
  const std::string admin = server.admin_uri();
  CHECK(Get(admin, "/metrics").status == 401);
  CHECK(Get(admin, "/", http::verb::get, "Bearer s3cret-admiN").status == 401);
  CHECK(Get(admin, "/", http::verb::get, "Bearer s3cret").status == 401);
  CHECK(Get(admin, "/", http::verb::get, "s3cret-admin").status == 401);
  const Reply metrics =
      Get(admin, "/metrics", http::verb::get, "Bearer s3cret-admin");
  CHECK(metrics.status == 200);
  CHECK(metrics.body.find("rdmarpc_") != std::string::npos);
  CHECK(Get(admin, "/healthz").status == 200);  // Probes carry no secret.
  // A token others may read is refused, naming the file.
  std::filesystem::permissions(path, std::filesystem::perms::others_read,
                               std::filesystem::perm_options::add);
  auto refused =
      rpc::ClientAdmin::Start("http://127.0.0.1:0?token_file=" + path);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kFailedPrecondition);
  CHECK(refused.status().message().find(path) != std::string::npos);
  std::filesystem::remove(path);
}

// GET `target` over HTTPS, trusting `ca_file`: the status, or -1 if the
// TLS handshake fails (an untrusted certificate).
int HttpsGet(const std::string& uri, const std::string& target,
             const std::string& ca_file, const std::string& authorization) {
  asio::io_context context;
  asio::ssl::context tls(asio::ssl::context::tls_client);
  tls.load_verify_file(ca_file);
  tls.set_verify_mode(asio::ssl::verify_peer);
  beast::ssl_stream<beast::tcp_stream> stream(context, tls);
  beast::get_lowest_layer(stream).connect(EndpointOf(uri));
  beast::error_code error;
  stream.handshake(asio::ssl::stream_base::client, error);
  if (error) return -1;
  return Exchange(stream, http::verb::get, target, authorization).status;
}

TEST_CASE("admin: https:// serves the pages over TLS, with the token") {
  testing::TempDir dir;
  testing::TestPki pki(dir.path());
  const testing::IssuedCert cert =
      pki.Issue("admin", {"IP:127.0.0.1"}, "admin");
  const std::string token = dir.path() + "/token";
  {
    std::ofstream out(token);
    out << "t0ken\n";
  }
  std::filesystem::permissions(token, std::filesystem::perms::owner_read);
  auto admin = rpc::ClientAdmin::Start(
      "https://127.0.0.1:0?cert_file=" + cert.cert_file +
      "&key_file=" + cert.key_file + "&token_file=" + token);
  INFO(admin.status().ToString());
  REQUIRE(admin.ok());
  const std::string uri = (*admin)->uri();
  REQUIRE(uri.rfind("https://127.0.0.1:", 0) == 0);
  CHECK(HttpsGet(uri, "/metrics", pki.ca_file(), "Bearer t0ken") == 200);
  CHECK(HttpsGet(uri, "/metrics", pki.ca_file(), "") == 401);
  CHECK(HttpsGet(uri, "/healthz", pki.ca_file(), "") == 200);
  // Plain HTTP to it is not served; a client of another CA is refused.
  CHECK(RawStatus(uri, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") == -1);
  testing::TestPki other(dir.path(), "other");
  CHECK(HttpsGet(uri, "/healthz", other.ca_file(), "") == -1);
  // Without a key, or with one others may read: refused, naming why.
  CHECK(
      rpc::ClientAdmin::Start("https://127.0.0.1:0?cert_file=" + cert.cert_file)
          .status()
          .code() == StatusCode::kInvalidArgument);
  std::filesystem::permissions(cert.key_file,
                               std::filesystem::perms::others_read,
                               std::filesystem::perm_options::add);
  auto readable = rpc::ClientAdmin::Start(
      "https://127.0.0.1:0?cert_file=" + cert.cert_file +
      "&key_file=" + cert.key_file);
  CHECK(readable.status().code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("admin: ServerOptions::admin_listen opens the same endpoint") {
  rpc::ServerOptions options;
  options.admin_listen = "http://127.0.0.1:0";
  rpc::Server server(options);
  TestService service;
  server.RegisterService(&service);
  REQUIRE(server.Listen(ListenUri()).ok());
  const std::string admin = server.admin_uri();
  REQUIRE(admin.rfind("http://127.0.0.1:", 0) == 0);
  CHECK(Get(admin, "/healthz").status == 200);
  const Reply metrics = Get(admin, "/metrics");
  CHECK(metrics.status == 200);
  CHECK(metrics.body.find("rdmarpc_server_") != std::string::npos);
  options.admin_listen = "ftp://127.0.0.1:0";
  rpc::Server bad(options);
  const StatusOr<std::string> bound = bad.Listen(ListenUri());
  REQUIRE(!bound.ok());
  CHECK(bound.status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rdmarpc::testing
