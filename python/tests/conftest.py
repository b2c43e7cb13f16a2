"""What the Python suites share. They run with /usr/bin/python3 -m pytest,
with PYTHONPATH naming BUILD/python (the package, and the KV example's
kv_pb2) and RDMARPC_BUILD naming the CMake build whose C++ examples the
interoperability tests run (tools/cmake-test does both)."""
import asyncio
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# rdma:// in the Soft-RoCE VM (tools/softroce), tcp:// elsewhere.
TRANSPORT = os.environ.get("RDMARPC_PY_TRANSPORT", "tcp")
HOST = os.environ.get("RDMARPC_PY_HOST", "127.0.0.1")


def uri(port=0):
    return f"{TRANSPORT}://{HOST}:{port}"


def build_path(*parts):
    build = os.environ.get("RDMARPC_BUILD")
    if not build:
        pytest.fail("RDMARPC_BUILD must name the CMake build directory "
                    "(tools/cmake-test sets it)")
    path = os.path.join(build, *parts)
    assert os.path.exists(path), f"{path} is not built"
    return path


class Process:
    """A server process that prints "... listening on URI"."""

    def __init__(self, argv, env=None):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     env=env)
        self.lines = []
        for line in self.proc.stdout:
            self.lines.append(line)
            found = re.search(r"listening on (\S+)", line)
            if found:
                self.uri = found.group(1)
                return
        raise AssertionError("the server did not start: " + "".join(self.lines))

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def run():
    """run(coroutine): runs it on a fresh event loop."""
    def runner(coroutine):
        return asyncio.run(asyncio.wait_for(coroutine, 60))
    return runner
