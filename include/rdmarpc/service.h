// Service: a named table of method handlers that a Server dispatches to.
//
// This is the generic layer: a handler receives the request bytes and
// finishes the call with a status and response bytes. The generated, typed
// layer (protoc-gen-rdmarpc) builds its services on top of this one.
#ifndef RDMARPC_SERVICE_H_
#define RDMARPC_SERVICE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rdmarpc/server_call.h"

namespace rdmarpc {

// Runs on a server worker thread; may finish the call later, from any thread.
using MethodHandler = std::function<void(std::shared_ptr<ServerCall> call)>;

class Service {
 public:
  // `name` is fully qualified, as in the .proto: "rdmarpc.examples.Echo".
  explicit Service(std::string name) : name_(std::move(name)) {}
  virtual ~Service() = default;

  const std::string& name() const { return name_; }

  void AddMethod(std::string method, MethodHandler handler) {
    methods_[std::move(method)] = {std::move(handler), StreamKind::kUnary};
  }
  // A streaming method: its handler gets the call at once, reads the
  // client's messages with ServerCall::Read (client- and bidi-streaming),
  // writes its own with ServerCall::Write (server- and bidi-streaming) and
  // ends the call with Finish. A request of another kind is answered
  // INVALID_ARGUMENT.
  void AddStreamingMethod(std::string method, StreamKind kind,
                          MethodHandler handler) {
    methods_[std::move(method)] = {std::move(handler), kind};
  }
  const MethodHandler* FindMethod(std::string_view method) const {
    const auto it = methods_.find(method);
    return it == methods_.end() ? nullptr : &it->second.handler;
  }
  StreamKind method_kind(std::string_view method) const {
    const auto it = methods_.find(method);
    return it == methods_.end() ? StreamKind::kUnary : it->second.kind;
  }
  std::vector<std::string> method_names() const {
    std::vector<std::string> names;
    for (const auto& [name, handler] : methods_) names.push_back(name);
    return names;
  }

 private:
  std::string name_;
  struct Method {
    MethodHandler handler;
    StreamKind kind = StreamKind::kUnary;
  };
  std::map<std::string, Method, std::less<>> methods_;
};

// Deprecated: the names these had before they moved to rdmarpc::; they go
// in the next release.
namespace rpc {
using rdmarpc::MethodHandler;
using rdmarpc::Service;
}  // namespace rpc

}  // namespace rdmarpc

#endif  // RDMARPC_SERVICE_H_
