// Naming against a real etcd (tests/support/etcd_process.h): the etcd client
// over the HTTP/JSON gateway, registration with a lease, and the etcd:// and
// list:// resolvers.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <catch2/catch_test_macros.hpp>
#include <future>
#include <mutex>
#include <thread>

#include "naming/etcd_client.h"
#include "naming/registration.h"
#include "naming/resolver.h"
#include "tests/support/etcd_process.h"
#include "tests/support/naming_support.h"
#include "tests/support/test_support.h"

namespace rdmarpc {
namespace {

namespace asio = boost::asio;
using naming::EtcdClient;
using testing::Client;
using testing::EtcdProcess;
using testing::Loop;
using testing::Wait;
using testing::Watcher;
using namespace std::chrono_literals;
using Endpoints = std::vector<std::string>;

TEST_CASE("targets and prefixes parse") {
  CHECK(naming::PrefixRangeEnd("/a/") == "/a0");
  CHECK(naming::PrefixRangeEnd(std::string("a\xff", 2)) == "b");
  CHECK(naming::PrefixRangeEnd("") == std::string(1, '\0'));
  auto target = naming::ParseEtcdTarget("etcd://h1:1,h2:2/services/kv/");
  REQUIRE(target.ok());
  CHECK(target->endpoints == "h1:1,h2:2");
  CHECK(target->prefix == "/services/kv");
  CHECK(naming::ParseEtcdTarget("etcd://h1:1").status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(naming::IsClusterTarget("list://a:1"));
  CHECK(naming::IsClusterTarget("etcd://a:1/p"));
  CHECK_FALSE(naming::IsClusterTarget("tcp://a:1"));
  Loop loop;
  for (const char* bad : {"list://", "list://a", "list://a:1,b", "etcd://a:1",
                          "tcp://a:1", "etcd:///p"}) {
    INFO(bad);
    CHECK(naming::MakeResolver(bad, loop.context.get_executor())
              .status()
              .code() == StatusCode::kInvalidArgument);
  }
  CHECK(EtcdClient::Create(loop.context.get_executor(), "a:1,b")
            .status()
            .code() == StatusCode::kInvalidArgument);
}

TEST_CASE("list:// gives its endpoints, bare ones with the default scheme") {
  Loop loop;
  naming::ResolverOptions options;
  options.default_scheme = "tcp";
  auto resolver = naming::MakeResolver("list://b:2,rdma://a:1,b:2",
                                       loop.context.get_executor(), options);
  REQUIRE(resolver.ok());
  Watcher watcher;
  (*resolver)->Start(watcher.Callback());
  CHECK(watcher.WaitFor({"rdma://a:1", "tcp://b:2"}));
  (*resolver)->Stop();
}

TEST_CASE("the etcd client puts, lists, deletes and runs leases") {
  EtcdProcess etcd;
  Loop loop;
  auto client = Client(loop, etcd.endpoint());
  for (const char* key : {"/s/a", "/s/b", "/t/c"}) {
    auto put = Wait<naming::etcd::PutResponse>([&](auto done) {
      client->Put(key, std::string("v") + key, 0, std::move(done));
    });
    REQUIRE(put.ok());
  }
  auto range = Wait<naming::etcd::RangeResponse>(
      [&](auto done) { client->Range("/s/", std::move(done)); });
  REQUIRE(range.ok());
  REQUIRE(range->kvs_size() == 2);
  CHECK(range->kvs(0).key() == "/s/a");
  CHECK(range->kvs(1).value() == "v/s/b");
  CHECK(range->header().revision() >= 3);

  auto lease = Wait<naming::etcd::LeaseGrantResponse>(
      [&](auto done) { client->GrantLease(30, std::move(done)); });
  REQUIRE(lease.ok());
  CHECK(lease->ttl() == 30);
  REQUIRE(Wait<naming::etcd::PutResponse>([&](auto done) {
            client->Put("/s/leased", "x", lease->id(), std::move(done));
          }).ok());
  auto kept = Wait<naming::etcd::LeaseKeepAliveResponse>(
      [&](auto done) { client->KeepAlive(lease->id(), std::move(done)); });
  REQUIRE(kept.ok());
  CHECK(kept->ttl() == 30);
  REQUIRE(Wait<naming::etcd::LeaseRevokeResponse>([&](auto done) {
            client->RevokeLease(lease->id(), std::move(done));
          }).ok());
  range = Wait<naming::etcd::RangeResponse>(
      [&](auto done) { client->Range("/s/", std::move(done)); });
  REQUIRE(range.ok());
  CHECK(range->kvs_size() == 2);  // The leased key went with its lease.

  // etcd's own errors come back with their code.
  auto revoked = Wait<naming::etcd::LeaseRevokeResponse>(
      [&](auto done) { client->RevokeLease(lease->id(), std::move(done)); });
  CHECK(revoked.status().code() == StatusCode::kNotFound);
  auto expired = Wait<naming::etcd::LeaseKeepAliveResponse>(
      [&](auto done) { client->KeepAlive(lease->id(), std::move(done)); });
  CHECK((!expired.ok() || expired->ttl() <= 0));

  REQUIRE(Wait<naming::etcd::DeleteRangeResponse>([&](auto done) {
            client->Delete("/s/a", std::move(done));
          })->deleted() == 1);
}

TEST_CASE("the etcd client moves past a member that is down") {
  EtcdProcess etcd;
  EtcdProcess down;
  const std::string dead = down.endpoint();
  down.Stop(SIGKILL);
  Loop loop;
  naming::EtcdOptions options;
  options.request_timeout = 1s;
  auto client = Client(loop, dead + "," + etcd.endpoint(), options);
  auto range = Wait<naming::etcd::RangeResponse>(
      [&](auto done) { client->Range("/", std::move(done)); });
  CHECK(range.ok());

  auto nobody = Client(loop, dead, options);
  range = Wait<naming::etcd::RangeResponse>(
      [&](auto done) { nobody->Range("/", std::move(done)); });
  CHECK(range.status().code() == StatusCode::kUnavailable);
  CHECK(range.status().message().find(dead) != std::string::npos);
}

TEST_CASE("an etcd:// resolver follows registrations, stops and crashes") {
  EtcdProcess etcd;
  Loop loop;
  const std::string target = "etcd://" + etcd.endpoint() + "/services/kv";
  auto resolver = naming::MakeResolver(target, loop.context.get_executor());
  REQUIRE(resolver.ok());
  Watcher watcher;
  (*resolver)->Start(watcher.Callback());
  CHECK(watcher.WaitFor({}));  // Known, and empty.

  naming::RegistrationOptions options;
  options.ttl = 2s;
  auto a = naming::Registration::Start(loop.context.get_executor(), target,
                                       "tcp://10.0.0.1:1", options);
  auto b = naming::Registration::Start(loop.context.get_executor(), target,
                                       "rdma://10.0.0.2:2", options);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(watcher.WaitFor({"rdma://10.0.0.2:2", "tcp://10.0.0.1:1"}));
  // The watch may report the key before the registration hears etcd's
  // answer to its put.
  CHECK(testing::WaitFor([&] { return (*a)->registered(); }));
  CHECK((*a)->key() == "/services/kv/tcp://10.0.0.1:1");

  // A graceful stop deregisters at once.
  const auto stop = std::chrono::steady_clock::now();
  CHECK((*a)->Stop().ok());
  // Goal: at once. Bound: generous, for sanitizers and loaded machines.
  CHECK(watcher.WaitFor({"rdma://10.0.0.2:2"}, 3s));
  CHECK(std::chrono::steady_clock::now() - stop < 3s);

  // The lease keeps b listed past its TTL.
  std::this_thread::sleep_for(3s);
  CHECK(watcher.WaitFor({"rdma://10.0.0.2:2"}, 0s));
  CHECK((*b)->stats().renewals >= 2);

  // A crash: a lease nobody renews; etcd drops the key within its TTL.
  auto client = Client(loop, etcd.endpoint());
  auto lease = Wait<naming::etcd::LeaseGrantResponse>(
      [&](auto done) { client->GrantLease(1, std::move(done)); });
  REQUIRE(lease.ok());
  REQUIRE(Wait<naming::etcd::PutResponse>([&](auto done) {
            client->Put("/services/kv/tcp://10.0.0.3:3", "tcp://10.0.0.3:3",
                        lease->id(), std::move(done));
          }).ok());
  CHECK(watcher.WaitFor({"rdma://10.0.0.2:2", "tcp://10.0.0.3:3"}));
  CHECK(watcher.WaitFor({"rdma://10.0.0.2:2"}, 4s));

  // A value that is not a URI is ignored, and the rest stands.
  REQUIRE(Wait<naming::etcd::PutResponse>([&](auto done) {
            client->Put("/services/kv/junk", "not a uri", 0, std::move(done));
          }).ok());
  REQUIRE(Wait<naming::etcd::PutResponse>([&](auto done) {
            client->Put("/services/kv2/x", "tcp://10.0.0.9:9", 0,
                        std::move(done));
          }).ok());
  REQUIRE(Wait<naming::etcd::PutResponse>([&](auto done) {
            client->Put("/services/kv/c", "tcp://10.0.0.4:4", 0,
                        std::move(done));
          }).ok());
  CHECK(watcher.WaitFor({"rdma://10.0.0.2:2", "tcp://10.0.0.4:4"}));
  (*resolver)->Stop();
}

TEST_CASE("an etcd:// resolver keeps its set through an etcd restart") {
  EtcdProcess etcd;
  Loop loop;
  const std::string target = "etcd://" + etcd.endpoint() + "/svc";
  naming::ResolverOptions options;
  options.etcd_retry = 200ms;
  options.etcd.request_timeout = 500ms;
  auto resolver =
      naming::MakeResolver(target, loop.context.get_executor(), options);
  REQUIRE(resolver.ok());
  auto client = Client(loop, etcd.endpoint());
  REQUIRE(Wait<naming::etcd::PutResponse>([&](auto done) {
            client->Put("/svc/a", "tcp://10.0.0.1:1", 0, std::move(done));
          }).ok());
  Watcher watcher;
  (*resolver)->Start(watcher.Callback());
  CHECK(watcher.WaitFor({"tcp://10.0.0.1:1"}));
  const size_t updates = watcher.updates();

  etcd.Stop(SIGKILL);
  std::this_thread::sleep_for(1500ms);  // Several failed retries.
  CHECK(watcher.updates() == updates);  // The set stood.
  CHECK(watcher.errors() == 0);
  etcd.Restart();
  REQUIRE(Wait<naming::etcd::PutResponse>([&](auto done) {
            client->Put("/svc/b", "tcp://10.0.0.2:2", 0, std::move(done));
          }).ok());
  CHECK(watcher.WaitFor({"tcp://10.0.0.1:1", "tcp://10.0.0.2:2"}));
  (*resolver)->Stop();
}

TEST_CASE("an etcd:// resolver lists again when its revision is compacted") {
  EtcdProcess etcd;
  Loop loop;
  const std::string target = "etcd://" + etcd.endpoint() + "/svc";
  naming::ResolverOptions options;
  // Time to change and compact before it resumes (3 s proved too short once
  // in five runs here).
  options.etcd_retry = 8s;
  auto resolver =
      naming::MakeResolver(target, loop.context.get_executor(), options);
  REQUIRE(resolver.ok());
  Watcher watcher;
  (*resolver)->Start(watcher.Callback());
  CHECK(watcher.WaitFor({}));
  testing::LogCapture log;
  etcd.Restart();  // The watch is lost; the resolver resumes in 8 s.
  auto client = Client(loop, etcd.endpoint());
  for (const char* key : {"/svc/a", "/svc/b"}) {
    REQUIRE(Wait<naming::etcd::PutResponse>([&](auto done) {
              client->Put(key,
                          std::string("tcp://h:") +
                              (key + 5 == std::string("a") ? "1" : "2"),
                          0, std::move(done));
            }).ok());
  }
  REQUIRE(Wait<naming::etcd::DeleteRangeResponse>([&](auto done) {
            client->Delete("/svc/a", std::move(done));
          }).ok());
  etcd.Compact();
  CHECK(watcher.WaitFor({"tcp://h:2"}));
  CHECK(log.Contains("compacted away"));
  (*resolver)->Stop();
}

// While etcd is down, another process (tests run in parallel) may hold its
// port, if only as a connection's local port; etcd then exits at start.
// Restart waits for the port rather than failing the test that restarts it.
// The holder listens (SO_REUSEADDR, as etcd's own connections to itself
// leave the port in TIME_WAIT when it is killed): Restart must not take its
// accepting connections for etcd serving.
TEST_CASE("a restarted etcd waits for its port to come free") {
  EtcdProcess etcd;
  const std::string endpoint = etcd.endpoint();
  const int port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  etcd.Stop(SIGKILL);
  const int holder = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(holder >= 0);
  const int on = 1;
  REQUIRE(setsockopt(holder, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) == 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  REQUIRE(bind(holder, reinterpret_cast<sockaddr*>(&address), sizeof address) ==
          0);
  REQUIRE(listen(holder, 16) == 0);
  std::thread release([holder] {
    std::this_thread::sleep_for(1s);
    close(holder);
  });
  CHECK_NOTHROW(etcd.Restart());
  release.join();
  // Restart returns once etcd serves: it listens well before it has
  // elected itself leader (1.3-1.7 s later here), and a request sent in
  // between waits for the election, longer than this client's 1 s.
  Loop loop;
  naming::EtcdOptions options;
  options.request_timeout = 1s;
  auto client = Client(loop, etcd.endpoint(), options);
  auto range = Wait<naming::etcd::RangeResponse>(
      [&](auto done) { client->Range("/", std::move(done)); });
  INFO(range.status().ToString());
  CHECK(range.ok());
}

TEST_CASE("a registration comes back after etcd lost it") {
  EtcdProcess etcd;
  Loop loop;
  const std::string target = "etcd://" + etcd.endpoint() + "/svc";
  naming::RegistrationOptions options;
  options.ttl = 1s;
  options.etcd.request_timeout = 500ms;
  auto registration = naming::Registration::Start(
      loop.context.get_executor(), target, "tcp://10.0.0.1:1", options);
  REQUIRE(registration.ok());
  auto resolver = naming::MakeResolver(target, loop.context.get_executor());
  REQUIRE(resolver.ok());
  Watcher watcher;
  (*resolver)->Start(watcher.Callback());
  CHECK(watcher.WaitFor({"tcp://10.0.0.1:1"}));
  // Down for longer than the lease's TTL: once etcd is back, the key is
  // there (its lease renewed, or a new one granted if it expired).
  etcd.Stop(SIGKILL);
  std::this_thread::sleep_for(2s);
  etcd.Restart();
  auto client = Client(loop, etcd.endpoint());
  CHECK(testing::WaitFor([&] {
    auto range = Wait<naming::etcd::RangeResponse>(
        [&](auto done) { client->Range("/svc/", std::move(done)); });
    return range.ok() && range->kvs_size() == 1 &&
           (*registration)->registered();
  }));
  CHECK(watcher.WaitFor({"tcp://10.0.0.1:1"}));
  CHECK((*registration)->stats().failures >= 1);
  (*resolver)->Stop();
}

}  // namespace
}  // namespace rdmarpc

namespace rdmarpc {
namespace {

TEST_CASE("a dns:// resolver follows a name's addresses") {
  testing::DnsmasqProcess dns;
  dns.Set("127.0.0.2 svc.test\n127.0.0.3 svc.test\n");
  Loop loop;
  naming::ResolverOptions options;
  options.default_scheme = "tcp";
  options.dns_refresh = 200ms;
  auto resolver =
      naming::MakeResolver("dns://" + dns.server() + "/svc.test:7000",
                           loop.context.get_executor(), options);
  REQUIRE(resolver.ok());
  Watcher watcher;
  (*resolver)->Start(watcher.Callback());
  CHECK(watcher.WaitFor({"tcp://127.0.0.2:7000", "tcp://127.0.0.3:7000"}));
  // Re-resolved every dns_refresh.
  dns.Set("127.0.0.3 svc.test\n127.0.0.4 svc.test\n");
  CHECK(watcher.WaitFor({"tcp://127.0.0.3:7000", "tcp://127.0.0.4:7000"}));
  (*resolver)->Stop();

  // With a long refresh, Refresh() resolves again at once.
  options.dns_refresh = 1h;
  auto slow = naming::MakeResolver("dns://" + dns.server() + "/svc.test:7000",
                                   loop.context.get_executor(), options);
  REQUIRE(slow.ok());
  Watcher second;
  (*slow)->Start(second.Callback());
  CHECK(second.WaitFor({"tcp://127.0.0.3:7000", "tcp://127.0.0.4:7000"}));
  dns.Set("127.0.0.5 svc.test\n");
  std::this_thread::sleep_for(100ms);
  (*slow)->Refresh();
  CHECK(second.WaitFor({"tcp://127.0.0.5:7000"}, 2s));
  (*slow)->Stop();
}

TEST_CASE("a dns:// resolver reports a name that does not resolve") {
  testing::DnsmasqProcess dns;
  Loop loop;
  auto resolver =
      naming::MakeResolver("dns://" + dns.server() + "/nosuch.test:7000",
                           loop.context.get_executor());
  REQUIRE(resolver.ok());
  Watcher watcher;
  (*resolver)->Start(watcher.Callback());
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (watcher.errors() == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(10ms);
  }
  CHECK(watcher.errors() >= 1);
  CHECK(watcher.updates() == 0);
  (*resolver)->Stop();
  for (const char* bad :
       {"dns://", "dns://x", "dns:///name", "dns:///name:", "dns:///:1",
        "dns:///name:port", "dns://notaport/name:1"}) {
    INFO(bad);
    CHECK(naming::MakeResolver(bad, loop.context.get_executor())
              .status()
              .code() == StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace rdmarpc
