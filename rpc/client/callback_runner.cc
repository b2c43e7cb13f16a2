#include "rpc/client/callback_runner.h"

namespace rdmarpc::rpc {

void InvokeCallback(ResponseCallback& done, const Status& status,
                    Payload&& response) {
  try {
    done(status, std::move(response));
  } catch (const std::exception& e) {
    Log().error("a call's completion callback threw: {}", e.what());
  }
}

thread_local const CallbackRunner* CallbackRunner::current_ = nullptr;

}  // namespace rdmarpc::rpc
