#!/usr/bin/python3
"""The KV example's client in Python (client.cc is the C++ one):

    tools/python-build                  # once: builds the package, prints PYTHONPATH
    PYTHONPATH=... examples/kv/client.py --uri URI put KEY VALUE
                                        (VALUE "@FILE" reads the file)
                                        ... get KEY  (the value alone, byte-exact;
                                            it arrives as the response's
                                            attachment, never copied)
                                        ... del KEY | scan PREFIX
                                        ... scan-stream PREFIX
                                        ... put-stream KEY VALUE [KEY VALUE...]

A failed call prints its status on stderr and exits 1.
"""
import argparse
import asyncio
import sys

import rdmarpc
from examples.kv import kv_pb2

kv = rdmarpc.services(kv_pb2)


async def run(stub, command, args):
    if command == "put" and len(args) == 2:
        value = args[1].encode()
        if args[1].startswith("@"):
            with open(args[1][1:], "rb") as file:
                value = file.read()
        await stub.Put(kv_pb2.PutRequest(key=args[0], value=value))
    elif command == "get" and len(args) == 1:
        reply, result = await stub.Get.with_call(
            kv_pb2.GetRequest(key=args[0], value_as_attachment=True))
        sys.stdout.buffer.write(bytes(result.attachment or b""))
    elif command == "del" and len(args) == 1:
        await stub.Delete(kv_pb2.DeleteRequest(key=args[0]))
    elif command == "scan" and len(args) == 1:
        reply = await stub.Scan(kv_pb2.ScanRequest(prefix=args[0]))
        for entry in reply.entries:
            print(f"{entry.key}\t{entry.value_size}")
    elif command == "scan-stream" and len(args) == 1:
        async for entry in stub.ScanStream(kv_pb2.ScanRequest(prefix=args[0])):
            print(f"{entry.key}\t{len(entry.value)}")
    elif command == "put-stream" and args and len(args) % 2 == 0:
        reply = await stub.PutStream(
            kv_pb2.PutRequest(key=k, value=v.encode())
            for k, v in zip(args[::2], args[1::2]))
        print(f"stored {reply.keys} keys, {reply.value_bytes} bytes")
    else:
        return False
    return True


async def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--uri", default="auto://127.0.0.1:5001")
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("command")
    parser.add_argument("args", nargs="*")
    options = parser.parse_args()
    async with rdmarpc.Channel(options.uri) as channel:
        stub = kv.KeyValueStub(channel)
        try:
            if not await asyncio.wait_for(
                    run(stub, options.command, options.args), options.timeout):
                parser.print_usage(sys.stderr)
                return 2
        except rdmarpc.RpcError as error:
            print(error, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
