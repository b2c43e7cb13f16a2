"""rdmarpc_deps(): every repository rdmarpc needs, for any WORKSPACE.

In your WORKSPACE, after the rule that brings in rdmarpc itself:

    local_repository(name = "rdmarpc", path = "/path/to/rdmarpc")
    load("@rdmarpc//bazel:deps.bzl", "rdmarpc_deps")
    rdmarpc_deps()

It defines, unless the workspace already has one of that name:
  - rules_cc: Bazel 4.2.3 (Debian's bazel-bootstrap) loads
    @rules_cc//cc:defs.bzl from its own tools; Debian's rules_cc needs Bazel 5,
    so a stand-in forwards each rule to its native form;
  - rules_java: from Debian's bazel-rules-java;
  - remote_coverage_tools: cc_test's implicit dependency, as a stand-in whose
    tools say that `bazel coverage` is unavailable offline;
  - rdmarpc_system: Debian's libraries and protoc under /usr as targets
    (bazel/system.BUILD).
Nothing is downloaded: rdmarpc builds with --experimental_repository_disable_download.
"""

def _rules_cc_impl(ctx):
    ctx.file("WORKSPACE", "workspace(name = \"rules_cc\")\n")
    ctx.file("BUILD", "")
    ctx.file("cc/BUILD", "")
    ctx.symlink(ctx.attr._defs, "cc/defs.bzl")

_rules_cc = repository_rule(
    implementation = _rules_cc_impl,
    attrs = {"_defs": attr.label(default = Label("//bazel:rules_cc_defs.bzl"))},
)

_NO_COVERAGE = """#!/bin/sh
echo "bazel coverage is not available offline; use gcov/lcov directly" >&2
exit 1
"""

def _coverage_tools_impl(ctx):
    ctx.file("WORKSPACE", "workspace(name = \"remote_coverage_tools\")\n")
    ctx.file("unavailable.sh", _NO_COVERAGE, executable = True)
    ctx.file("BUILD", "".join([
        "sh_binary(name = \"%s\", srcs = [\"unavailable.sh\"], " % name +
        "visibility = [\"//visibility:public\"])\n"
        for name in ["coverage_report_generator", "lcov_merger"]
    ]))

_coverage_tools = repository_rule(implementation = _coverage_tools_impl)

def rdmarpc_deps():
    """Defines the repositories above that the workspace does not have yet."""
    existing = native.existing_rules()
    if "rules_cc" not in existing:
        _rules_cc(name = "rules_cc")
    if "rules_java" not in existing:
        native.local_repository(
            name = "rules_java",
            path = "/usr/share/bazel/rules/java",
        )
    if "remote_coverage_tools" not in existing:
        _coverage_tools(name = "remote_coverage_tools")
    if "rdmarpc_system" not in existing:
        native.new_local_repository(
            name = "rdmarpc_system",
            build_file = str(Label("//bazel:system.BUILD")),
            path = "/usr",
        )
