// What server-side metrics cost: N echo calls in one process over tcp://
// loopback with metrics on or off. Run each under
// `valgrind --tool=callgrind` and divide the difference in instructions by N.
//   metrics_cost --metrics 1|0 --calls N
#include <cstdio>
#include <future>

#include "base/flags.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/server.h"

int main(int argc, char** argv) {
  using namespace rdmarpc;
  const rdmarpc::Flags flags(argc, argv);
  const long long calls = flags.GetInt("calls", 20000);
  rpc::ServerOptions options;
  options.enable_metrics = flags.GetInt("metrics", 1) != 0;
  options.workers = 1;
  rpc::Service echo("bench.Echo");
  echo.AddMethod("Say", [](std::shared_ptr<rpc::ServerCall> call) {
    call->Finish(Status(), Buffer::CopyOf(call->request().span()));
  });
  rpc::Server server(options);
  server.RegisterService(&echo);
  auto uri = server.Listen("tcp://127.0.0.1:0");
  if (!uri.ok()) return 1;
  rpc::Channel channel(*uri);
  for (long long i = 0; i < calls; ++i) {
    std::promise<Status> done;
    channel.Call("bench.Echo", "Say",
                 Buffer::CopyOf(std::string_view("16 bytes payload")), {},
                 [&](const Status& status, Buffer) { done.set_value(status); });
    if (!done.get_future().get().ok()) return 1;
  }
  std::printf("%lld calls, metrics %s\n", calls,
              options.enable_metrics ? "on" : "off");
  return 0;
}
