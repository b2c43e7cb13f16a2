#ifndef HELLO_GREETER_IMPL_H_
#define HELLO_GREETER_IMPL_H_

#include <memory>

#include "hello.rdmarpc.h"

class GreeterImpl : public hello::Greeter::Service {
  void Hello(std::shared_ptr<
             rdmarpc::TypedCall<hello::HelloRequest, hello::HelloReply>>
                 call) override {
    call->response().set_text("hello, " + call->request().name());
    call->Finish();
  }
};

#endif  // HELLO_GREETER_IMPL_H_
