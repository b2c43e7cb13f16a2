// The etcd client against an etcd that wants credentials: TLS with client
// certificates (etcd's --cert-file, --client-cert-auth), and etcd's user
// authentication (etcdctl auth enable), each refusal named.
#include <catch2/catch_test_macros.hpp>
#include <string>

#include "naming/etcd_client.h"
#include "naming/registration.h"
#include "naming/resolver.h"
#include "tests/support/etcd_process.h"
#include "tests/support/naming_support.h"
#include "tests/support/test_pki.h"
#include "tests/support/test_support.h"

namespace rdmarpc {
namespace {

using naming::EtcdClient;
using naming::etcd::PutResponse;
using naming::etcd::RangeResponse;
using testing::Client;
using testing::EtcdProcess;
using testing::IssuedCert;
using testing::Loop;
using testing::TestPki;
using testing::Wait;
using testing::Watcher;
using namespace std::chrono_literals;

Status Put(EtcdClient& client, const std::string& key) {
  return Wait<PutResponse>([&](auto done) {
           client.Put(key, "tcp://10.0.0.1:1", 0, std::move(done));
         })
      .status();
}

StatusOr<RangeResponse> Range(EtcdClient& client, const std::string& prefix) {
  return Wait<RangeResponse>(
      [&](auto done) { client.Range(prefix, std::move(done)); });
}

bool Contains(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

// etcd over TLS on 127.0.0.1, wanting a client certificate of its CA.
struct TlsEtcd {
  TlsEtcd() {
    server = pki.Issue("etcd", {"IP:127.0.0.1"}, "etcd");
    client = pki.Issue("naming", {"DNS:naming"}, "client");
    stranger = other_pki.Issue("naming", {"DNS:naming"}, "stranger");
    nameless = pki.Issue("", {"URI:spiffe://test/naming"}, "nameless");
  }
  // The client's options: trusting the CA, with its certificate.
  EtcdOptions Options() const {
    EtcdOptions options;
    options.request_timeout = 5s;
    options.tls.ca_file = pki.ca_file();
    options.tls.cert_file = client.cert_file;
    options.tls.key_file = client.key_file;
    return options;
  }
  testing::TempDir dir;
  TestPki pki{dir.path(), "etcd-ca"};
  TestPki other_pki{dir.path(), "other-ca"};
  IssuedCert server, client, stranger;
  IssuedCert nameless;  // No CommonName: what etcd's gateway wants with users.
};

TEST_CASE("the etcd client speaks TLS with a client certificate") {
  TlsEtcd certs;
  EtcdProcess etcd({.cert_file = certs.server.cert_file,
                    .key_file = certs.server.key_file,
                    .client_ca_file = certs.pki.ca_file(),
                    .ctl_ca_file = certs.pki.ca_file(),
                    .ctl_cert_file = certs.client.cert_file,
                    .ctl_key_file = certs.client.key_file});
  Loop loop;

  SECTION("with its certificate: requests, a watch, a resolver") {
    auto client = Client(loop, "https://" + etcd.endpoint(), certs.Options());
    REQUIRE(Put(*client, "/services/kv/a").ok());
    auto range = Range(*client, "/services/kv/");
    REQUIRE(range.ok());
    CHECK(range->kvs_size() == 1);

    // etcd:// with TLS options: its endpoints are reached over TLS.
    naming::ResolverOptions options;
    options.etcd = certs.Options();
    const std::string target = "etcd://" + etcd.endpoint() + "/services/kv";
    auto resolver =
        naming::MakeResolver(target, loop.context.get_executor(), options);
    REQUIRE(resolver.ok());
    Watcher watcher;
    (*resolver)->Start(watcher.Callback());
    CHECK(watcher.WaitFor({"tcp://10.0.0.1:1"}));
    naming::RegistrationOptions registering;
    registering.etcd = certs.Options();
    auto registration = naming::Registration::Start(
        loop.context.get_executor(), target, "rdma://10.0.0.2:2", registering);
    REQUIRE(registration.ok());
    CHECK(watcher.WaitFor({"rdma://10.0.0.2:2", "tcp://10.0.0.1:1"}));
    CHECK((*registration)->Stop().ok());
    CHECK(watcher.WaitFor({"tcp://10.0.0.1:1"}));
    (*resolver)->Stop();
  }

  SECTION("without a client certificate: refused by etcd") {
    EtcdOptions options = certs.Options();
    options.tls.cert_file.clear();
    options.tls.key_file.clear();
    auto range = Range(*Client(loop, etcd.endpoint(), options), "/");
    INFO(range.status().message());
    CHECK(range.status().code() == StatusCode::kUnavailable);
    // etcd's alert, or the hint when the reset came before it was read.
    CHECK((Contains(range.status(), "alert") ||
           Contains(range.status(), "may have refused this client's")));
  }

  SECTION("a certificate of another CA: refused by etcd") {
    EtcdOptions options = certs.Options();
    options.tls.cert_file = certs.stranger.cert_file;
    options.tls.key_file = certs.stranger.key_file;
    auto range = Range(*Client(loop, etcd.endpoint(), options), "/");
    INFO(range.status().message());
    CHECK(range.status().code() == StatusCode::kUnavailable);
    // etcd's alert, or the hint when the reset came before it was read.
    CHECK((Contains(range.status(), "alert") ||
           Contains(range.status(), "may have refused this client's")));
  }

  SECTION("trusting another CA: etcd's certificate refused") {
    EtcdOptions options = certs.Options();
    options.tls.ca_file = certs.other_pki.ca_file();
    auto range = Range(*Client(loop, etcd.endpoint(), options), "/");
    CHECK(range.status().code() == StatusCode::kUnavailable);
    INFO(range.status().message());
    CHECK(Contains(range.status(), "the member's certificate is refused"));
  }

  SECTION("a certificate for another name: refused") {
    EtcdOptions options = certs.Options();
    options.tls.server_name = "etcd.example";
    auto range = Range(*Client(loop, etcd.endpoint(), options), "/");
    INFO(range.status().message());
    CHECK(Contains(range.status(), "hostname mismatch"));
  }

  SECTION("plaintext to a TLS member: no answer taken") {
    auto range = Range(*Client(loop, etcd.endpoint()), "/");
    INFO(range.status().message());
    CHECK(range.status().code() == StatusCode::kUnavailable);
    CHECK(Contains(range.status(), "does the member want TLS?"));
  }

  SECTION("TLS is never mixed with plaintext, and needs its CA") {
    auto mixed =
        EtcdClient::Create(loop.context.get_executor(),
                           "http://" + etcd.endpoint(), certs.Options());
    CHECK(mixed.status().code() == StatusCode::kInvalidArgument);
    auto no_ca = EtcdClient::Create(loop.context.get_executor(),
                                    "https://" + etcd.endpoint());
    CHECK(no_ca.status().code() == StatusCode::kInvalidArgument);
    CHECK(Contains(no_ca.status(), "ca_file"));
  }
}

// Users: root, and "app", who may read and write under /services/ only.
void AddUsers(EtcdProcess& etcd) {
  etcd.EnableAuth("root-secret");
  etcd.Ctl("user add app --new-user-password=app-secret");
  etcd.Ctl("role add app");
  etcd.Ctl("role grant-permission app --prefix=true readwrite /services/");
  etcd.Ctl("user grant-role app app");
}

TEST_CASE("the etcd client authenticates as an etcd user over TLS") {
  TlsEtcd certs;
  EtcdProcess etcd({.cert_file = certs.server.cert_file,
                    .key_file = certs.server.key_file,
                    .client_ca_file = certs.pki.ca_file(),
                    .ctl_ca_file = certs.pki.ca_file(),
                    .ctl_cert_file = certs.client.cert_file,
                    .ctl_key_file = certs.client.key_file});
  AddUsers(etcd);
  Loop loop;
  EtcdOptions options = certs.Options();
  options.user = "app";
  options.password = "app-secret";
  // etcd 3.4 refuses a gateway request whose client certificate carries a
  // CommonName once users are on (the name would not be the user).
  auto named = Range(*Client(loop, etcd.endpoint(), options), "/services/");
  INFO(named.status().message());
  CHECK(Contains(named.status(), "CommonName of client"));
  options.tls.cert_file = certs.nameless.cert_file;
  options.tls.key_file = certs.nameless.key_file;
  auto client = Client(loop, etcd.endpoint(), options);
  REQUIRE(Put(*client, "/services/kv/a").ok());
  CHECK(Put(*client, "/other").code() == StatusCode::kPermissionDenied);
  auto range = Range(*client, "/services/kv/");
  REQUIRE(range.ok());
  CHECK(range->kvs_size() == 1);
}

TEST_CASE("the etcd client authenticates as an etcd user") {
  EtcdProcess etcd;
  AddUsers(etcd);
  Loop loop;
  EtcdOptions options;
  options.user = "app";
  options.password = "app-secret";

  SECTION("its requests, a lease and a watch carry its token") {
    auto client = Client(loop, etcd.endpoint(), options);
    REQUIRE(Put(*client, "/services/kv/a").ok());
    auto range = Range(*client, "/services/kv/");
    REQUIRE(range.ok());
    CHECK(range->kvs_size() == 1);
    // Outside its permission: etcd's PERMISSION_DENIED.
    CHECK(Put(*client, "/other").code() == StatusCode::kPermissionDenied);

    naming::ResolverOptions resolving;
    resolving.etcd = options;
    const std::string target = "etcd://" + etcd.endpoint() + "/services/kv";
    auto resolver =
        naming::MakeResolver(target, loop.context.get_executor(), resolving);
    REQUIRE(resolver.ok());
    Watcher watcher;
    (*resolver)->Start(watcher.Callback());
    CHECK(watcher.WaitFor({"tcp://10.0.0.1:1"}));
    naming::RegistrationOptions registering;
    registering.ttl = 2s;
    registering.etcd = options;
    auto registration = naming::Registration::Start(
        loop.context.get_executor(), target, "rdma://10.0.0.2:2", registering);
    REQUIRE(registration.ok());
    CHECK(watcher.WaitFor({"rdma://10.0.0.2:2", "tcp://10.0.0.1:1"}));
    std::this_thread::sleep_for(3s);  // Past the TTL: renewed with the token.
    CHECK(watcher.WaitFor({"rdma://10.0.0.2:2", "tcp://10.0.0.1:1"}, 0s));
    CHECK((*registration)->stats().renewals >= 2);
    CHECK((*registration)->Stop().ok());
    CHECK(watcher.WaitFor({"tcp://10.0.0.1:1"}));
    (*resolver)->Stop();
  }

  SECTION("a token etcd forgot is replaced") {
    auto client = Client(loop, etcd.endpoint(), options);
    REQUIRE(Put(*client, "/services/kv/a").ok());
    // Simple tokens live in etcd's memory: a restart forgets them, and the
    // next request's token is refused as invalid.
    etcd.Restart();
    CHECK(Range(*client, "/services/kv/").ok());
  }

  SECTION("a wrong password, or no user, is refused") {
    EtcdOptions wrong = options;
    wrong.password = "guess";
    auto refused = Range(*Client(loop, etcd.endpoint(), wrong), "/services/");
    INFO(refused.status().message());
    CHECK_FALSE(refused.ok());
    CHECK(Contains(refused.status(), "did not authenticate \"app\""));
    CHECK(Contains(refused.status(), "authentication failed"));
    auto anonymous = Range(*Client(loop, etcd.endpoint()), "/services/");
    INFO(anonymous.status().message());
    CHECK_FALSE(anonymous.ok());
  }
}

}  // namespace
}  // namespace rdmarpc
