// The echo example's service: returns the request's payload, and its
// attachment (include/rdmarpc/payload.h) as the response's, neither copied.
#ifndef RDMARPC_EXAMPLES_ECHO_ECHO_SERVICE_H_
#define RDMARPC_EXAMPLES_ECHO_ECHO_SERVICE_H_

#include "examples/echo/echo.rdmarpc.h"

namespace rdmarpc::examples {

class EchoImpl final : public Echo::Service {
 public:
  void Say(
      std::shared_ptr<rpc::TypedCall<EchoRequest, EchoReply>> call) override {
    *call->response().mutable_payload() =
        std::move(*call->mutable_request().mutable_payload());
    call->set_response_attachment(call->TakeRequestAttachment());
    call->Finish();
  }
};

}  // namespace rdmarpc::examples

#endif  // RDMARPC_EXAMPLES_ECHO_ECHO_SERVICE_H_
