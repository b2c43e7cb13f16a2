// The rdmarpc protoc plugin: for every service in a .proto it writes
// NAME.rdmarpc.h/.cc with a server base class and a client Stub.
//
// For `service Echo { rpc Say(SayRequest) returns (SayReply); }` in package
// `demo`:
//
//   class Echo {
//    public:
//     static constexpr char kServiceName[] = "demo.Echo";
//     class Service : public rdmarpc::rpc::Service {   // implement this
//       virtual void Say(std::shared_ptr<rdmarpc::rpc::TypedCall<
//                            SayRequest, SayReply>> call);
//     };
//     class Stub {                                     // call through this
//       Stub(std::shared_ptr<rdmarpc::rpc::Channel> channel);
//       auto async_Say(const SayRequest&, [CallOptions,] CompletionToken);
//     };
//   };
#ifndef RDMARPC_COMPILER_GENERATOR_H_
#define RDMARPC_COMPILER_GENERATOR_H_

#include <google/protobuf/compiler/code_generator.h>

#include <string>

namespace rdmarpc::codegen {

class Generator final : public google::protobuf::compiler::CodeGenerator {
 public:
  bool Generate(const google::protobuf::FileDescriptor* file,
                const std::string& parameter,
                google::protobuf::compiler::GeneratorContext* context,
                std::string* error) const override;
};

}  // namespace rdmarpc::codegen

#endif  // RDMARPC_COMPILER_GENERATOR_H_
