# rdmarpc_generate: the C++ code of .proto files, messages (protoc's
# --cpp_out) and rdmarpc's services and stubs (protoc-gen-rdmarpc), added to
# a target's sources, as gRPC's CMake users write protobuf_generate.
#
#   rdmarpc_generate(TARGET echo PROTOS echo.proto)
#
# Each PATH/x.proto (relative to the first of IMPORT_DIRS, by default the
# current source directory) gives PATH/x.pb.h, .pb.cc, .rdmarpc.h and
# .rdmarpc.cc under OUT_DIR (by default the current binary directory), which
# becomes one of TARGET's include directories: code includes "PATH/x.pb.h"
# and "PATH/x.rdmarpc.h". MESSAGES_ONLY skips the services. IMPORT_DIRS are
# also where imports are looked for; protobuf's own well-known types are
# found wherever protoc finds them.
function(rdmarpc_generate)
  cmake_parse_arguments(ARG "MESSAGES_ONLY" "TARGET;OUT_DIR"
                        "PROTOS;IMPORT_DIRS" ${ARGN})
  if(NOT ARG_TARGET OR NOT ARG_PROTOS)
    message(FATAL_ERROR "rdmarpc_generate: TARGET and PROTOS are required")
  endif()
  if(NOT ARG_IMPORT_DIRS)
    set(ARG_IMPORT_DIRS ${CMAKE_CURRENT_SOURCE_DIR})
  endif()
  if(NOT ARG_OUT_DIR)
    set(ARG_OUT_DIR ${CMAKE_CURRENT_BINARY_DIR})
  endif()
  list(GET ARG_IMPORT_DIRS 0 root)
  get_filename_component(root ${root} ABSOLUTE)
  set(include_args)
  foreach(dir ${ARG_IMPORT_DIRS})
    get_filename_component(dir ${dir} ABSOLUTE)
    list(APPEND include_args -I${dir})
  endforeach()
  set(plugin_args)
  set(plugin_deps)
  if(NOT ARG_MESSAGES_ONLY)
    set(plugin_args
        --plugin=protoc-gen-rdmarpc=$<TARGET_FILE:rdmarpc::protoc-gen-rdmarpc>
        --rdmarpc_out=${ARG_OUT_DIR})
    set(plugin_deps rdmarpc::protoc-gen-rdmarpc)
  endif()
  foreach(proto ${ARG_PROTOS})
    get_filename_component(abs ${proto} ABSOLUTE)
    file(RELATIVE_PATH rel ${root} ${abs})
    if(rel MATCHES "^\\.\\./")
      message(FATAL_ERROR "rdmarpc_generate: ${proto} is not under ${root}")
    endif()
    string(REGEX REPLACE "\\.proto$" "" stem ${rel})
    set(outputs ${ARG_OUT_DIR}/${stem}.pb.h ${ARG_OUT_DIR}/${stem}.pb.cc)
    if(NOT ARG_MESSAGES_ONLY)
      list(APPEND outputs ${ARG_OUT_DIR}/${stem}.rdmarpc.h
           ${ARG_OUT_DIR}/${stem}.rdmarpc.cc)
    endif()
    add_custom_command(
      OUTPUT ${outputs}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${ARG_OUT_DIR}
      COMMAND protobuf::protoc --cpp_out=${ARG_OUT_DIR} ${plugin_args}
              ${include_args} ${abs}
      DEPENDS ${abs} ${plugin_deps} protobuf::protoc
      COMMENT "rdmarpc_generate: ${rel}"
      VERBATIM)
    target_sources(${ARG_TARGET} PRIVATE ${outputs})
  endforeach()
  target_include_directories(${ARG_TARGET} PUBLIC
                             $<BUILD_INTERFACE:${ARG_OUT_DIR}>)
endfunction()
