// client URI NAME: calls hello.Greeter/Hello and prints the reply.
#include <boost/asio/use_future.hpp>
#include <cstdio>
#include <memory>

#include "hello.rdmarpc.h"
#include "rdmarpc/rdmarpc.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: client URI NAME\n");
    return 64;
  }
  hello::Greeter::Stub stub(std::make_shared<rdmarpc::Channel>(argv[1]));
  hello::HelloRequest request;
  request.set_name(argv[2]);
  auto [status, reply] =
      stub.async_Hello(
              request,
              rdmarpc::CallOptions::WithTimeout(std::chrono::seconds(10)),
              boost::asio::use_future)
          .get();
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  std::printf("%s\n", reply.text().c_str());
  return 0;
}
