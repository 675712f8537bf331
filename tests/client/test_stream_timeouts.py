"""Timeouts a hostile or slow server must not defeat.

Only content is progress: heartbeats, junk ``data:`` frames and a usage chunk sent forever must
not keep a stream alive past ``Timeouts.stall``; a response head trickled one byte at a time
is bounded; after every choice finished, heartbeats end the stream ``finished`` after
``finish_grace``; and ``first_token`` (time to the first content) is apart from ``stall``
(between content), because a server reading a long prompt sends pings first.

The hostile servers are a few lines of raw sockets on 127.0.0.1 (:func:`raw_server`), each
bounded in time, so a regression shows as a timeout of the test, never as a hang.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest
from raw_upstream import HEAD, MSG, read_request, upstream
from sse_frames import CHAT_FINISH as FINISH
from sse_frames import chat_frame
from sse_frames import chat_text as text

import fluxstream
from fluxstream import Timeouts
from fluxstream._retry import RetryPolicy
from fluxstream.errors import APITimeoutError, FirstTokenTimeoutError, StallTimeoutError

pytestmark = pytest.mark.anyio

#: Bound of every hostile server's life, and of every test's wait: a hang fails, never blocks.
LIFE = 8.0

Script = Callable[[anyio.abc.SocketStream], Awaitable[None]]

USAGE = chat_frame(usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})


async def forever(sock: anyio.abc.SocketStream, data: bytes, every: float) -> None:
    """Send ``data`` every ``every`` seconds until the client goes (bounded by LIFE)."""
    with anyio.move_on_after(LIFE):
        while True:
            await sock.send(data)
            await anyio.sleep(every)


@asynccontextmanager
async def raw_server(script: Script) -> AsyncIterator[str]:
    """A one-purpose HTTP server: every connection gets ``script``; yields the base URL."""

    async def run(sock: anyio.abc.SocketStream, index: int) -> None:
        await script(sock)

    async with upstream(run, life=LIFE) as up:
        yield up.base


def client(base: str, **kwargs: Any) -> fluxstream.AsyncClient:
    kwargs.setdefault("retry", RetryPolicy.off())
    return fluxstream.AsyncClient(base, **kwargs)


# ------------------------------------------------------------------ only content is progress
@pytest.mark.parametrize(
    "junk",
    [
        pytest.param(b"data: {}\n\n", id="empty-object-frames"),
        pytest.param(b"data: not json\n\n", id="skipped-frames"),
        pytest.param(USAGE, id="usage-repeated"),
        pytest.param(chat_frame({"index": 0, "delta": {"role": "assistant"}}), id="role-only"),
    ],
)
async def test_junk_data_frames_do_not_defeat_the_stall_timeout(
    junk: bytes, anyio_backend: str
) -> None:
    async def script(sock: anyio.abc.SocketStream) -> None:
        await read_request(sock)
        await sock.send(HEAD + text("Hel"))
        await forever(sock, junk, 0.05)

    async with raw_server(script) as base, client(base, timeouts=Timeouts(stall=0.5)) as c:
        started = time.monotonic()
        with anyio.fail_after(LIFE - 2), pytest.raises(StallTimeoutError) as info:
            await c.chat.complete(model="m", messages=MSG)
        assert time.monotonic() - started < 5.0  # the junk goes on for LIFE (8 s)
        assert info.value.reply is not None and info.value.reply.text == "Hel"


# ------------------------------------------------------------------ the response head
async def test_a_head_trickled_byte_by_byte_is_bounded(anyio_backend: str) -> None:
    async def script(sock: anyio.abc.SocketStream) -> None:
        await read_request(sock)
        for byte in HEAD:
            await sock.send(bytes([byte]))
            await anyio.sleep(0.3)

    async with raw_server(script) as base, client(
        base, timeouts=Timeouts(connect=1.0, read=1.0, write=1.0, pool=1.0)
    ) as c:
        started = time.monotonic()
        with anyio.fail_after(LIFE - 2), pytest.raises(APITimeoutError, match="head"):
            await c.chat.complete(model="m", messages=MSG)
        assert time.monotonic() - started < 5.0  # 1 s read timeout, not 30 s of trickle


# ------------------------------------------------------------------ after every choice finished
@pytest.mark.parametrize("stall", [None, 0.4])
async def test_heartbeats_after_every_choice_finished_end_finished_after_the_grace(
    stall: float | None, anyio_backend: str
) -> None:
    async def script(sock: anyio.abc.SocketStream) -> None:
        await read_request(sock)
        await sock.send(HEAD + text("Hello") + FINISH + USAGE)
        await forever(sock, b": ping\n\n", 0.05)

    async with raw_server(script) as base, client(
        base, timeouts=Timeouts(finish_grace=0.6, stall=stall)
    ) as c:
        started = time.monotonic()
        with anyio.fail_after(LIFE - 2):
            reply = await c.chat.complete(model="m", messages=MSG)
        assert 0.6 <= time.monotonic() - started < 5.0  # the pings go on for LIFE (8 s)
    assert reply.outcome is fluxstream.Outcome.FINISHED
    assert reply.text == "Hello" and reply.usage is not None


async def test_a_choice_that_starts_after_another_finished_is_not_cut_by_the_grace(
    anyio_backend: str,
) -> None:
    """n=2 where choice 0 finishes before choice 1 begins: the grace must not end it."""
    second = chat_frame({"index": 1, "delta": {"content": "B"}})

    async def script(sock: anyio.abc.SocketStream) -> None:
        await read_request(sock)
        await sock.send(HEAD + text("A") + FINISH)
        # 1.5 s of content on choice 1, longer than the grace; its first piece 0.1 s after
        # the finish, well within the grace (0.3 s left 0.2 s for a loaded worker's stall)
        for _ in range(15):
            await anyio.sleep(0.1)
            await sock.send(second)
        await sock.send(chat_frame({"index": 1, "delta": {}, "finish_reason": "stop"}))
        await sock.send(b"data: [DONE]\n\n")

    async with raw_server(script) as base, client(base, timeouts=Timeouts(finish_grace=1.0)) as c:
        with anyio.fail_after(LIFE - 2):
            reply = await c.chat.complete(model="m", messages=MSG)
    assert reply.outcome is fluxstream.Outcome.DONE
    assert [ch.text for ch in reply.choices] == ["A", "B" * 15]


# ------------------------------------------------------------------ first token vs stall
def pings_then_text(ping_seconds: float) -> Script:
    async def script(sock: anyio.abc.SocketStream) -> None:
        await read_request(sock)
        await sock.send(HEAD)
        deadline = time.monotonic() + ping_seconds
        while time.monotonic() < deadline:
            await sock.send(b": ping\n\n")
            await anyio.sleep(0.05)
        # the text in one write: a pause within it would race the stall timeout on a
        # loaded machine, and the pings are what these tests are about
        await sock.send(text("Hel") + text("lo") + FINISH + b"data: [DONE]\n\n")

    return script


async def test_prompt_processing_pings_are_not_a_stall_with_a_first_token_timeout(
    anyio_backend: str,
) -> None:
    async with raw_server(pings_then_text(1.0)) as base, client(
        base, timeouts=Timeouts(stall=0.4, first_token=3.0)
    ) as c:
        with anyio.fail_after(LIFE - 2):
            reply = await c.chat.complete(model="m", messages=MSG)
    assert reply.outcome is fluxstream.Outcome.DONE and reply.text == "Hello"


async def test_the_first_token_timeout_ends_a_stream_that_only_pings(anyio_backend: str) -> None:
    async with raw_server(pings_then_text(5.0)) as base, client(
        base, timeouts=Timeouts(first_token=0.5)
    ) as c:
        started = time.monotonic()
        with anyio.fail_after(LIFE - 2), pytest.raises(FirstTokenTimeoutError):
            await c.chat.complete(model="m", messages=MSG)
        assert time.monotonic() - started < 4.0  # the pings go on for 5 s


async def test_the_first_token_timeout_ends_a_silent_stream(anyio_backend: str) -> None:
    """No byte at all after the head: the read timeout (10 s) is not what ends it."""

    async def script(sock: anyio.abc.SocketStream) -> None:
        await read_request(sock)
        await sock.send(HEAD)
        await anyio.sleep(LIFE)

    async with raw_server(script) as base, client(
        base, timeouts=Timeouts(connect=10.0, read=10.0, write=10.0, pool=10.0, first_token=0.5)
    ) as c:
        started = time.monotonic()
        with anyio.fail_after(LIFE - 2), pytest.raises(FirstTokenTimeoutError):
            await c.chat.complete(model="m", messages=MSG)
        assert time.monotonic() - started < 5.0  # the read timeout is 10 s


async def test_the_first_token_timeout_bounds_a_slow_head(anyio_backend: str) -> None:
    async def script(sock: anyio.abc.SocketStream) -> None:
        await read_request(sock)
        for byte in HEAD:
            await sock.send(bytes([byte]))
            await anyio.sleep(0.2)

    async with raw_server(script) as base, client(
        base, timeouts=Timeouts(connect=30.0, read=30.0, write=30.0, pool=30.0, first_token=0.5)
    ) as c:
        started = time.monotonic()
        with anyio.fail_after(LIFE - 2), pytest.raises(APITimeoutError):
            await c.chat.complete(model="m", messages=MSG)
        assert time.monotonic() - started < 5.0  # the head takes 18 s to trickle


async def test_the_stall_timeout_still_applies_between_content(anyio_backend: str) -> None:
    async def script(sock: anyio.abc.SocketStream) -> None:
        await read_request(sock)
        await sock.send(HEAD + text("Hel"))
        await forever(sock, b": ping\n\n", 0.05)

    async with raw_server(script) as base, client(
        base, timeouts=Timeouts(stall=0.4, first_token=5.0)
    ) as c:
        with anyio.fail_after(LIFE - 2), pytest.raises(StallTimeoutError):
            await c.chat.complete(model="m", messages=MSG)
