#include <boost/asio/use_future.hpp>
#include <cstdio>

#include "examples/greeter/greeter.rdmarpc.h"
#include "rdmarpc/server.h"

class GreeterImpl : public greeter::Greeter::Service {
  void Hello(std::shared_ptr<
             rdmarpc::TypedCall<greeter::HelloRequest, greeter::HelloReply>>
                 call) override {
    call->response().set_text("hello, " + call->request().name());
    call->Finish();  // Any thread, now or later.
  }
};

int main() {
  GreeterImpl impl;
  rdmarpc::Server server;
  server.RegisterService(&impl);
  std::string uri = *server.Listen("tcp://127.0.0.1:0");

  greeter::Greeter::Stub stub(std::make_shared<rdmarpc::Channel>(uri));
  greeter::HelloRequest request;
  request.set_name("rdma");
  auto [status, reply] =
      stub.async_Hello(request, boost::asio::use_future).get();
  std::printf("%s %s\n", status.ToString().c_str(), reply.text().c_str());
}
