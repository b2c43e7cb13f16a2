"""The KV example's service in Python (examples/kv/kv.proto), as the C++
one answers (examples/kv/kv_service.cc): the tests run the C++ client
against it.

    /usr/bin/python3 kv_store.py URI    prints "kv server listening on URI"
"""
import asyncio
import bisect
import sys

import rdmarpc
from examples.kv import kv_pb2

kv = rdmarpc.services(kv_pb2)
NOT_FOUND, INVALID_ARGUMENT = (rdmarpc.StatusCode.NOT_FOUND,
                               rdmarpc.StatusCode.INVALID_ARGUMENT)


class Store(kv.KeyValueServicer):
    def __init__(self):
        self.values = {}
        self.keys = []  # Sorted.

    def _put(self, key, value):
        if not key:
            raise rdmarpc.RpcError(INVALID_ARGUMENT, "key must not be empty")
        if key not in self.values:
            bisect.insort(self.keys, key)
        self.values[key] = value

    def _get(self, key):
        if key not in self.values:
            raise rdmarpc.RpcError(NOT_FOUND, f"key '{key}' not found")
        return self.values[key]

    def _prefixed(self, prefix):
        for key in self.keys[bisect.bisect_left(self.keys, prefix):]:
            if not key.startswith(prefix):
                return
            yield key

    async def Put(self, request, context):
        self._put(request.key, request.value)
        return kv_pb2.PutReply()

    async def Get(self, request, context):
        value = self._get(request.key)
        if request.value_as_attachment:
            context.set_attachment(value)  # bytes: copied once, counted.
            return kv_pb2.GetReply()
        return kv_pb2.GetReply(value=bytes(value))

    async def Delete(self, request, context):
        self._get(request.key)
        del self.values[request.key]
        self.keys.remove(request.key)
        return kv_pb2.DeleteReply()

    async def Scan(self, request, context):
        limit = request.limit or 100
        reply = kv_pb2.ScanReply()
        for key in self._prefixed(request.prefix):
            if len(reply.entries) == limit:
                reply.truncated = True
                break
            reply.entries.add(key=key, value_size=len(self.values[key]))
        return reply

    async def ScanStream(self, request, context):
        keys = list(self._prefixed(request.prefix))
        if request.limit:
            keys = keys[:request.limit]
        for key in keys:
            yield kv_pb2.ScanEntry(key=key, value=bytes(self.values[key]))

    async def PutStream(self, requests, context):
        reply = kv_pb2.PutStreamReply()
        async for request in requests:
            self._put(request.key, request.value)
            reply.keys += 1
            reply.value_bytes += len(request.value)
        return reply


async def serve(uri):
    server = rdmarpc.Server()
    server.add_service(Store())
    bound = await server.start(uri)
    print(f"kv server listening on {bound}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1] if len(sys.argv) > 1 else "tcp://127.0.0.1:0"))
