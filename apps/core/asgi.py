"""An ASGI handler that lets chosen endpoints read their request body as it arrives.

Django's ``ASGIHandler`` spools every body to a temporary file before the view runs: for a 1 GB blob
upload that is a full extra write and read on local disk, and the upload cannot be refused (digest,
size, permission) until all of it has arrived. For the paths given here the request body is instead a
pull stream over the ASGI ``receive`` channel: the (sync) view's ``read()`` awaits the next message on
the server's event loop (``async_to_sync``), so the network is read only as fast as the view consumes
it (backpressure, constant memory). Every other request is handled exactly as Django does.

Django listens for ``http.disconnect`` while the view runs by calling ``receive()`` itself; for a
streamed body that would steal body messages, so the listener waits until the stream has seen the end
of the body (or the disconnect) first.
"""
from __future__ import annotations

import asyncio
import contextvars
import re
from collections.abc import Iterable

from asgiref.sync import async_to_sync
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler

_stream: contextvars.ContextVar[ReceiveStream | None] = contextvars.ContextVar("forest_receive_stream", default=None)


class ReceiveStream:
    """A file-like request body read from ASGI ``http.request`` messages on demand."""

    def __init__(self, receive, loop: asyncio.AbstractEventLoop):
        self._receive = receive
        self._loop = loop
        self._buffer = bytearray()
        self._eof = False
        self.disconnected = False
        self.finished = asyncio.Event()

    def _pull(self) -> None:
        message = async_to_sync(self._receive)()
        if message["type"] == "http.disconnect":
            self.disconnected = True
            self._end()
            return
        self._buffer.extend(message.get("body", b""))
        if not message.get("more_body", False):
            self._end()

    def _end(self) -> None:
        self._eof = True
        self._loop.call_soon_threadsafe(self.finished.set)

    def read(self, size: int = -1) -> bytes:
        while not self._eof and (size < 0 or len(self._buffer) < size):
            self._pull()
        if size < 0 or size >= len(self._buffer):
            out, self._buffer = bytes(self._buffer), bytearray()
        else:
            out, self._buffer = bytes(self._buffer[:size]), self._buffer[size:]
        return out

    def readline(self, size: int = -1) -> bytes:  # Django's request API; bodies streamed here are binary
        return self.read(size)

    def close(self) -> None:
        self._buffer = bytearray()


class StreamingBodyASGIHandler(ASGIHandler):
    """``ASGIHandler`` with streamed bodies for POST/PUT requests whose path matches ``paths``."""

    def __init__(self, paths: Iterable[str]):
        super().__init__()
        self.paths = [re.compile(p) for p in paths]

    async def handle(self, scope, receive, send):
        stream = None
        if scope.get("method") in ("POST", "PUT") and any(p.match(scope.get("path", "")) for p in self.paths):
            stream = ReceiveStream(receive, asyncio.get_running_loop())
        token = _stream.set(stream)
        try:
            await super().handle(scope, receive, send)
        finally:
            _stream.reset(token)

    async def read_body(self, receive):
        stream = _stream.get()
        return stream if stream is not None else await super().read_body(receive)

    async def listen_for_disconnect(self, receive):
        stream = _stream.get()
        if stream is not None:
            await stream.finished.wait()  # the view is still reading the body: do not steal its messages
            if stream.disconnected:
                raise RequestAborted()
        return await super().listen_for_disconnect(receive)
