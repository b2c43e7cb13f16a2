"""Streams of every kind between a Python client and a Python server
(tests/proto/stream.proto, the C++ stream tests' service)."""
import asyncio

import pytest

import rdmarpc
from conftest import uri
from tests.proto import stream_pb2

numbers = rdmarpc.services(stream_pb2)
Code = rdmarpc.StatusCode
Number = stream_pb2.Number


class Numbers(numbers.NumbersServicer):
    def __init__(self):
        self.double_ended = asyncio.Event()
        self.double_error = None

    async def Range(self, request, context):
        for i in range(request.n):
            yield Number(value=i)

    async def Sum(self, requests, context):
        total = 0
        async for number in requests:
            total += number.value
        return Number(value=total)

    async def Double(self, requests, context):
        try:
            async for number in requests:
                await context.write(Number(value=2 * number.value))
        except BaseException as error:
            self.double_error = error
            raise
        finally:
            self.double_ended.set()
    # Missing stays unimplemented.


async def serving(test):
    service = Numbers()
    server = rdmarpc.Server()
    server.add_service(service)
    bound = await server.start(uri())
    try:
        async with rdmarpc.Channel(bound) as channel:
            await test(numbers.NumbersStub(channel), service)
    finally:
        await server.stop()


def test_each_kind(run):
    async def test(stub, service):
        assert [n.value async for n in stub.Range(stream_pb2.Count(n=100))] == \
            list(range(100))
        assert (await stub.Sum(Number(value=v) for v in range(1, 101))).value == 5050

        async def numbers_slowly():
            for v in (5, 6, 7):
                await asyncio.sleep(0.01)
                yield Number(value=v)
        assert (await stub.Sum(numbers_slowly())).value == 18
        # Bidirectional, in lock step: each answer before the next write.
        call = stub.Double()
        for v in range(1, 51):
            await call.write(Number(value=v))
            assert (await call.read()).value == 2 * v
        await call.done_writing()
        assert await call.read() is None
        await asyncio.wait_for(service.double_ended.wait(), 10)
        assert service.double_error is None
    run(serving(test))


def test_unimplemented_stream_and_cancellation(run):
    async def test(stub, service):
        with pytest.raises(rdmarpc.RpcError) as error:
            async for _ in stub.Missing(stream_pb2.Count(n=1)):
                pass
        assert error.value.code == Code.UNIMPLEMENTED
        # A client that cancels mid-stream: the handler's task is cancelled.
        call = stub.Double()
        await call.write(Number(value=1))
        assert (await call.read()).value == 2
        call.cancel()
        await asyncio.wait_for(service.double_ended.wait(), 10)
        assert isinstance(service.double_error,
                          (asyncio.CancelledError, rdmarpc.RpcError))
        with pytest.raises(rdmarpc.RpcError) as error:
            await call.read()
        assert error.value.code == Code.CANCELLED
    run(serving(test))
