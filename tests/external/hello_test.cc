// A user's test: a generated service and stub from this workspace's own
// .proto, linked against @rdmarpc, making real calls over loopback TCP.
#include <boost/asio/use_future.hpp>
#include <cstdio>
#include <memory>

#include "greeter_impl.h"
#include "rdmarpc/rdmarpc.h"

namespace {

int failures = 0;

void Expect(bool ok, const char* what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what);
  if (!ok) ++failures;
}

}  // namespace

int main() {
  GreeterImpl impl;
  rdmarpc::ServerOptions options;
  // The admin endpoint registers itself when linked in: a static link
  // (CMake's rdmarpc::rdmarpc_static) keeps it too.
  options.admin_listen = "http://127.0.0.1:0";
  rdmarpc::Server server(options);
  server.RegisterService(&impl);
  auto uri = server.Listen("tcp://127.0.0.1:0");
  Expect(uri.ok(), "the server listens");
  if (!uri.ok()) return 1;
  Expect(server.admin_uri().rfind("http://127.0.0.1:", 0) == 0,
         "the server opens its admin endpoint");

  auto channel = std::make_shared<rdmarpc::Channel>(*uri);
  hello::Greeter::Stub stub(channel);
  hello::HelloRequest request;
  request.set_name("bazel");
  auto [status, reply] =
      stub.async_Hello(request, boost::asio::use_future).get();
  Expect(status.ok(), "Hello returns OK");
  Expect(reply.text() == "hello, bazel", "Hello's reply is \"hello, bazel\"");

  // A method this server does not serve: a clear status, not a hang.
  constexpr rdmarpc::MethodRef kMissing("hello.Greeter", "Missing");
  std::promise<rdmarpc::Status> missing;
  channel->Call(
      kMissing, rdmarpc::Buffer(), {},
      [&](const rdmarpc::Status& s, rdmarpc::Buffer) { missing.set_value(s); });
  Expect(
      missing.get_future().get().code() == rdmarpc::StatusCode::kUnimplemented,
      "an unknown method is UNIMPLEMENTED");

  // A client's own admin endpoint (rdmarpc/admin.h), on a port it picks.
  auto admin = rdmarpc::ClientAdmin::Start("http://127.0.0.1:0");
  Expect(admin.ok() && (*admin)->uri().rfind("http://127.0.0.1:", 0) == 0 &&
             (*admin)->uri() != "http://127.0.0.1:0",
         "a client opens its admin endpoint on a port of its own");

  server.Shutdown(std::chrono::seconds(1));
  return failures == 0 ? 0 : 1;
}
