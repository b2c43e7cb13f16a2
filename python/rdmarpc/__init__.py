"""rdmarpc for Python: calls over RDMA or TCP from asyncio (docs/python.md).

    import rdmarpc
    from examples.kv import kv_pb2
    kv = rdmarpc.services(kv_pb2)

    async def main():
        async with rdmarpc.Channel("tcp://127.0.0.1:7000") as channel:
            stub = kv.KeyValueStub(channel)
            await stub.Put(kv_pb2.PutRequest(key="a", value=b"1"))
            print((await stub.Get(kv_pb2.GetRequest(key="a"))).value)

Bulk bytes go as attachments: memory from rdmarpc.allocate(size) (a buffer:
memoryview, numpy.frombuffer) is registered once and sent from where it is;
received attachments are buffers on the memory they landed in. Any other
buffer is copied once; copies() counts those copies.
"""
import atexit

from . import _rdmarpc
from . import client as _client
from . import server as _server
from .client import CallResult, Channel
from .server import Server, ServicerContext
from .services import servicer_class, services, stub_class
from .status import RpcError, StatusCode

ReceivedBuffer = _rdmarpc.ReceivedBuffer
Memory = _rdmarpc.Memory


def allocate(size):
    """`size` bytes of registered, page-aligned memory (a writable buffer).
    It lives while any view of it, or any call sending from it, does."""
    return _rdmarpc.allocate(size)


def copies():
    """(count, bytes): attachments copied because their memory was not the
    library's (neither allocate()d nor received), since the process began."""
    return _rdmarpc.copies()


def _close_all():
    # Before the interpreter finalizes: servers stop, channels end their
    # calls, and the library's threads are joined while Python still runs.
    for server in list(_server._open):
        server._native.shutdown(0)
        server._native.close()
    for channel in list(_client._open):
        channel.close()


atexit.register(_close_all)

__all__ = [
    "CallResult", "Channel", "Memory", "ReceivedBuffer", "RpcError", "Server",
    "ServicerContext", "StatusCode", "allocate", "copies", "servicer_class",
    "services", "stub_class",
]
