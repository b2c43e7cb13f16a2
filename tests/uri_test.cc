// Transport URIs and their options (transport/uri.h,
// transport/factory/factory.h): parsing, and what the factory refuses before
// any transport runs (so these need no RDMA device).
#include "transport/uri.h"

#include <catch2/catch_test_macros.hpp>
#include <future>

#include "rpc/common/event_loop.h"
#include "transport/factory/factory.h"

namespace rdmarpc::transport {
namespace {

TEST_CASE("uri: options after '?' are parsed in order and printed back") {
  auto uri = ParseUri("rdma://10.0.0.2:4000?device=rxe1&gid_index=1&tos=104");
  REQUIRE(uri.ok());
  CHECK(uri->scheme == "rdma");
  CHECK(uri->host == "10.0.0.2");
  CHECK(uri->port == 4000);
  using Param = std::pair<std::string, std::string>;
  CHECK(uri->params == std::vector<Param>{{"device", "rxe1"},
                                          {"gid_index", "1"},
                                          {"tos", "104"}});
  CHECK(uri->ToString() ==
        "rdma://10.0.0.2:4000?device=rxe1&gid_index=1&tos=104");
  auto v6 = ParseUri("rdma://[fe80::1]:7?device=mlx5_0");
  REQUIRE(v6.ok());
  CHECK(v6->host == "fe80::1");
  CHECK(v6->params == std::vector<Param>{{"device", "mlx5_0"}});
  auto plain = ParseUri("tcp://127.0.0.1:1");
  REQUIRE(plain.ok());
  CHECK(plain->params.empty());
  CHECK(plain->ToString() == "tcp://127.0.0.1:1");
}

TEST_CASE("uri: malformed options are refused, naming the fault") {
  for (const char* bad :
       {"rdma://h:1?device", "rdma://h:1?=x", "rdma://h:1?a=1&a=2",
        "rdma://h:1?a=1&", "rdma://h:1?"}) {
    auto uri = ParseUri(bad);
    INFO(bad);
    REQUIRE(!uri.ok());
    CHECK(uri.status().code() == StatusCode::kInvalidArgument);
  }
  CHECK(ParseUri("rdma://h:1?a=1&a=2")
            .status()
            .message()
            .find("option 'a' twice") != std::string::npos);
}

// What Connect answers for `uri`.
Status ConnectStatus(const std::string& uri) {
  rpc::EventLoop loop;
  std::promise<Status> done;
  Connect(loop.context(), uri, TransportOptions{},
          [&](StatusOr<std::shared_ptr<Connection>> c) {
            done.set_value(c.status());
          });
  return done.get_future().get();
}

TEST_CASE("uri: the factory checks options before connecting") {
  const Status tcp = ConnectStatus("tcp://127.0.0.1:1?tos=3");
  CHECK(tcp.code() == StatusCode::kInvalidArgument);
  CHECK(tcp.message().find("tcp:// takes no options") != std::string::npos);

  const Status unknown = ConnectStatus("rdma://127.0.0.1:1?colour=blue");
  CHECK(unknown.code() == StatusCode::kInvalidArgument);
  CHECK(unknown.message().find("unknown option 'colour'") != std::string::npos);

  for (const char* bad :
       {"rdma://127.0.0.1:1?tos=256", "rdma://127.0.0.1:1?tos=-1",
        "rdma://127.0.0.1:1?retry_count=8", "rdma://127.0.0.1:1?timeout=0",
        "rdma://127.0.0.1:1?port_num=x", "rdma://127.0.0.1:1?device="}) {
    INFO(bad);
    const Status status = ConnectStatus(bad);
    CHECK(status.code() == StatusCode::kInvalidArgument);
  }
  CHECK(ConnectStatus("rdma://127.0.0.1:1?tos=256")
            .message()
            .find("tos=256 is not a number from 0 to 255") !=
        std::string::npos);

  const Status orphan = ConnectStatus("rdma://127.0.0.1:1?gid_index=1");
  CHECK(orphan.code() == StatusCode::kInvalidArgument);
  CHECK(orphan.message().find("gid_index needs device=") != std::string::npos);

  const Status mtu = ConnectStatus("rdma://127.0.0.1:1?mtu=4096");
  CHECK(mtu.code() == StatusCode::kInvalidArgument);
  CHECK(mtu.message().find("ip link set DEV mtu") != std::string::npos);
}

}  // namespace
}  // namespace rdmarpc::transport
