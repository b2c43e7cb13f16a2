// Serves hello.Greeter on the URI given (default tcp://127.0.0.1:0) and prints
// "listening on URI" until stdin closes.
#include <cstdio>
#include <iostream>
#include <string>

#include "greeter_impl.h"
#include "rdmarpc/rdmarpc.h"

int main(int argc, char** argv) {
  GreeterImpl impl;
  rdmarpc::Server server;
  server.RegisterService(&impl);
  rdmarpc::EnableIntrospection(server);
  auto uri = server.Listen(argc > 1 ? argv[1] : "tcp://127.0.0.1:0");
  if (!uri.ok()) {
    std::fprintf(stderr, "%s\n", uri.status().ToString().c_str());
    return 1;
  }
  std::printf("listening on %s\n", uri->c_str());
  std::fflush(stdout);
  for (std::string line; std::getline(std::cin, line);) {
  }
  server.Shutdown(std::chrono::seconds(1));
  return 0;
}
