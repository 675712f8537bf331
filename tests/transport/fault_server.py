"""A raw HTTP/1.1 peer on 127.0.0.1 that writes exactly the bytes a test script gives it.

Real servers make the faults a client must survive (a reset mid-event, a bad chunk, a head
trickled a byte at a time, a kept-alive connection closed right after a reply) only by
accident; this one makes each on demand, so a test can hold every transport to the same
behaviour byte for byte. It is plain asyncio (``asyncio.start_server``): it needs nothing of the
code under test, and it runs in the test's own event loop, so the server's view (connections,
requests, when the client closed its end) is read without any locking.

Every wait is bounded (:data:`LIFE` per connection, :data:`REQUEST_WAIT` per request head), so a
client that misbehaves fails a test instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sse_frames import DONE, chat_frame

__all__ = [
    "DONE",
    "LIFE",
    "Conn",
    "FaultServer",
    "chat_body",
    "chunked",
    "closed_port",
    "deflate",
    "finish",
    "full_backlog",
    "gzip",
    "serve_faults",
    "sse_head",
    "syn_sent_to",
    "text",
]

#: Bound of one connection's script: a client that never closes cannot hold the server.
LIFE = 20.0
#: Bound of the wait for one request head (and its body).
REQUEST_WAIT = 5.0


# ------------------------------------------------------------------ Chat Completions SSE bytes


def _frame(choice: dict[str, Any]) -> bytes:
    return chat_frame(choice, id="chatcmpl-1", typed=True)


def text(t: str) -> bytes:
    """One Chat Completions chunk carrying ``t`` on choice 0."""
    return _frame({"index": 0, "delta": {"content": t}, "finish_reason": None})


def finish(reason: str = "stop") -> bytes:
    """The chunk that finishes choice 0."""
    return _frame({"index": 0, "delta": {}, "finish_reason": reason})


def chat_body(*parts: str) -> bytes:
    """A whole, well-formed reply: a chunk per part, the finish, ``[DONE]`` (outcome ``done``)."""
    return b"".join(text(p) for p in parts) + finish() + DONE


# ------------------------------------------------------------------ HTTP/1.1 framing helpers


def sse_head(*extra: bytes, status: bytes = b"200 OK", version: bytes = b"HTTP/1.1",
             eol: bytes = b"\r\n") -> bytes:
    """A response head for an SSE body: ``extra`` header lines (without line ends) appended."""
    lines = [version + b" " + status, b"content-type: text/event-stream",
             b"cache-control: no-cache", *extra]
    return b"".join(line + eol for line in lines) + eol


def chunked(*pieces: bytes, last: bool = True) -> bytes:
    """``pieces`` in chunked transfer coding (one chunk each), with the last chunk if ``last``."""
    out = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces if p)
    return out + (b"0\r\n\r\n" if last else b"")


def gzip(data: bytes) -> bytes:
    return zlib.compress(data, wbits=31)


def deflate(data: bytes) -> bytes:
    """``Content-Encoding: deflate`` as RFC 9110 means it: a zlib stream."""
    return zlib.compress(data)


# ------------------------------------------------------------------ the server


@dataclass
class Conn:
    """One accepted connection, as a script sees it."""

    index: int
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    server: FaultServer

    async def request(self) -> bytes:
        """Read one request (head and ``content-length`` body); its head, or ``b""`` when the
        client closed (or sent nothing for :data:`REQUEST_WAIT` seconds)."""
        try:
            async with asyncio.timeout(REQUEST_WAIT):
                head = await self.reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await self.reader.readexactly(length)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ConnectionError):
            return b""
        self.server.requests.append(head)
        return head

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def trickle(self, data: bytes, interval: float) -> None:
        """``data`` a byte at a time, ``interval`` seconds apart."""
        for i in range(len(data)):
            await self.send(data[i : i + 1])
            await asyncio.sleep(interval)

    def reset(self) -> None:
        """Abort with a TCP RST (``SO_LINGER`` 0), not a FIN: what a crashed peer or a
        middlebox dropping state looks like to the client."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    async def until_closed(self) -> None:
        """Note that the script is parked, then wait (bounded by the connection's life) for
        the client to close its end; :attr:`FaultServer.closed_at` records when."""
        self.server.parked.set()
        with contextlib.suppress(ConnectionError):
            while await self.reader.read(65536):
                pass
        self.server.closed_at[self.index] = time.monotonic()
        self.server.changed.set()


Script = Callable[[Conn], Awaitable[None]]


@dataclass
class FaultServer:
    """What the server saw. ``base`` is the client's ``base_url``."""

    base: str = ""
    port: int = 0
    connections: int = 0
    #: The head of every request read, in order.
    requests: list[bytes] = field(default_factory=list)
    #: Connection index -> when the client's end closed (``time.monotonic()``).
    closed_at: dict[int, float] = field(default_factory=dict)
    #: Set by :meth:`Conn.until_closed`: the script holds the client at its await point.
    parked: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    #: Points the client side reached (set by the test's consumer, awaited by a script): a
    #: fault is sent after the client has read what came before it, never after a guessed sleep.
    marks: dict[str, asyncio.Event] = field(default_factory=dict)
    #: The connection handlers still running.
    handlers: set[asyncio.Task[None]] = field(default_factory=set)

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, asyncio.Event()).set()

    async def reached(self, name: str) -> None:
        await self.marks.setdefault(name, asyncio.Event()).wait()

    async def wait_closed(self, index: int, within: float) -> bool:
        """Whether the client closed connection ``index`` within ``within`` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                while index not in self.closed_at:
                    self.changed.clear()
                    await self.changed.wait()
        return index in self.closed_at


@contextlib.asynccontextmanager
async def serve_faults(
    script: Script, sock: socket.socket | None = None
) -> AsyncIterator[FaultServer]:
    """Run a raw server whose connection ``i`` runs ``script(conn)``; the connection is closed
    (FIN) when the script returns, unless it reset it. Every handler is ended on exit.

    ``sock``: a listening socket to serve on (one that held connections in its backlog until
    now) instead of a new one on an ephemeral port.
    """
    state = FaultServer()
    handlers = state.handlers
    closing = False

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        conn = Conn(state.connections, reader, writer, state)
        state.connections += 1
        try:
            async with asyncio.timeout(LIFE):
                await script(conn)
        except (TimeoutError, ConnectionError):
            pass
        except asyncio.CancelledError:
            # Ended by the server's own exit: the handler returns normally, because asyncio
            # 3.11's ``start_server`` calls ``task.exception()`` on it, which raises for a
            # cancelled task and logs a spurious error.
            if not closing:
                raise
        finally:
            writer.close()
            handlers.discard(task)

    if sock is None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
    else:
        server = await asyncio.start_server(handle, sock=sock)
    state.port = server.sockets[0].getsockname()[1]
    state.base = f"http://127.0.0.1:{state.port}/v1"
    try:
        yield state
    finally:
        closing = True
        server.close()
        for task in list(handlers):
            task.cancel()
        if handlers:
            await asyncio.wait(list(handlers), timeout=2)
        await server.wait_closed()


# ------------------------------------------------------------------ a connect that never completes


@contextlib.contextmanager
def full_backlog() -> Iterator[socket.socket]:
    """A listening socket whose accept queue is full: Linux drops the SYN of any further
    connect, so a client's connect waits (retransmitting) instead of completing or failing.

    Yields the listener; hand it to :func:`serve_faults` (``sock=``) to start accepting. The
    sockets that fill the queue are closed on exit.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    fillers: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)  # room for one queued connection
        for _ in range(2):
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            fillers.append(filler)
            filler.setblocking(False)
            filler.connect_ex(listener.getsockname())
        yield listener
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def syn_sent_to(port: int) -> set[int]:
    """The local ports of this host's IPv4 sockets still connecting (``SYN_SENT``) to
    127.0.0.1:``port`` (from ``/proc/net/tcp``): a connect a client gave up on must not stay."""
    found: set[int] = set()
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            local, remote, state = fields[1], fields[2], fields[3]
            if state == "02" and remote == f"0100007F:{port:04X}":
                found.add(int(local.rsplit(":", 1)[1], 16))
    return found


@contextlib.asynccontextmanager
async def closed_port() -> AsyncIterator[FaultServer]:
    """A :class:`FaultServer` whose ``base`` names a port nothing listens on: a connect is
    refused (RST). The port stays bound, without ``listen()``, for the whole block, so no
    other server can take it meanwhile."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bound:
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        yield FaultServer(base=f"http://127.0.0.1:{port}/v1", port=port)
