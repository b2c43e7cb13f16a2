"""Unity builds: a library's .cc files compiled as one translation unit.

Every rdmarpc source includes Asio, protobuf and the standard library, and
parsing and instantiating those headers is most of what the compiler does:
gcc spends about 4 s of a rpc/ file's 5 s in them. Compiled as one unit,
rpc/'s 22 files took 27 s of CPU against 130 s one by one (gcc -O1,
2026-11-27), and tools/test builds the libraries four times (plain, a user's
workspace, ASan, TSan).

unity_srcs() concatenates the files, each behind a `#line 1 "path"` marker,
so that diagnostics, debug line tables and __FILE__ still name the original
file and line. The sources must not clash when concatenated: no two files of
one library may define the same name in an anonymous namespace.

Per-file compilation, for quick incremental builds while editing one file:
`--//bazel:unity=false` (`--@rdmarpc//bazel:unity=false` in a workspace
that depends on rdmarpc).
"""

def _bool_setting_impl(_ctx):
    return []

bool_setting = rule(
    implementation = _bool_setting_impl,
    build_setting = config.bool(flag = True),
    doc = "A boolean command-line flag (--//bazel:NAME=true|false).",
)

def unity_srcs(name, srcs):
    """The sources of a cc_library, as one generated file or one by one.

    Args:
      name: names the generated file, NAME_unity.cc.
      srcs: the library's .cc files.

    Returns:
      A select() for the cc_library's srcs: [NAME_unity.cc] when
      //bazel:unity is true (the default), else srcs.
    """
    out = name + "_unity.cc"
    native.genrule(
        name = name + "_unity",
        srcs = srcs,
        outs = [out],
        cmd = "for f in $(SRCS); do " +
              "printf '#line 1 \"%s\"\\n' \"$$f\"; cat \"$$f\"; echo; " +
              "done > $@",
        visibility = ["//visibility:private"],
    )
    return select({
        str(Label("//bazel:unity_build")): [":" + out],
        "//conditions:default": srcs,
    })
