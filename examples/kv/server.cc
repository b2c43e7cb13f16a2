// The KV server: //examples/kv:server --uri URI [--capacity BYTES]
#include "examples/common/flags.h"
#include "examples/common/serve.h"
#include "examples/kv/kv_service.h"

int main(int argc, char** argv) {
  using namespace rdmarpc;
  using namespace rdmarpc::examples::kv;
  const examples::Flags flags(argc, argv);
  KeyValueImpl kv(static_cast<uint64_t>(flags.GetInt("capacity", 1ll << 30)));
  rpc::ServerOptions options;
  options.transport.max_payload_size = kMaxMessageSize;
  options.max_response_size = kMaxMessageSize;
  rpc::Server server(options);
  server.RegisterService(&kv);
  return examples::ServeUntilSignal(
      server, flags.Get("uri", "auto://127.0.0.1:5001"), "kv server");
}
