"""The server side: Server, and the context a handler gets.

    class KeyValue(kv.KeyValueServicer):          # rdmarpc.services(kv_pb2)
        async def Get(self, request, context):
            ...
            return kv_pb2.GetReply(value=...)

    server = rdmarpc.Server()
    server.add_service(KeyValue())
    uri = await server.start("tcp://127.0.0.1:0")   # the bound URI
    ...
    await server.stop(grace=1.0)

Handlers are `async def`, run as tasks on the loop that called start().
A unary or client-streaming handler returns its reply; a server- or
bidi-streaming one is an async generator that yields replies (or calls
`await context.write(reply)` and returns None). Streaming requests arrive as
an async iterator. A handler ends its call with an error by raising
RpcError (or context.abort); anything else it raises ends the call UNKNOWN.
When the client cancels or the deadline passes, the handler's task is
cancelled.
"""
import asyncio
import inspect
import logging
import weakref

from . import _events
from . import _rdmarpc
from .client import CLIENT_STREAMING, SERVER_STREAMING
from .status import RpcError, StatusCode, parse

_open = weakref.WeakSet()  # Closed at exit (rdmarpc/__init__.py).
_log = logging.getLogger("rdmarpc")


class ServicerContext:
    """A call as its handler sees it."""

    def __init__(self, call, dispatcher, loop):
        self._call = call
        self._dispatcher = dispatcher
        self._loop = loop
        self.attachment = None  # The request's attachment (a buffer), if any.
        self._response_attachment = None

    @property
    def method(self):
        return f"/{self._call.service}/{self._call.method}"

    def invocation_metadata(self):
        """The request's metadata: [(key, value bytes)]."""
        return self._call.metadata()

    def peer_identity(self):
        """(subject, [alternative names]) of an authenticated peer (TLS or
        authenticated RDMA), else None."""
        return self._call.peer()

    def time_remaining(self):
        """Seconds to the call's deadline, or None without one."""
        return self._call.time_remaining()

    def cancelled(self):
        return self._call.cancelled()

    def add_header(self, key, value):
        self._call.add_header(key, value)

    def add_trailer(self, key, value):
        self._call.add_trailer(key, value)

    def set_attachment(self, attachment):
        """Sends `attachment` (any buffer) beside the reply: without a copy
        from rdmarpc.allocate() memory or a received attachment."""
        self._response_attachment = attachment

    def abort(self, code, details=""):
        raise RpcError(code, details)

    async def write(self, reply, *, attachment=None):
        """A streaming handler's next reply; returns once it went."""
        body = reply.SerializeToString()
        event = await self._dispatcher.complete(
            self._loop,
            lambda queue, token: self._call.write(queue, token, body, attachment))
        if event[2] != 0:
            raise RpcError(event[2], event[3])

    async def _requests(self, request_class):
        while True:
            event = await self._dispatcher.complete(self._loop, self._call.read)
            if event[2] != 0:
                raise RpcError(event[2], event[3])
            if event[4] is None:
                return
            yield _parse_request(request_class, event[4])


def _parse_request(request_class, data):
    """A request; RpcError(INVALID_ARGUMENT) for bytes that do not parse."""
    return parse(request_class, data, StatusCode.INVALID_ARGUMENT, "request")


class _Method:
    __slots__ = ("kind", "handler", "request_class")

    def __init__(self, kind, handler, request_class):
        self.kind = kind
        self.handler = handler
        self.request_class = request_class


class Server:
    """Serves the services added to it on the URIs it starts on.

    TLS: tls_cert and tls_key (the server's certificate), tls_ca with
    require_client_cert=True for mutual TLS; with TLS configured, every TCP
    connection is TLS and every RDMA connection is authenticated.
    max_payload_size: the largest request and response (message and
    attachment) in bytes; 0 keeps the library's 64 MiB.
    """

    def __init__(self, *, tls_ca="", tls_cert="", tls_key="",
                 require_client_cert=False, max_payload_size=0):
        self._native = _rdmarpc.Server(tls_ca, tls_cert, tls_key,
                                       require_client_cert, max_payload_size)
        self._services = []
        self._tasks = set()
        self._loop = None
        _open.add(self)

    def add_service(self, servicer):
        """Before start(): `servicer` is an instance of a class derived from
        a service's Servicer (rdmarpc.services)."""
        self._services.append(servicer)

    async def start(self, uri):
        """Listens on `uri` (port 0 picks one); returns the bound URI. The
        handlers run on the calling loop."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            dispatcher = _events.dispatcher(loop)
            for servicer in self._services:
                self._register(servicer, dispatcher, loop)
        elif self._loop is not loop:
            raise RuntimeError("a server runs on one event loop")
        return await loop.run_in_executor(None, self._native.listen, uri)

    async def stop(self, grace=0.0):
        """Stops accepting, lets calls in flight finish for up to `grace`
        seconds, then closes every connection."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._native.shutdown, grace)
        self._native.close()

    def transport_counters(self):
        """The transport's counters over every connection the server has had
        ({name: count}, as /metrics shows them: include/rdmarpc/
        connection_stats.h): what was sent, copied, staged, registered."""
        return self._native.transport_counters()

    def _register(self, servicer, dispatcher, loop):
        descriptor = servicer.DESCRIPTOR
        classes = servicer._rdmarpc_request_classes
        for method in descriptor.methods:
            kind = ((CLIENT_STREAMING if method.client_streaming else 0) |
                    (SERVER_STREAMING if method.server_streaming else 0))
            entry = _Method(kind, getattr(servicer, method.name),
                            classes[method.name])
            token = dispatcher.token()
            dispatcher.handlers[token] = (
                lambda event, entry=entry: self._incoming(entry, event,
                                                          dispatcher, loop))
            self._native.add_method(descriptor.full_name, method.name, kind,
                                    dispatcher.queue, token)

    def _incoming(self, entry, event, dispatcher, loop):
        call = event[6]
        task = loop.create_task(self._serve(entry, call, dispatcher, loop))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        # The client's cancellation or the deadline cancels the task.
        token = dispatcher.token()
        dispatcher.waiting[token] = _Canceller(task, dispatcher, token)
        call.on_cancel(dispatcher.queue, token)

    async def _serve(self, entry, call, dispatcher, loop):
        context = ServicerContext(call, dispatcher, loop)
        try:
            if entry.kind & CLIENT_STREAMING:
                request = context._requests(entry.request_class)
            else:
                request = _parse_request(entry.request_class, call.request())
                context.attachment = call.take_attachment()
            if entry.kind & SERVER_STREAMING:
                result = entry.handler(request, context)
                if inspect.isasyncgen(result):
                    async for message in result:
                        await context.write(message)
                else:
                    await result
                call.finish(0, "", b"", None)
            else:
                reply = await entry.handler(request, context)
                call.finish(0, "", reply.SerializeToString(),
                            context._response_attachment)
        except RpcError as error:
            call.finish(int(error.code), error.details, b"", None)
        except asyncio.CancelledError:
            call.finish(int(StatusCode.CANCELLED), "the handler was cancelled",
                        b"", None)
        except Exception as error:  # pylint: disable=broad-except
            _log.exception("%s failed", context.method)
            call.finish(int(StatusCode.UNKNOWN),
                        f"{type(error).__name__}: {error}", b"", None)


class _Canceller:
    """Stands in the dispatcher's table as a future: a cancellation event
    cancels the handler's task."""
    __slots__ = ("_task",)

    def __init__(self, task, dispatcher, token):
        self._task = task
        task.add_done_callback(
            lambda _: dispatcher.waiting.pop(token, None))

    def done(self):
        return self._task.done()

    def set_result(self, _event):
        self._task.cancel()
