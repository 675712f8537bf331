"""A raw HTTP upstream for client tests: a script per connection, over 127.0.0.1.

:func:`upstream` runs ``script(sock, i)`` for connection ``i`` and notes when the client's end
of each connection closed, so a test can prove a stream closed its upstream (and when). The
frame helpers write Chat Completions chunks by hand, so the bytes are exactly the test's.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

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
#: README: cancel() closes the HTTP response "at once"; the brief's bound.
PROMPT = 0.2
#: How long the stream is left parked at its await point before the cancel.
PARK = 0.25


def frame(choice: dict[str, Any], event_id: str | None = None) -> bytes:
    body = {"id": "c", "model": "m", "choices": [choice]}
    head = b"" if event_id is None else f"id: {event_id}\n".encode()
    return head + b"data: " + json.dumps(body).encode() + b"\n\n"


def text(t: str, event_id: str | None = None) -> bytes:
    return frame({"index": 0, "delta": {"content": t}}, event_id)


FINISH = frame({"index": 0, "delta": {}, "finish_reason": "stop"})

Script = Callable[[anyio.abc.SocketStream, int], Awaitable[None]]


@dataclass
class Upstream:
    """What the raw server saw: connections, and when the client closed each one."""

    base: str = ""
    connections: int = 0
    closed_at: dict[int, float] = field(default_factory=dict)
    parked: anyio.Event = field(default_factory=anyio.Event)
    changed: anyio.Event = field(default_factory=anyio.Event)

    async def wait_closed(self, index: int) -> None:
        while index not in self.closed_at:
            self.changed = anyio.Event()
            await self.changed.wait()


async def read_request(sock: anyio.abc.SocketStream) -> None:
    data = b""
    with anyio.move_on_after(2):
        while b"\r\n\r\n" not in data:
            data += await sock.receive()
        head, _, rest = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        while len(rest) < length:
            rest += await sock.receive()


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


@asynccontextmanager
async def upstream(script: Script) -> AsyncIterator[Upstream]:
    """A raw HTTP server: connection ``i`` runs ``script(sock, i)``."""
    up = Upstream()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def handle(sock: anyio.abc.SocketStream) -> None:
        index = up.connections
        up.connections += 1
        async with sock:
            try:
                with anyio.move_on_after(LIFE):
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
