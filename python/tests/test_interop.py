"""Python and C++ on either side of the KV example's calls."""
import os
import subprocess
import sys

import pytest

import rdmarpc
from conftest import HERE, Process, build_path, uri
from examples.kv import kv_pb2

kv = rdmarpc.services(kv_pb2)


@pytest.fixture(scope="module")
def cpp_server():
    server = Process([build_path("examples", "kv_server"), "--uri", uri()])
    yield server.uri
    server.stop()


@pytest.fixture(scope="module")
def python_server():
    server = Process([sys.executable, os.path.join(HERE, "kv_store.py"), uri()])
    yield server.uri
    server.stop()


def test_python_client_against_cpp_server(cpp_server, run):
    async def calls():
        async with rdmarpc.Channel(cpp_server) as channel:
            stub = kv.KeyValueStub(channel)
            await stub.Put(kv_pb2.PutRequest(key="py/a", value=b"alpha"))
            await stub.Put(kv_pb2.PutRequest(key="py/b", value=b"\0" * 70000))
            reply = await stub.Get(kv_pb2.GetRequest(key="py/a"))
            assert reply.value == b"alpha"
            # The value as the response's attachment: a buffer, not a copy.
            reply, result = await stub.Get.with_call(
                kv_pb2.GetRequest(key="py/b", value_as_attachment=True))
            assert reply.value == b"" and bytes(result.attachment) == b"\0" * 70000
            scan = await stub.Scan(kv_pb2.ScanRequest(prefix="py/"))
            assert [(e.key, e.value_size) for e in scan.entries] == [
                ("py/a", 5), ("py/b", 70000)]
            entries = [(e.key, len(e.value)) async for e in
                       stub.ScanStream(kv_pb2.ScanRequest(prefix="py/"))]
            assert entries == [("py/a", 5), ("py/b", 70000)]
            stored = await stub.PutStream(
                kv_pb2.PutRequest(key=f"py/s{i}", value=b"x" * i)
                for i in range(1, 11))
            assert (stored.keys, stored.value_bytes) == (10, 55)
            await stub.Delete(kv_pb2.DeleteRequest(key="py/a"))
            with pytest.raises(rdmarpc.RpcError) as error:
                await stub.Get(kv_pb2.GetRequest(key="py/a"))
            assert error.value.code == rdmarpc.StatusCode.NOT_FOUND
            assert "py/a" in error.value.details
            with pytest.raises(rdmarpc.RpcError) as error:
                await stub.Put(kv_pb2.PutRequest(key="", value=b"v"))
            assert error.value.code == rdmarpc.StatusCode.INVALID_ARGUMENT
    run(calls())


def test_blocking_calls_against_cpp_server(cpp_server):
    with rdmarpc.Channel(cpp_server) as channel:
        stub = kv.KeyValueStub(channel)
        stub.Put.blocking(kv_pb2.PutRequest(key="sync", value=b"1"))
        assert stub.Get.blocking(kv_pb2.GetRequest(key="sync")).value == b"1"
        with pytest.raises(rdmarpc.RpcError) as error:
            stub.Get.blocking(kv_pb2.GetRequest(key="absent"))
        assert error.value.code == rdmarpc.StatusCode.NOT_FOUND


def client(server_uri, *args):
    return subprocess.run([build_path("examples", "kv_client"), "--uri",
                           server_uri, *args], capture_output=True, timeout=60)


def test_cpp_client_against_python_server(python_server):
    assert client(python_server, "put", "cpp/a", "alpha").returncode == 0
    assert client(python_server, "put", "cpp/b", "beta").returncode == 0
    got = client(python_server, "get", "cpp/a")
    assert got.returncode == 0 and got.stdout == b"alpha", got
    scan = client(python_server, "scan", "cpp/")
    assert scan.returncode == 0 and b"cpp/a" in scan.stdout and b"cpp/b" in scan.stdout
    streamed = client(python_server, "scan-stream", "cpp/")
    assert streamed.returncode == 0 and b"cpp/b" in streamed.stdout, streamed
    stored = client(python_server, "put-stream", "cpp/c", "1", "cpp/d", "22")
    assert stored.returncode == 0, stored
    assert client(python_server, "get", "cpp/d").stdout == b"22"
    assert client(python_server, "del", "cpp/a").returncode == 0
    absent = client(python_server, "get", "cpp/a")
    assert absent.returncode == 1 and b"NOT_FOUND" in absent.stderr, absent
    # A load of puts and gets, each checked by the client.
    load = client(python_server, "load", "--count", "200", "--size", "3000")
    assert load.returncode == 0, load
