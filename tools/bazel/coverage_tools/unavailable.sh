#!/bin/sh
echo "bazel coverage is not available offline; use gcov/lcov directly" >&2
exit 1
