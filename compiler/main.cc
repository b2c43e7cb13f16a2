// protoc-gen-rdmarpc: protoc --plugin=protoc-gen-rdmarpc=PATH --rdmarpc_out=DIR
#include <google/protobuf/compiler/plugin.h>

#include "compiler/generator.h"

int main(int argc, char* argv[]) {
  rdmarpc::codegen::Generator generator;
  return google::protobuf::compiler::PluginMain(argc, argv, &generator);
}
