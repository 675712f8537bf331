"""``finish_grace`` must not cut an event the server is still sending.

After every choice finished, the client waits ``finish_grace`` for the sentinel, for servers
that never send it nor close. A server that *is* sending it (or the usage chunk before it),
only slowly -- small writes on a loaded machine, a slow proxy -- is not such a server: the
grace expiring while that event is half-arrived ends a complete reply ``truncated`` (or
``finished``) with reason ``eof mid-event`` and no cause, although nothing went wrong. The
soak benchmark found it with ``write-size=7`` streams at 50 concurrent streams (about 40 % of
them with ``Timeouts(finish_grace=0.5)``; none with a long grace), on both transports.

An event still arriving when the grace ends gets more time, one grace at a time and a bounded
number of graces in all (``Progress.linger_wait``); the last test is that bound: a partial
event that never completes still ends the stream in bounded time.

The servers are raw sockets on 127.0.0.1, every wait bounded by :data:`LIFE`; the trickles
last several times the grace, so the old behaviour cannot pass by luck on a loaded machine.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import pytest
from raw_upstream import HEAD, MSG, read_request, upstream
from sse_frames import CHAT_FINISH as FINISH
from sse_frames import DONE, chat_frame, chat_text

import fluxstream
from fluxstream import Timeouts
from fluxstream._retry import RetryPolicy

pytestmark = pytest.mark.anyio

LIFE = 20.0
#: The grace of the bound test (a trickle that never makes an event ends within eleven).
GRACE = 0.3
#: The grace of the trickle tests: each silence between two pieces may last one grace, so it
#: leaves a loaded worker's stall room (a 0.3 s grace against 0.1 s gaps did not, nor did
#: 1 s against 0.25 s in a loaded trio run).
TRICKLE_GRACE = 2.0
#: Each trickled piece follows the previous one this much later: a trickle of the sentinel
#: lasts about 7 s, of the usage chunk 9 s, over three times the grace.
GAP = 0.5

Script = Callable[[anyio.abc.SocketStream], Awaitable[None]]

TEXT = chat_text("Hello")
USAGE = chat_frame(usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})


async def trickle(sock: anyio.abc.SocketStream, data: bytes, size: int) -> None:
    for start in range(0, len(data), size):
        await sock.send(data[start : start + size])
        await anyio.sleep(GAP)


@asynccontextmanager
async def raw_server(script: Script) -> AsyncIterator[str]:
    """Every connection reads the request, then gets ``script`` (bounded by :data:`LIFE`);
    yields the base URL."""

    async def after_the_request(sock: anyio.abc.SocketStream, index: int) -> None:
        await read_request(sock)
        await script(sock)

    async with upstream(after_the_request, life=LIFE) as up:
        yield up.base


async def read_all(c: fluxstream.AsyncClient) -> fluxstream.Reply:
    """The whole stream, however it ends (``complete()`` raises for a truncation)."""
    async with c.chat.stream(model="m", messages=MSG) as stream:
        async for _ in stream:
            pass
    return stream.reply


def client(base: str, grace: float = GRACE) -> fluxstream.AsyncClient:
    return fluxstream.AsyncClient(
        base, retry=RetryPolicy.off(), timeouts=Timeouts(finish_grace=grace)
    )


async def test_a_sentinel_still_arriving_when_the_grace_ends_is_read_to_its_end(
    anyio_backend: str,
) -> None:
    async def script(sock: anyio.abc.SocketStream) -> None:
        await sock.send(HEAD + TEXT + FINISH + USAGE)
        await trickle(sock, DONE, 1)

    async with raw_server(script) as base, client(base, TRICKLE_GRACE) as c:
        with anyio.fail_after(LIFE - 2):
            reply = await read_all(c)
    assert (reply.outcome, reply.end_reason, reply.text) == (
        fluxstream.Outcome.DONE, "sentinel", "Hello"
    )


async def test_a_usage_chunk_still_arriving_when_the_grace_ends_is_not_dropped(
    anyio_backend: str,
) -> None:
    """What the soak saw: 7-byte writes of the usage chunk, slower than the grace."""

    async def script(sock: anyio.abc.SocketStream) -> None:
        await sock.send(HEAD + TEXT + FINISH)
        await trickle(sock, USAGE, 7)
        await sock.send(DONE)

    async with raw_server(script) as base, client(base, TRICKLE_GRACE) as c:
        with anyio.fail_after(LIFE - 2):
            reply = await read_all(c)
    assert reply.outcome is fluxstream.Outcome.DONE, reply.end_reason
    assert reply.text == "Hello"
    assert reply.usage is not None and reply.usage.total_tokens == 2


async def test_a_partial_event_that_never_completes_after_the_finish_still_ends(
    anyio_backend: str,
) -> None:
    """The bound a fix must keep: bytes that never make an event do not hold the stream."""

    async def script(sock: anyio.abc.SocketStream) -> None:
        await sock.send(HEAD + TEXT + FINISH + b"data: ")
        with anyio.move_on_after(LIFE):
            while True:
                await sock.send(b"x")
                await anyio.sleep(0.05)

    async with raw_server(script) as base, client(base) as c:
        started = time.monotonic()
        with anyio.fail_after(LIFE - 2):
            reply = await read_all(c)
        took = time.monotonic() - started
    assert reply.text == "Hello"
    assert reply.outcome in (fluxstream.Outcome.FINISHED, fluxstream.Outcome.TRUNCATED)
    assert took < LIFE - 3  # the server would go on for LIFE seconds
