"""A Python server and a Python client: deadlines, cancellation, metadata,
status codes, streams, attachments without copies, and the interpreter's
exit with calls in flight."""
import asyncio
import os
import subprocess
import sys

import numpy
import pytest

import rdmarpc
from conftest import HERE, TRANSPORT, uri
from examples.kv import kv_pb2

kv = rdmarpc.services(kv_pb2)
Code = rdmarpc.StatusCode


class Probe(kv.KeyValueServicer):
    """Get's key says what to do; what handlers saw is kept."""

    def __init__(self):
        self.cancelled = asyncio.Event()
        self.started = asyncio.Event()
        self.seen = {}

    async def Get(self, request, context):
        key = request.key
        if key == "sleep":
            self.started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        if key == "metadata":
            self.seen["metadata"] = context.invocation_metadata()
            self.seen["time_remaining"] = context.time_remaining()
            context.add_header("h-key", "h-value")
            context.add_trailer("t-key", "t-value")
            return kv_pb2.GetReply(value=b"with metadata")
        if key == "abort":
            context.add_trailer("why", "asked to")
            context.abort(Code.FAILED_PRECONDITION, "aborted as asked")
        if key == "raise":
            raise ValueError("a handler's own bug")
        if key == "source":
            context.set_attachment(self.source)
            return kv_pb2.GetReply()
        if key == "echo":
            # The request's attachment goes back as it came: no copy.
            context.set_attachment(context.attachment)
            return kv_pb2.GetReply()
        return kv_pb2.GetReply(value=key.encode())

    async def ScanStream(self, request, context):
        for i in range(request.limit):
            yield kv_pb2.ScanEntry(key=f"{request.prefix}{i}", value=b"v" * i)
        if request.prefix == "fail":
            raise rdmarpc.RpcError(Code.DATA_LOSS, "after the messages")

    async def PutStream(self, requests, context):
        reply = kv_pb2.PutStreamReply()
        async for request in requests:
            reply.keys += 1
            reply.value_bytes += len(request.value)
        return reply


LIMIT = 65 << 20  # Room for a 64 MiB attachment and its message.


async def serving(test):
    probe = Probe()
    server = rdmarpc.Server(max_payload_size=LIMIT)
    probe.server = server
    server.add_service(probe)
    bound = await server.start(uri())
    try:
        async with rdmarpc.Channel(bound, max_payload_size=LIMIT) as channel:
            await test(kv.KeyValueStub(channel), probe)
    finally:
        await server.stop()


def get(key):
    return kv_pb2.GetRequest(key=key)


def test_unary_and_status_codes(run):
    async def test(stub, probe):
        assert (await stub.Get(get("plain"))).value == b"plain"
        with pytest.raises(rdmarpc.RpcError) as error:
            await stub.Get.with_call(get("abort"))
        assert error.value.code == Code.FAILED_PRECONDITION
        assert error.value.details == "aborted as asked"
        assert (b"asked to" in [v for k, v in error.value.trailers if k == "why"])
        with pytest.raises(rdmarpc.RpcError) as error:
            await stub.Get(get("raise"))
        assert error.value.code == Code.UNKNOWN
        assert "ValueError: a handler's own bug" in error.value.details
        with pytest.raises(rdmarpc.RpcError) as error:
            await stub.Delete(kv_pb2.DeleteRequest(key="x"))
        assert error.value.code == Code.UNIMPLEMENTED
    run(serving(test))


def test_unknown_service_is_unimplemented(run):
    async def test(stub, probe):
        other = rdmarpc.stub_class(
            kv_pb2.DESCRIPTOR.services_by_name["KeyValue"])(stub.Get._channel)
        other.Get._native_method = rdmarpc._rdmarpc.Method(
            "no.Such", "Get", False)
        with pytest.raises(rdmarpc.RpcError) as error:
            await other.Get(get("x"))
        assert error.value.code == Code.UNIMPLEMENTED
    run(serving(test))


def test_bytes_that_do_not_parse_are_refused(run):
    """A request that is not the method's message ends INVALID_ARGUMENT,
    and the server goes on serving."""
    async def test(stub, probe):
        channel = stub.Get._channel._native
        get_method = rdmarpc._rdmarpc.Method(
            "rdmarpc.examples.kv.KeyValue", "Get", False)
        answer = await asyncio.get_running_loop().run_in_executor(
            None, channel.call_blocking, get_method, b"\xff\xff\xff\xff",
            None, 5.0, None, False)
        assert answer[0] == Code.INVALID_ARGUMENT
        assert "does not parse as rdmarpc.examples.kv.GetRequest" in answer[1]
        assert (await stub.Get(get("still serving"))).value == b"still serving"
    run(serving(test))


def test_metadata_both_ways(run):
    async def test(stub, probe):
        reply, result = await stub.Get.with_call(
            get("metadata"), metadata=[("m-key", "m-value")], timeout=5)
        assert reply.value == b"with metadata"
        assert ("m-key", b"m-value") in probe.seen["metadata"]
        assert 0 < probe.seen["time_remaining"] <= 5
        assert ("h-key", b"h-value") in result.headers
        assert ("t-key", b"t-value") in result.trailers
    run(serving(test))


def test_deadline_cancels_the_handler(run):
    async def test(stub, probe):
        with pytest.raises(rdmarpc.RpcError) as error:
            await stub.Get(get("sleep"), timeout=0.2)
        assert error.value.code == Code.DEADLINE_EXCEEDED
        await asyncio.wait_for(probe.cancelled.wait(), 10)
    run(serving(test))


def test_cancelling_the_task_cancels_the_call(run):
    async def test(stub, probe):
        task = asyncio.ensure_future(stub.Get(get("sleep")))
        await asyncio.wait_for(probe.started.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The server was told: its handler's task is cancelled.
        await asyncio.wait_for(probe.cancelled.wait(), 10)
        assert (await stub.Get(get("after"))).value == b"after"
    run(serving(test))


def test_streams(run):
    async def test(stub, probe):
        entries = [e async for e in
                   stub.ScanStream(kv_pb2.ScanRequest(prefix="k", limit=50))]
        assert [e.key for e in entries] == [f"k{i}" for i in range(50)]
        assert len(entries[49].value) == 49
        call = stub.ScanStream(kv_pb2.ScanRequest(prefix="fail", limit=2))
        assert (await call.read()).key == "fail0"
        assert (await call.read()).key == "fail1"
        with pytest.raises(rdmarpc.RpcError) as error:
            await call.read()
        assert error.value.code == Code.DATA_LOSS
        call = stub.PutStream()
        for i in range(20):
            await call.write(kv_pb2.PutRequest(key=str(i), value=b"ab"))
        await call.done_writing()
        reply = await call
        assert (reply.keys, reply.value_bytes) == (20, 40)
    run(serving(test))


def transport_growth(server, before):
    after = server.transport_counters()
    return {name: after[name] - before[name] for name in after}


def test_registered_attachment_round_trip_is_not_copied(run):
    """64 MiB from rdmarpc.allocate() goes out and comes back with no copy
    by the package; the same bytes from a plain numpy array are copied
    once, and counted."""
    size = 64 << 20

    async def test(stub, probe):
        memory = rdmarpc.allocate(size)
        array = numpy.frombuffer(memory, dtype=numpy.uint8)
        array[:] = numpy.arange(size, dtype=numpy.uint64).astype(numpy.uint8)
        copies = rdmarpc.copies()
        reply, result = await stub.Get.with_call(get("echo"), attachment=memory)
        assert rdmarpc.copies() == copies  # Neither side copied it.
        back = numpy.frombuffer(result.attachment, dtype=numpy.uint8)
        assert back.size == size and numpy.array_equal(back, array)
        # A view of the registered memory is registered memory too.
        view = memoryview(memory)[4096:4096 + (1 << 20)]
        reply, result = await stub.Get.with_call(get("echo"), attachment=view)
        assert rdmarpc.copies() == copies
        assert bytes(result.attachment) == bytes(view)
        # A received attachment sent on is not copied either.
        reply, again = await stub.Get.with_call(get("echo"),
                                                attachment=result.attachment)
        assert rdmarpc.copies() == copies
        assert bytes(again.attachment) == bytes(view)
        # Anything else is copied once, and counted.
        plain = numpy.ones(size, dtype=numpy.uint8)
        reply, result = await stub.Get.with_call(get("echo"), attachment=plain)
        assert rdmarpc.copies() == (copies[0] + 1, copies[1] + size)
        assert numpy.array_equal(
            numpy.frombuffer(result.attachment, dtype=numpy.uint8), plain)
    run(serving(test))


def test_transport_sends_registered_memory_in_place(run):
    """Under the package, the transport too: 64 MiB from allocate() leaves
    from where it is (RDMA: written from it, nothing staged); and a 1 MiB
    round trip (request, then the received buffer sent back) is copied
    nowhere over RDMA, and over TCP only in the first read's bytes."""
    size = 64 << 20

    async def test(stub, probe):
        probe.source = rdmarpc.allocate(size)
        before = probe.server.transport_counters()
        reply, result = await stub.Get.with_call(get("source"))
        grew = transport_growth(probe.server, before)
        assert len(result.attachment) == size
        if TRANSPORT == "rdma":
            assert grew["zero_copy_bytes"] >= size
            assert grew["staged_bytes"] < 4096
        memory = rdmarpc.allocate(1 << 20)
        memoryview(memory)[:] = bytes(range(256)) * 4096
        before = probe.server.transport_counters()
        reply, result = await stub.Get.with_call(get("echo"), attachment=memory)
        grew = transport_growth(probe.server, before)
        assert bytes(result.attachment) == bytes(memory)
        if TRANSPORT == "rdma":
            assert grew["zero_copy_bytes"] >= 1 << 20
            assert grew["staged_bytes"] < 4096
        else:
            assert grew["received_copied_bytes"] <= 64 << 10
    run(serving(test))


def test_memory_lives_while_viewed():
    memory = rdmarpc.allocate(1 << 20)
    view = memoryview(memory)
    del memory
    view[0:5] = b"hello"
    assert bytes(view[0:5]) == b"hello"


EXIT_WITH_CALLS_IN_FLIGHT = r"""
import asyncio, os, sys
sys.path.insert(0, sys.argv[1])
import rdmarpc
from test_calls import Probe, kv, get
from examples.kv import kv_pb2
KEEP = []

async def main():
    server = rdmarpc.Server()
    server.add_service(Probe())
    bound = await server.start(sys.argv[2])
    channel = rdmarpc.Channel(bound)
    stub = kv.KeyValueStub(channel)
    for _ in range(20):
        asyncio.ensure_future(stub.Get(get("sleep")))
    # A client stream left open, held until the interpreter finalizes.
    stream = stub.PutStream()
    await stream.write(kv_pb2.PutRequest(key="k", value=b"v"))
    KEEP.append(stream)
    await asyncio.sleep(0.5)
    print("exiting with calls in flight", flush=True)
    os._exit(0) if len(sys.argv) > 3 else sys.exit(0)

asyncio.run(main())
"""


def test_interpreter_exits_with_calls_in_flight():
    """sys.exit with calls outstanding on both sides and a client stream
    still held: the library's threads are stopped and joined before Python
    finalizes; no crash, no hang."""
    done = subprocess.run([sys.executable, "-c", EXIT_WITH_CALLS_IN_FLIGHT,
                           HERE, uri()], capture_output=True, text=True,
                          timeout=60, env=os.environ)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "exiting with calls in flight" in done.stdout
