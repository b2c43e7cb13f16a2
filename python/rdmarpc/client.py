"""The client side: Channel, and the callables a stub's methods are.

    channel = rdmarpc.Channel("tcp://127.0.0.1:7000")
    stub = kv.KeyValueStub(channel)                # rdmarpc.services(kv_pb2)
    reply = await stub.Get(kv_pb2.GetRequest(key="a"), timeout=1.0)
    reply = stub.Get.blocking(kv_pb2.GetRequest(key="a"))   # no event loop

A call's keyword arguments: timeout (seconds), metadata ((key, value)
pairs), attachment (any buffer: bytes, a numpy array, a view of
rdmarpc.allocate() memory, which goes without a copy), wait_for_ready.
with_call(...) returns (reply, CallResult) with the response's attachment,
headers and trailers. A failed call raises RpcError; cancelling the task that
awaits a call cancels the call (the server sees CANCELLED).
"""
import asyncio
import weakref

from . import _events
from . import _rdmarpc
from .status import RpcError, StatusCode, parse

_open = weakref.WeakSet()  # Closed at exit (rdmarpc/__init__.py).

UNARY, CLIENT_STREAMING, SERVER_STREAMING, BIDI_STREAMING = range(4)


class Channel:
    """A virtual connection to one server URI (tcp://, tls://, rdma://, or a
    cluster: list://, dns://, etcd://), as rdmarpc::Channel in C++: it
    connects on the first call and reconnects after a lost connection.

    TLS: tls_ca (the CA bundle that signs servers), tls_cert and tls_key (a
    client certificate, for mutual TLS), tls_server_name (the name checked in
    the server's certificate; the URI's host by default).
    max_payload_size: the largest request and response (message and
    attachment) in bytes; 0 keeps the library's 64 MiB.
    """

    def __init__(self, target, *, tls_ca="", tls_cert="", tls_key="",
                 tls_server_name="", max_payload_size=0):
        self._native = _rdmarpc.Channel(target, tls_ca, tls_cert, tls_key,
                                        tls_server_name, max_payload_size)
        self.target = target
        _open.add(self)

    def close(self):
        """Ends every outstanding call with CANCELLED. Idempotent."""
        self._native.close()

    def connect(self):
        """Starts connecting now rather than on the first call."""
        self._native.connect()

    @property
    def ready(self):
        return self._native.ready

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.close()


class CallResult:
    """What a call returned besides its message."""
    __slots__ = ("attachment", "headers", "trailers")

    def __init__(self, attachment, headers, trailers):
        self.attachment = attachment  # A ReceivedBuffer (a buffer), or None.
        self.headers = headers  # [(key, value bytes)]
        self.trailers = trailers


def _parse(message_class, data):
    """A response; RpcError(INTERNAL) for bytes that do not parse."""
    return parse(message_class, data, StatusCode.INTERNAL, "response")


def _raise(event):
    trailers = event[6][1] if event[6] is not None else ()
    raise RpcError(event[2], event[3], trailers)


class _Method:
    __slots__ = ("_channel", "_native_method", "_response", "name")

    def __init__(self, channel, service, method, response_class, idempotent):
        self._channel = channel
        self._native_method = _rdmarpc.Method(service, method, idempotent)
        self._response = response_class
        self.name = f"/{service}/{method}"


class UnaryUnary(_Method):
    __slots__ = ()

    async def __call__(self, request, *, timeout=None, metadata=None,
                       attachment=None, wait_for_ready=False):
        event = await self._start(request, timeout, metadata, attachment,
                                  wait_for_ready, False)
        if event[2] != 0:
            _raise(event)
        return _parse(self._response, event[4])

    async def with_call(self, request, *, timeout=None, metadata=None,
                        attachment=None, wait_for_ready=False):
        """(reply, CallResult): the reply and its attachment and metadata."""
        event = await self._start(request, timeout, metadata, attachment,
                                  wait_for_ready, True)
        if event[2] != 0:
            _raise(event)
        headers, trailers = event[6]
        return (_parse(self._response, event[4]),
                CallResult(event[5], headers, trailers))

    def blocking(self, request, *, timeout=None, metadata=None,
                 attachment=None, wait_for_ready=False, with_call=False):
        """The call, waited for on this thread (the GIL released)."""
        code, details, body, received, headers, trailers = (
            self._channel._native.call_blocking(
                self._native_method, request.SerializeToString(), attachment,
                timeout, metadata, wait_for_ready))
        if code != 0:
            raise RpcError(code, details, trailers)
        reply = _parse(self._response, body)
        if with_call:
            return reply, CallResult(received, headers, trailers)
        return reply

    async def _start(self, request, timeout, metadata, attachment,
                     wait_for_ready, want_metadata):
        loop = asyncio.get_running_loop()
        dispatcher = _events.dispatcher(loop)
        token, future = dispatcher.wait(loop)
        native = self._channel._native
        call_id = native.call(dispatcher.queue, token, self._native_method,
                              request.SerializeToString(), attachment, timeout,
                              metadata, want_metadata, wait_for_ready)
        try:
            return await future
        except asyncio.CancelledError:
            native.cancel(call_id)
            raise


class _StreamCall:
    """A streaming call in progress (what a streaming method returns)."""

    def __init__(self, method, kind, request, timeout, metadata, attachment,
                 wait_for_ready):
        self._loop = asyncio.get_running_loop()
        self._dispatcher = _events.dispatcher(self._loop)
        self._response = method._response
        body = request.SerializeToString() if request is not None else b""
        self._native = method._channel._native.open_stream(
            method._native_method, kind, body, attachment, timeout, metadata,
            wait_for_ready)
        self._result = None
        self.headers = []
        self.trailers = []

    async def _wait(self, start):
        try:
            return await self._dispatcher.complete(self._loop, start)
        except asyncio.CancelledError:
            self._native.cancel()
            raise

    async def write(self, message, *, attachment=None):
        """Sends a message; returns once flow control let it go."""
        event = await self._wait(
            lambda queue, token: self._native.write(
                queue, token, message.SerializeToString(), attachment))
        if event[2] != 0:
            await self._finish()

    async def done_writing(self):
        self._native.writes_done()

    async def read(self):
        """The next message, or None at the end. (Its attachment, if any,
        is in self.last_attachment.)"""
        event = await self._wait(self._native.read)
        if event[2] != 0:
            await self._finish()
        if event[4] is None:
            await self._finish()
            return None
        self.last_attachment = event[5]
        return _parse(self._response, event[4])

    def __aiter__(self):
        return self

    async def __anext__(self):
        message = await self.read()
        if message is None:
            raise StopAsyncIteration
        return message

    def cancel(self):
        self._native.cancel()

    async def _finish(self):
        """The call's end: its response, or RpcError."""
        if self._result is None:
            self._result = await self._wait(self._native.finish)
            if self._result[6] is not None:
                self.headers, self.trailers = self._result[6]
        if self._result[2] != 0:
            _raise(self._result)
        return self._result

    def __await__(self):
        return self._response_message().__await__()

    async def _response_message(self):
        event = await self._finish()
        self.attachment = event[5]
        return _parse(self._response, event[4] or b"")


class UnaryStream(_Method):
    """Server streaming: `async for reply in stub.M(request)`."""
    __slots__ = ()

    def __call__(self, request, *, timeout=None, metadata=None,
                 attachment=None, wait_for_ready=False):
        return _StreamCall(self, SERVER_STREAMING, request, timeout, metadata,
                           attachment, wait_for_ready)


class StreamUnary(_Method):
    """Client streaming: `call = stub.M()`, `await call.write(m)`...,
    `await call.done_writing()`, `reply = await call`; or
    `reply = await stub.M(iterable_of_requests)`."""
    __slots__ = ()

    def __call__(self, requests=None, *, timeout=None, metadata=None,
                 wait_for_ready=False):
        call = _StreamCall(self, CLIENT_STREAMING, None, timeout, metadata,
                           None, wait_for_ready)
        if requests is None:
            return call
        return _write_all(call, requests)


class StreamStream(_Method):
    """Bidirectional: write, done_writing, and `async for` its replies."""
    __slots__ = ()

    def __call__(self, *, timeout=None, metadata=None, wait_for_ready=False):
        return _StreamCall(self, BIDI_STREAMING, None, timeout, metadata,
                           None, wait_for_ready)


async def _write_all(call, requests):
    if hasattr(requests, "__aiter__"):
        async for request in requests:
            await call.write(request)
    else:
        for request in requests:
            await call.write(request)
    await call.done_writing()
    return await call
