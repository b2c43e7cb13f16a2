"""rdmarpc_fuzz_target: one libFuzzer target and the test that replays its corpus."""

load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library", "cc_test")

def rdmarpc_fuzz_target(name, deps):
    """Declares NAME (a libFuzzer binary, built by tools/fuzz with clang) and
    NAME_corpus_test (replays corpus/NAME in every test run, any compiler).

    Args:
      name: the target; its source is NAME.cc and its seeds corpus/NAME/.
      deps: what NAME.cc needs.
    """
    cc_library(
        name = name + "_lib",
        testonly = True,
        srcs = [name + ".cc"],
        deps = deps + [":fuzz_check"],
        alwayslink = True,
    )
    cc_test(
        name = name + "_corpus_test",
        srcs = ["replay_main.cc"],
        args = ["tests/fuzz/corpus/" + name],
        data = native.glob(["corpus/" + name + "/*"]),
        deps = [":" + name + "_lib"],
    )

    # libFuzzer supplies main(); only the fuzz configuration builds this.
    cc_binary(
        name = name,
        testonly = True,
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual"],
        deps = [":" + name + "_lib"],
    )
