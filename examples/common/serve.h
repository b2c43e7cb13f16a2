// Serving from an example's main(): listen, say where, run until SIGINT or
// SIGTERM, then shut down gracefully.
#ifndef RDMARPC_EXAMPLES_COMMON_SERVE_H_
#define RDMARPC_EXAMPLES_COMMON_SERVE_H_

#include <pthread.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>

#include "rdmarpc/introspection.h"
#include "rdmarpc/server.h"

namespace rdmarpc::examples {

// Enables rdmarpc.Introspection (so tools/rpc can list, describe, call and
// show stats), prints "NAME listening on URI" (the bound URI) on stdout, and
// "NAME admin on URI" with an admin endpoint (EnableAdmin);
// returns the exit status for main().
inline int ServeUntilSignal(rpc::Server& server, const std::string& uri,
                            const char* name) {
  rpc::EnableIntrospection(server);
  // Block the signals first, so every thread the server starts inherits it.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  const auto bound = server.Listen(uri);
  if (!bound.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, bound.status().ToString().c_str());
    return 1;
  }
  std::printf("%s listening on %s\n", name, bound->c_str());
  if (const std::string admin = server.admin_uri(); !admin.empty()) {
    std::printf("%s admin on %s\n", name, admin.c_str());
  }
  std::fflush(stdout);
  int signal = 0;
  sigwait(&signals, &signal);
  server.Shutdown(std::chrono::seconds(5));
  return 0;
}

}  // namespace rdmarpc::examples

#endif  // RDMARPC_EXAMPLES_COMMON_SERVE_H_
