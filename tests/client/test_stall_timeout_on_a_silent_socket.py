"""``stall_timeout`` holds when the server goes silent after content, not only when it pings.

``stall_timeout`` was checked only when bytes arrived, so a server that sent some text and
then nothing at all was bounded by the read timeout alone: 600 s by default, for a stream whose
caller asked for 0.5 s (only a client with no read timeout at all took ``stall_timeout`` for
its idle timeout too). A silent server is the plainest stall; the stream now ends with
``StallTimeoutError`` after ``stall_timeout`` without content, silent or not. Before the first
content it still does not count (a server reading a long prompt may say nothing for long).
"""

from __future__ import annotations

import time

import anyio
import anyio.abc
import pytest
from raw_upstream import FINISH, HEAD, MSG, read_request, text, upstream

import fluxstream
from fluxstream import Timeouts
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.errors import StallTimeoutError

pytestmark = pytest.mark.anyio

STALL = 0.5
#: The silent-server test's stall timeout and the pause between its two pieces of content:
#: the pause leaves a loaded worker 1.5 s before it would count as a stall (0.2 s against
#: 0.5 s left 0.3 s), and a stall counted from the first content would end 0.5 s early.
SILENT_STALL = 2.0
PAUSE = 0.5
#: How long the server stays silent after its content, and the connection's life.
SILENCE = 12.0


async def text_then_silence(sock: anyio.abc.SocketStream, i: int) -> None:
    await read_request(sock)
    await sock.send(HEAD + text("Hel"))
    await anyio.sleep(PAUSE)
    await sock.send(text("lo"))
    await anyio.sleep(SILENCE)


async def silent_prompt_then_text(sock: anyio.abc.SocketStream, i: int) -> None:
    await read_request(sock)
    await sock.send(HEAD)
    await anyio.sleep(STALL * 2)  # longer than the stall timeout, before any content
    await sock.send(text("Hello") + FINISH + b"data: [DONE]\n\n")


@pytest.mark.parametrize("how", ["events", "coalesced-text"])
async def test_a_silent_server_after_content_is_a_stall(how: str, anyio_backend: str) -> None:
    async with upstream(text_then_silence, life=SILENCE) as up, fluxstream.AsyncClient(
        up.base, retry=RetryPolicy.off(), resume=ResumePolicy.off(),
        timeouts=Timeouts(stall=SILENT_STALL),
    ) as c:
        stream = c.chat.stream(model="m", messages=MSG)
        started = time.monotonic()
        with anyio.fail_after(SILENCE - 2), pytest.raises(StallTimeoutError) as info:
            async with stream:
                if how == "events":
                    async for _ in stream:
                        pass
                else:
                    async for _ in stream.text(coalesce=0.016):
                        pass
        took = time.monotonic() - started
    # from the last content; well before the server's silence ends
    assert PAUSE + SILENT_STALL - 0.05 < took < PAUSE + SILENT_STALL + 3.0, took
    assert info.value.reply is not None and info.value.reply.text == "Hello"
    assert stream.outcome is fluxstream.Outcome.FAILED


async def test_silence_before_the_first_content_is_not_a_stall(anyio_backend: str) -> None:
    async with upstream(silent_prompt_then_text) as up, fluxstream.AsyncClient(
        up.base, retry=RetryPolicy.off(), timeouts=Timeouts(stall=STALL)
    ) as c:
        with anyio.fail_after(4):
            reply = await c.chat.complete(model="m", messages=MSG)
    assert reply.text == "Hello" and reply.outcome == "done"


async def test_a_slow_consumer_is_not_a_stall(anyio_backend: str) -> None:
    """The caller's own time between reads is not the server's silence: a loop body slower
    than ``stall_timeout`` over a healthy stream ends ``done``."""

    async def steady(sock: anyio.abc.SocketStream, i: int) -> None:
        await read_request(sock)
        await sock.send(HEAD)
        for piece in ("a", "b", "c", "d"):
            await sock.send(text(piece))
            await anyio.sleep(0.05)
        await sock.send(FINISH + b"data: [DONE]\n\n")

    async with upstream(steady) as up, fluxstream.AsyncClient(
        up.base, retry=RetryPolicy.off(), timeouts=Timeouts(stall=0.2)
    ) as c:
        stream = c.chat.stream(model="m", messages=MSG)
        with anyio.fail_after(6):
            async with stream:
                async for event in stream:
                    if isinstance(event, fluxstream.TextDelta):
                        await anyio.sleep(0.4)  # slower than the stall timeout
        assert stream.reply.text == "abcd" and stream.outcome == "done"
