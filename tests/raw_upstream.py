"""A raw HTTP upstream for client tests: a script per connection, over 127.0.0.1.

The embedded server (``fluxstream.server``) speaks correct HTTP; this one sends exactly the
bytes a test scripts, for the faults only a socket the test writes itself can produce.
:func:`upstream` runs ``script(sock, i)`` for connection ``i`` (bounded by ``life``, so a hang
fails instead of blocking the suite) and notes when the client's end of each connection closed,
so a test can prove a stream closed its upstream (and when). :func:`read_request` reads one
request (head and body); ``scripted_http.Conn`` reads several off a kept-alive connection. The
Chat Completions chunks (``text``, ``FINISH``) are ``sse_frames``', so the bytes are exactly
the test's.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc
from sse_frames import CHAT_FINISH, chat_text

__all__ = [
    "BUSY", "FINISH", "HEAD", "LIFE", "MSG", "PARK", "PROMPT", "Request", "RequestReader",
    "Script", "Upstream", "answering", "read_request", "text", "until_client_closes", "upstream",
]

MSG = [{"role": "user", "content": "hi"}]
HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"connection: close\r\n\r\n"
)
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"retry-after: %d\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"
)
#: Bound of every upstream's life and every test: a hang fails, it never blocks the suite.
LIFE = 6.0
#: README: cancel() closes the HTTP response "at once": the bound, with room for a loaded
#: worker's stalls (0.2 s was overrun by one). The waits a late close would sit out (backoffs,
#: graces, first-token and stall timeouts, an upstream's LIFE) are 5 s or more.
PROMPT = 1.0
#: How long the stream is left parked at its await point before the cancel.
PARK = 0.25

#: A chunk whose one choice's delta is the text (``event_id``: its ``id:`` line).
text = chat_text
#: The chunk that ends choice 0 with ``stop``.
FINISH = CHAT_FINISH

Script = Callable[[anyio.abc.SocketStream, int], Awaitable[None]]


@dataclass
class Upstream:
    """What the raw server saw: connections, request heads, when the client closed each one."""

    base: str = ""
    connections: int = 0
    #: The head of every request a ``scripted_http.Conn`` read, in order.
    requests: list[bytes] = field(default_factory=list)
    closed_at: dict[int, float] = field(default_factory=dict)
    parked: anyio.Event = field(default_factory=anyio.Event)
    changed: anyio.Event = field(default_factory=anyio.Event)

    @property
    def origin(self) -> str:
        """The base URL without its ``/v1``."""
        return self.base.removesuffix("/v1")

    async def wait_closed(self, index: int) -> None:
        while index not in self.closed_at:
            self.changed = anyio.Event()
            await self.changed.wait()


@dataclass(frozen=True)
class Request:
    """One request as it came: its head (request line and headers) and its body."""

    head: bytes
    body: bytes

    @property
    def line(self) -> str:
        """The request line: ``POST /v1/chat/completions?x=1 HTTP/1.1``."""
        return self.head.split(b"\r\n", 1)[0].decode("latin-1")

    @property
    def headers(self) -> dict[str, str]:
        """The headers, names lowercased (the last of a repeated name)."""
        out: dict[str, str] = {}
        for line in self.head.split(b"\r\n")[1:]:
            name, _, value = line.decode("latin-1").partition(":")
            out[name.strip().lower()] = value.strip()
        return out


class RequestReader:
    """Whole requests off one connection (the body by its ``content-length``); the bytes after
    one are kept for the next, as a kept-alive connection sends them."""

    def __init__(self, sock: anyio.abc.SocketStream) -> None:
        self._sock = sock
        self._buffer = b""

    async def next(self) -> Request:
        """The next request; raises what the socket raises when the client's end closes."""
        while b"\r\n\r\n" not in self._buffer:
            self._buffer += await self._sock.receive()
        head, _, rest = self._buffer.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        while len(rest) < length:
            rest += await self._sock.receive()
        self._buffer = rest[length:]
        return Request(head, rest[:length])


async def read_request(sock: anyio.abc.SocketStream, *, within: float = 2.0) -> Request | None:
    """The request (head and body), so the client is not reset; ``None`` when it has not all
    come within ``within`` seconds."""
    with anyio.move_on_after(within):
        return await RequestReader(sock).next()
    return None


async def until_client_closes(up: Upstream, sock: anyio.abc.SocketStream, index: int) -> None:
    """Mark the stream parked, then wait (bounded) for the client's end to close."""
    up.parked.set()
    with anyio.move_on_after(LIFE):
        try:
            while True:
                await sock.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            up.closed_at[index] = time.monotonic()
            up.changed.set()


def answering(data: bytes, *, hold: float = 0.0) -> Script:
    """A script for every connection: read the request, send ``data``, then keep the
    connection (silent) ``hold`` seconds before closing it."""

    async def script(sock: anyio.abc.SocketStream, index: int) -> None:
        with anyio.move_on_after(2):
            await RequestReader(sock).next()
        await sock.send(data)
        await anyio.sleep(hold)

    return script


@asynccontextmanager
async def upstream(script: Script, *, life: float = LIFE) -> AsyncIterator[Upstream]:
    """A raw HTTP server: connection ``i`` runs ``script(sock, i)`` for at most ``life``
    seconds, then is closed; a client that went away ends its script quietly."""
    up = Upstream()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def handle(sock: anyio.abc.SocketStream) -> None:
        index = up.connections
        up.connections += 1
        async with sock:
            try:
                with anyio.move_on_after(life):
                    await script(sock, index)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        up.base = f"http://127.0.0.1:{port}/v1"
        try:
            yield up
        finally:
            tg.cancel_scope.cancel()
