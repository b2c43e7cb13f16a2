# Shared by the tools/ scripts: repository root, setup-when-needed, bazel.
# shellcheck shell=bash
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Runs tools/setup; it returns at once when everything is installed.
ensure_setup() {
  "$ROOT/tools/setup" || {
    echo "error: tools/setup failed; see above" >&2
    exit 1
  }
}

bazel_cmd() {
  (cd "$ROOT" && bazel "$@")
}
