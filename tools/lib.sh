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

# ensure_packages PKG...: installs Debian packages that only some checks
# need, large ones tools/setup leaves out (prometheus, chromium), when
# missing. As root; otherwise it names the command and fails.
ensure_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${db:Status-Status}\n' "$p" 2>/dev/null | grep -qx installed ||
      missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  if [[ $(id -u) -ne 0 ]]; then
    echo "error: missing ${missing[*]}; run as root: apt-get install ${missing[*]}" >&2
    return 1
  fi
  echo "== installing ${missing[*]} (needed here only)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
}

bazel_cmd() {
  (cd "$ROOT" && bazel "$@")
}

# The clang builds (--config=fuzz: libFuzzer, ASan, UBSan; tools/fuzz and
# tools/test's ASan suites) get an output base of their own: CC=clang
# reconfigures the C++ toolchain, which must not invalidate the gcc builds.
# Its builds leave no bazel-* links in the tree (--symlink_prefix=/): links
# into another output base would be walked by the next `bazel test //...` as
# packages, and fail it.
# Build trees kept between runs, one set per checkout (outside /tmp, which
# the Soft-RoCE VM does not see).
RDMARPC_CACHE=${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/rdmarpc
CHECKOUT_ID=$(echo "$ROOT" | md5sum | cut -c1-8)
FUZZ_OUTPUT_BASE=$RDMARPC_CACHE/bazel-fuzz-$CHECKOUT_ID
# tools/test's CMake phase (tools/cmake-test), whose build the VM suite's
# Python tests use.
CMAKE_TEST_DIR=$RDMARPC_CACHE/cmake-test-$CHECKOUT_ID
bazel_fuzz() {
  local command=$1
  shift
  case $command in
    build | test | run | info) set -- --symlink_prefix=/ "$@" ;;
  esac
  (cd "$ROOT" && bazel --output_base="$FUZZ_OUTPUT_BASE" "$command" "$@")
}

# make_test_certs DIR [SAN]: a throwaway CA (DIR/ca.pem) and a server
# certificate for SAN (default IP:127.0.0.1,DNS:localhost), DIR/server.pem
# and DIR/server.key (0600), EC P-256, valid one day; for benchmarks over
# TLS (tools/bench --tls, tools/bench-cpu --tls). Never for production.
make_test_certs() {
  local dir=$1 san=${2:-IP:127.0.0.1,DNS:localhost}
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
  (
    umask 077
    cd "$dir" &&
      openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.pem -days 1 \
        -subj "/CN=bench CA" 2>/dev/null &&
      openssl req "${ec[@]}" -keyout server.key -out server.csr \
        -subj "/CN=bench server" 2>/dev/null &&
      printf 'subjectAltName=%s\n' "$san" >server.ext &&
      openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key \
        -CAcreateserial -out server.pem -days 1 -extfile server.ext 2>/dev/null
  ) || { echo "make_test_certs: openssl failed in $dir" >&2; return 1; }
}
