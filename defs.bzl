"""rdmarpc_cc_proto_library: one cc_library with a proto's messages and services.

    load("@rdmarpc//:defs.bzl", "rdmarpc_cc_proto_library")

    proto_library(name = "echo_proto", srcs = ["echo.proto"])

    rdmarpc_cc_proto_library(name = "echo_rdmarpc", proto = ":echo_proto")

The library provides "PATH/echo.pb.h" (messages) and "PATH/echo.rdmarpc.h"
(services: Echo::Service and Echo::Stub). The proto_library must be in the
same package as the macro call. Every label below is Label()-qualified, so it
resolves inside rdmarpc from any workspace that depends on it.
"""

load("@rules_cc//cc:defs.bzl", "cc_library", "cc_proto_library")

def _rdmarpc_codegen_impl(ctx):
    proto = ctx.attr.proto[ProtoInfo]
    outputs = []
    files = []
    for src in proto.direct_sources:
        if src.owner.package != ctx.label.package:
            fail("%s: rdmarpc_cc_proto_library needs the .proto in its own package" % src)
        stem = src.basename[:-len(".proto")]
        outputs.append(ctx.actions.declare_file(stem + ".rdmarpc.h"))
        outputs.append(ctx.actions.declare_file(stem + ".rdmarpc.cc"))

        # Path as protoc knows it: relative to the proto source root.
        files.append(src.short_path if src.owner.workspace_root == "" else src.path[len(src.owner.workspace_root) + 1:])

    # Generated files land under bin/<package>/, where protoc, writing
    # PATH/x.rdmarpc.h, puts them when given the bin root.
    out_root = ctx.bin_dir.path
    if ctx.label.workspace_root:
        out_root += "/" + ctx.label.workspace_root
    args = ctx.actions.args()
    args.add("--plugin=protoc-gen-rdmarpc=" + ctx.executable._plugin.path)
    args.add("--rdmarpc_out=" + out_root)
    args.add_joined(
        "--descriptor_set_in",
        proto.transitive_descriptor_sets,
        join_with = ctx.configuration.host_path_separator,
    )
    args.add_all(files)
    ctx.actions.run(
        executable = ctx.executable._protoc,
        arguments = [args],
        inputs = proto.transitive_descriptor_sets,
        tools = [ctx.executable._plugin],
        outputs = outputs,
        mnemonic = "RdmarpcCodegen",
        progress_message = "Generating rdmarpc services for %s" % ctx.label,
    )
    return [DefaultInfo(files = depset(outputs))]

_rdmarpc_codegen = rule(
    implementation = _rdmarpc_codegen_impl,
    attrs = {
        "proto": attr.label(mandatory = True, providers = [ProtoInfo]),
        "_plugin": attr.label(
            default = Label("//compiler:protoc-gen-rdmarpc"),
            executable = True,
            cfg = "host",
        ),
        "_protoc": attr.label(
            default = Label("@rdmarpc_system//:protoc"),
            executable = True,
            cfg = "host",
        ),
    },
)

def rdmarpc_cc_proto_library(name, proto, visibility = None, testonly = False):
    """Messages (cc_proto_library) and rdmarpc services in one cc_library."""
    cc_proto_library(
        name = name + "_messages",
        deps = [proto],
        visibility = ["//visibility:private"],
        testonly = testonly,
    )
    _rdmarpc_codegen(
        name = name + "_codegen",
        proto = proto,
        visibility = ["//visibility:private"],
        testonly = testonly,
    )
    cc_library(
        name = name,
        srcs = [":" + name + "_codegen"],
        deps = [
            ":" + name + "_messages",
            Label("//:typed"),
        ],
        visibility = visibility,
        testonly = testonly,
    )
