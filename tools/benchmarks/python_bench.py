#!/usr/bin/python3
"""rdmarpc's Python package against gRPC's (python3-grpcio), side by side
(tools/bench-python runs it; docs/benchmarks.md has the results).

Both sides in Python, the server in a process of its own, on TCP loopback:
the KV example's Get (examples/kv/kv.proto) with a 16-byte key and a
16-byte value, `inflight` calls outstanding from one asyncio loop, for
`seconds`. Prints one line: "SYSTEM calls/s N p50_us N".

    python_bench.py client rdmarpc|grpc URI SECONDS INFLIGHT
    python_bench.py server rdmarpc|grpc     (prints "listening on URI")
    python_bench.py copies URI              (1 MiB from rdmarpc.allocate()
                                             there and back: copies made)
"""
import ast
import asyncio
import statistics
import sys
import time

from examples.kv import kv_pb2

SERVICE = "rdmarpc.examples.kv.KeyValue"
VALUE = b"v" * 16
KEY = "k" * 16


async def serve_rdmarpc():
    import rdmarpc
    kv = rdmarpc.services(kv_pb2)

    class Store(kv.KeyValueServicer):
        async def Get(self, request, context):
            if request.key == "copies":  # This process's counts, for copies().
                counters = server.transport_counters()
                return kv_pb2.GetReply(value=repr(
                    rdmarpc.copies() + (counters["received_copied_bytes"],
                                        counters["staged_bytes"])).encode())
            if request.value_as_attachment:  # The copies check: echo it.
                context.set_attachment(context.attachment)
                return kv_pb2.GetReply()
            return kv_pb2.GetReply(value=VALUE)

    server = rdmarpc.Server()
    server.add_service(Store())
    print("listening on", await server.start("tcp://127.0.0.1:0"), flush=True)
    await asyncio.Event().wait()


async def serve_grpc():
    import grpc

    async def get(request, context):
        return kv_pb2.GetReply(value=VALUE)

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE, {"Get": grpc.unary_unary_rpc_method_handler(
            get, request_deserializer=kv_pb2.GetRequest.FromString,
            response_serializer=kv_pb2.GetReply.SerializeToString)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"listening on 127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


async def drive(call, seconds, inflight):
    latencies = []
    request = kv_pb2.GetRequest(key=KEY)
    deadline = time.perf_counter() + seconds

    async def worker():
        while True:
            start = time.perf_counter()
            if start >= deadline:
                return
            reply = await call(request)
            assert reply.value == VALUE
            latencies.append(time.perf_counter() - start)

    await call(request)  # Connected before the clock starts.
    begin = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(inflight)))
    elapsed = time.perf_counter() - begin
    return len(latencies) / elapsed, statistics.median(latencies) * 1e6


async def client(system, uri, seconds, inflight):
    if system == "rdmarpc":
        import rdmarpc
        kv = rdmarpc.services(kv_pb2)
        async with rdmarpc.Channel(uri) as channel:
            rate, p50 = await drive(kv.KeyValueStub(channel).Get, seconds,
                                    inflight)
    else:
        import grpc
        async with grpc.aio.insecure_channel(uri) as channel:
            call = channel.unary_unary(
                f"/{SERVICE}/Get",
                request_serializer=kv_pb2.GetRequest.SerializeToString,
                response_deserializer=kv_pb2.GetReply.FromString)
            rate, p50 = await drive(call, seconds, inflight)
    print(f"{system} calls/s {rate:.0f} p50_us {p50:.0f}", flush=True)


async def copies(uri):
    import rdmarpc
    kv = rdmarpc.services(kv_pb2)
    memory = rdmarpc.allocate(1 << 20)
    memoryview(memory)[:] = bytes(range(256)) * 4096
    async with rdmarpc.Channel(uri) as channel:
        stub = kv.KeyValueStub(channel)

        async def server_copies():
            reply = await stub.Get(kv_pb2.GetRequest(key="copies"))
            return ast.literal_eval(reply.value.decode())

        before, server_before = rdmarpc.copies(), await server_copies()
        _, result = await stub.Get.with_call(
            kv_pb2.GetRequest(key=KEY, value_as_attachment=True),
            attachment=memory)
        after, server_after = rdmarpc.copies(), await server_copies()
        assert bytes(result.attachment) == bytes(memory)
    print(f"1 MiB from rdmarpc.allocate() there and back: attachment copies: "
          f"client {after[0] - before[0]}, server "
          f"{server_after[0] - server_before[0]}; the server's transport "
          f"copied {server_after[2] - server_before[2]} received bytes out of "
          f"its staging area and staged {server_after[3] - server_before[3]} "
          f"bytes to send")


def main(argv):
    if argv[1] == "server":
        asyncio.run(serve_rdmarpc() if argv[2] == "rdmarpc" else serve_grpc())
    elif argv[1] == "client":
        asyncio.run(client(argv[2], argv[3], float(argv[4]), int(argv[5])))
    elif argv[1] == "copies":
        asyncio.run(copies(argv[2]))


if __name__ == "__main__":
    main(sys.argv)
