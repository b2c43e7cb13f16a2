#!/bin/bash
cd /work/main
RDMARPC_TEST_TRANSPORT=rdma timeout 600 bazel-bin/tests/rails_test 2>&1 | grep -v "\[info\]" | tail -30
