"""A raw HTTP/1.1 upstream on 127.0.0.1 whose every byte a test scripts (asyncio and trio).

The embedded server speaks correct HTTP; the faults here are in the framing and in the
connection's life (a kept-alive connection closed after each stream, a malformed chunk, a
head too long for some parsers), which only a socket the test writes itself can produce.
Every connection and every wait is bounded by :data:`LIFE`, so a hang fails instead of
blocking the suite.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field

import anyio
import anyio.abc

__all__ = [
    "LIFE", "MSG", "Conn", "Script", "Upstream", "chunk", "chunked_head", "event", "reply_body",
    "upstream",
]

LIFE = 8.0
MSG = [{"role": "user", "content": "hi"}]


def event(text: str, finish: str | None = None) -> bytes:
    payload = {
        "id": "c1", "object": "chat.completion.chunk", "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def reply_body(text: str = "hi") -> bytes:
    """A whole Chat Completions event stream: one delta, its finish reason, ``[DONE]``."""
    return event(text) + event("", "stop") + b"data: [DONE]\n\n"


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body, correctly framed."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def chunked_head(extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n" + extra + b"\r\n"
    )


class Conn:
    """One accepted connection: read whole requests, write bytes."""

    def __init__(self, sock: anyio.abc.SocketStream, up: Upstream) -> None:
        self.sock = sock
        self._up = up
        self._buffer = b""

    async def read_request(self) -> bytes | None:
        """The next request's head (its body read and dropped); ``None`` at the client's end."""
        try:
            while b"\r\n\r\n" not in self._buffer:
                self._buffer += await self.sock.receive()
            head, _, rest = self._buffer.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            while len(rest) < length:
                rest += await self.sock.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return None
        self._buffer = rest[length:]
        self._up.requests.append(head)
        return head

    async def send(self, data: bytes) -> None:
        await self.sock.send(data)

    async def until_client_closes(self) -> None:
        """Wait (bounded) until the client closes its end; note it in ``client_closed``."""
        with anyio.move_on_after(LIFE):
            try:
                while True:
                    await self.sock.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                self._up.client_closed += 1


Script = Callable[[Conn, int], Awaitable[None]]


@dataclass
class Upstream:
    base: str = ""
    connections: int = 0
    #: The head of every request received, in order.
    requests: list[bytes] = field(default_factory=list)
    client_closed: int = 0


@asynccontextmanager
async def upstream(script: Script) -> AsyncIterator[Upstream]:
    """Serve on 127.0.0.1: connection ``i`` runs ``script(conn, i)``, then is closed."""
    up = Upstream()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    up.base = f"http://127.0.0.1:{port}/v1"

    async def handle(sock: anyio.abc.SocketStream) -> None:
        index = up.connections
        up.connections += 1
        async with sock:
            with anyio.move_on_after(LIFE):
                with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    await script(Conn(sock, up), index)

    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        try:
            yield up
        finally:
            tg.cancel_scope.cancel()
