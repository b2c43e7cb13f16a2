#!/usr/bin/env bash
# expect_output.sh PROGRAM EXPECTED: runs PROGRAM; passes when it exits 0 and
# its stdout is exactly EXPECTED.
out=$("$1") || { echo "FAIL: $1 exited $?" >&2; exit 1; }
[[ $out == "$2" ]] || { echo "FAIL: expected '$2', got '$out'" >&2; exit 1; }
echo "ok: $out"
