"""Scripted HTTP/1.1 connections over ``raw_upstream``: a script gets a :class:`Conn` that reads
whole requests (recording each head) off a kept-alive connection, and writes bytes.

The embedded server speaks correct HTTP; the faults here are in the framing and in the
connection's life (a kept-alive connection closed after each stream, a malformed chunk, a
head too long for some parsers), which only a socket the test writes itself can produce.
Every connection is bounded by :data:`LIFE`, so a hang fails instead of blocking the suite.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import raw_upstream
from raw_upstream import MSG, RequestReader, Upstream
from sse_frames import DONE, chat_choice, chat_frame

__all__ = [
    "LIFE", "MSG", "Conn", "Script", "Upstream", "chunk", "chunked_head", "event", "reply_body",
    "upstream",
]

LIFE = 8.0


def event(text: str, finish: str | None = None) -> bytes:
    """A Chat Completions chunk as OpenAI writes it (``object``, ``finish_reason`` always)."""
    choice = chat_choice(text, finish=finish, with_finish=True)
    return chat_frame(choice, id="c1", typed=True)


def reply_body(text: str = "hi") -> bytes:
    """A whole Chat Completions event stream: one delta, its finish reason, ``[DONE]``."""
    return event(text) + event("", "stop") + DONE


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
        self._requests = RequestReader(sock)

    async def read_request(self) -> bytes | None:
        """The next request's head (its body read and dropped); ``None`` at the client's end."""
        try:
            request = await self._requests.next()
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return None
        self._up.requests.append(request.head)
        return request.head

    async def send(self, data: bytes) -> None:
        await self.sock.send(data)


Script = Callable[[Conn, int], Awaitable[None]]


@asynccontextmanager
async def upstream(script: Script) -> AsyncIterator[Upstream]:
    """Serve on 127.0.0.1 (``raw_upstream.upstream``): connection ``i`` runs
    ``script(conn, i)``, then is closed."""
    served: list[Upstream] = []

    async def on_connection(sock: anyio.abc.SocketStream, index: int) -> None:
        await script(Conn(sock, served[0]), index)

    async with raw_upstream.upstream(on_connection, life=LIFE) as up:
        served.append(up)
        yield up
