// The echo server: //examples/echo:server --uri URI
#include "examples/common/flags.h"
#include "examples/common/serve.h"
#include "examples/echo/echo_service.h"

int main(int argc, char** argv) {
  using namespace rdmarpc;
  const examples::Flags flags(argc, argv);
  examples::EchoImpl echo;
  rpc::Server server;
  server.RegisterService(&echo);
  return examples::ServeUntilSignal(
      server, flags.Get("uri", "auto://127.0.0.1:5000"), "echo server");
}
