"""The bridge from the library's threads to an asyncio loop.

Each running loop gets one _rdmarpc.EventQueue, whose eventfd the loop
watches with add_reader. A call registers a future under a token; the
library pushes the call's completion under that token from its own thread,
without the GIL (python/src/events.h); the loop drains every pending event
in one go, on its own thread, and resolves the futures.
"""
import asyncio
import itertools
import weakref

from . import _rdmarpc

# Event kinds, as python/src/events.h numbers them.
DONE, MESSAGE, WRITTEN, INCOMING, CANCELLED = range(5)


class Dispatcher:
    __slots__ = ("queue", "waiting", "handlers", "_tokens", "__weakref__")

    def __init__(self, loop):
        self.queue = _rdmarpc.EventQueue()
        self.waiting = {}  # token -> future, resolved once
        self.handlers = {}  # token -> callable(event), for every event
        self._tokens = itertools.count(1)
        loop.add_reader(self.queue.fd, self._drain)

    def token(self):
        return next(self._tokens)

    def wait(self, loop):
        """A token, and the future its event resolves."""
        token = next(self._tokens)
        future = loop.create_future()
        self.waiting[token] = future
        return token, future

    async def complete(self, loop, start):
        """Runs start(queue, token), and returns the event it ends with."""
        token, future = self.wait(loop)
        start(self.queue, token)
        return await future

    def _drain(self):
        waiting = self.waiting
        for event in self.queue.drain():
            future = waiting.pop(event[0], None)
            if future is not None:
                if not future.done():
                    future.set_result(event)
                continue
            handler = self.handlers.get(event[0])
            if handler is not None:
                handler(event)


_dispatchers = weakref.WeakKeyDictionary()


def dispatcher(loop=None):
    """The running loop's dispatcher (made on first use)."""
    loop = loop or asyncio.get_running_loop()
    found = _dispatchers.get(loop)
    if found is None:
        found = _dispatchers[loop] = Dispatcher(loop)
    return found
