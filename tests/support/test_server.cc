// A TestServer in a process of its own, for the two-host suite: the RPC
// suites' server side on the other host (test_support.h, RDMARPC_TEST_PEER).
//
//   test_server --uri URI --control URI [--hosts N] [--NAME VALUE]...
//
// Serves test.Test, and the services --hosts names (test_support.h's
// TestServerHosts), on --uri with the ServerOptions given as flags (named in
// test_support.h's ServerOptionFlags(); defaults for the rest), and
// test.Control on
// --control (a server of its own, so that shutting the first one down does
// not stop the control):
//   Stats     "calls_started cancels_observed connections live_calls
//              responses_dropped protocol_errors unknown_method_calls
//              server_calls_started calls_over_limit connections_refused
//              peers_timed_out keepalive_pings calls_shed
//              connections_recycled" (the first
//              two are the TestService's; keepalive_pings, over its open
//              connections)
//   Shutdown  request "MS": the test server's Shutdown with that grace
//   Exit      shuts the test server down at once, answers, then exits
// With --register-at etcd://HOST:PORT/PREFIX (and --registration-ttl-s N)
// it registers itself there (ServerOptions::register_at).
// Prints "uri URI" and "control URI" once both listen.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "base/flags.h"
#include "tests/support/test_support.h"
#include "transport/connection.h"

int main(int argc, char** argv) {
  using namespace rdmarpc;
  using namespace std::chrono;
  const rdmarpc::Flags flags(argc, argv);
  rpc::ServerOptions options;
  for (const testing::ServerOptionFlag& flag : testing::ServerOptionFlags()) {
    flag.set(options, flags.GetInt(flag.name, flag.get(options)));
  }
  // A cluster member (tests/cluster_test.cc): registered in etcd.
  options.register_at = flags.Get("register-at", "");
  options.registration.ttl = seconds(
      flags.GetInt("registration-ttl-s", options.registration.ttl.count()));

  testing::TestService service;
  std::vector<std::unique_ptr<rpc::Service>> hosted;
  rpc::Server server(options);
  testing::HostServices(
      server, service, static_cast<unsigned>(flags.GetInt("hosts", 0)), hosted);
  const StatusOr<std::string> uri = server.Listen(flags.Get("uri", ""));

  rpc::Service control("test.Control");
  control.AddMethod("Stats", [&](std::shared_ptr<rpc::ServerCall> call) {
    const rpc::ServerStats stats = server.stats();
    uint64_t pings = 0;
    server.ForEachConnection([&](const transport::Connection& c) {
      pings += c.stats().keepalive_pings;
    });
    const std::string text =
        std::to_string(service.calls_started.load()) + " " +
        std::to_string(service.cancels_observed.load()) + " " +
        std::to_string(stats.connections) + " " +
        std::to_string(stats.live_calls) + " " +
        std::to_string(stats.responses_dropped) + " " +
        std::to_string(stats.protocol_errors) + " " +
        std::to_string(stats.unknown_method_calls) + " " +
        std::to_string(stats.calls_started) + " " +
        std::to_string(stats.calls_over_limit) + " " +
        std::to_string(stats.connections_refused) + " " +
        std::to_string(stats.peers_timed_out) + " " + std::to_string(pings) +
        " " + std::to_string(stats.calls_shed) + " " +
        std::to_string(stats.connections_recycled);
    call->Finish(Status(), Buffer::CopyOf(text));
  });
  control.AddMethod("Shutdown", [&](std::shared_ptr<rpc::ServerCall> call) {
    server.Shutdown(
        milliseconds(std::atoll(std::string(call->request().view()).c_str())));
    call->Finish(Status());
  });
  control.AddMethod("Exit", [&](std::shared_ptr<rpc::ServerCall> call) {
    server.Shutdown(milliseconds(0));
    call->Finish(Status());
    std::thread([] {
      std::this_thread::sleep_for(milliseconds(200));
      std::fflush(stdout);
      std::_Exit(0);
    }).detach();
  });
  rpc::Server control_server;
  control_server.RegisterService(&control);
  const StatusOr<std::string> control_uri =
      control_server.Listen(flags.Get("control", ""));
  if (!uri.ok() || !control_uri.ok()) {
    std::fprintf(stderr, "test_server: %s\n",
                 (!uri.ok() ? uri : control_uri).status().ToString().c_str());
    return 1;
  }
  std::printf("uri %s\ncontrol %s\n", uri->c_str(), control_uri->c_str());
  std::fflush(stdout);
  for (;;) std::this_thread::sleep_for(hours(1));
}
