"""Which deadline ended a stream is named where it passes and reaches the caller unchanged.

Each test makes one deadline pass on a real socket (a raw upstream on 127.0.0.1) and checks
that the error raised carries that :class:`~fluxstream.Deadline` (``error.deadline``) and that
``stream.stats.deadline`` says the same; the deadlines that end a stream ``finished``
(``finish_grace``, a stall after every choice finished) raise nothing and are in the stats
only. Runs on every backend, and with ``--transport httpx`` on httpx under asyncio too.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from raw_upstream import BUSY, FINISH, HEAD, LIFE, MSG, read_request, text, upstream

import fluxstream
from fluxstream import Deadline, Timeouts
from fluxstream._retry import RetryPolicy
from fluxstream.errors import (
    APITimeoutError,
    FirstTokenTimeoutError,
    IdleTimeoutError,
    StallTimeoutError,
    StreamError,
)

pytestmark = pytest.mark.anyio

PING = b": ping\n\n"
#: How long a deadline may take past its limit on a loaded machine (never tightened).
SLACK = 3.0


async def pings(sock: anyio.abc.SocketStream) -> None:
    with anyio.move_on_after(LIFE):
        while True:
            await sock.send(PING)
            await anyio.sleep(0.05)


async def head_then_pings(sock: anyio.abc.SocketStream, i: int) -> None:
    await read_request(sock)
    await sock.send(HEAD)
    await pings(sock)


async def text_then_pings(sock: anyio.abc.SocketStream, i: int) -> None:
    await read_request(sock)
    await sock.send(HEAD + text("Hel"))
    await pings(sock)


async def text_then_silence(sock: anyio.abc.SocketStream, i: int) -> None:
    await read_request(sock)
    await sock.send(HEAD + text("Hel"))
    await anyio.sleep(LIFE)


async def finished_then_pings(sock: anyio.abc.SocketStream, i: int) -> None:
    await read_request(sock)
    await sock.send(HEAD + text("Hello") + FINISH)
    await pings(sock)


async def silent(sock: anyio.abc.SocketStream, i: int) -> None:
    await read_request(sock)
    await anyio.sleep(LIFE)


async def busy(sock: anyio.abc.SocketStream, i: int) -> None:
    await read_request(sock)
    await sock.send(BUSY % 5)


def client(base: str, **kwargs: Any) -> fluxstream.AsyncClient:
    kwargs.setdefault("retry", RetryPolicy.off())
    return fluxstream.AsyncClient(base, **kwargs)


async def failed_with(
    c: fluxstream.AsyncClient, error: type[Exception], timeouts: Timeouts | None = None
) -> tuple[Any, fluxstream.ReplyStream, float]:
    stream = c.chat.stream(model="m", messages=MSG, timeouts=timeouts)
    started = time.monotonic()
    with anyio.fail_after(LIFE), pytest.raises(error) as info:
        async with stream:
            await stream.complete()
    return info.value, stream, time.monotonic() - started


# ------------------------------------------------------------------ errors carry the kind


@pytest.mark.parametrize(
    ("script", "timeouts", "error", "deadline"),
    [
        # 2 s: the head (sent at once) must come before it passes, or the deadline is the
        # head's (0.4 s did not leave a loaded worker enough: "no response head within 0.4s")
        pytest.param(head_then_pings, Timeouts(first_token=2.0, stall=0.1),
                     FirstTokenTimeoutError, Deadline.FIRST_TOKEN, id="first-token"),
        pytest.param(text_then_pings, Timeouts(stall=0.4, first_token=5),
                     StallTimeoutError, Deadline.STALL, id="stall"),
        pytest.param(text_then_silence, Timeouts(idle=0.4),
                     IdleTimeoutError, Deadline.IDLE, id="idle"),
        pytest.param(silent, Timeouts(read=0.4),
                     APITimeoutError, Deadline.HEAD, id="head"),
        pytest.param(silent, Timeouts(first_token=0.4, read=30),
                     APITimeoutError, Deadline.FIRST_TOKEN, id="first-token-bounds-the-head"),
    ],
)
async def test_the_error_and_the_stats_name_the_deadline_that_passed(
    script: Any, timeouts: Timeouts, error: type[Exception], deadline: Deadline,
    anyio_backend: str,
) -> None:
    async with upstream(script) as up, client(up.base, timeouts=timeouts) as c:
        raised, stream, took = await failed_with(c, error)
    assert raised.deadline is deadline
    assert stream.stats.deadline is deadline
    assert stream.outcome is fluxstream.Outcome.FAILED
    assert took < (timeouts.limit(deadline) or 0) + SLACK


async def test_a_backoff_that_reaches_the_first_token_deadline(anyio_backend: str) -> None:
    """Not a read that ran out: the retry's wait did. The same kind reaches the caller."""
    policy = RetryPolicy(max_attempts=3, base_delay=0.3, max_delay=8)
    # 2 s: the 503 (sent at once) comes before it passes even on a loaded machine, or the
    # deadline is the head's (an ``APITimeoutError``); Retry-After's 5 s is still beyond it
    async with upstream(busy) as up, client(
        up.base, timeouts=Timeouts(first_token=2.0), retry=policy
    ) as c:
        raised, stream, took = await failed_with(c, FirstTokenTimeoutError)
    assert raised.deadline is Deadline.FIRST_TOKEN
    assert stream.stats.deadline is Deadline.FIRST_TOKEN
    assert took < 2.0 + SLACK  # Retry-After said 5 s


async def test_a_pool_wait_is_named_pool(
    anyio_backend: str, pytestconfig: pytest.Config
) -> None:
    """One connection in the pool, held by a stream: the next request's wait for it.

    aiohttp has one ``connect`` timeout for the wait for a pool slot and the connection
    together, and its error does not say which ran out: there it is ``CONNECT``."""
    async with upstream(text_then_pings) as up, client(
        up.base, limits=httpx.Limits(max_connections=1), timeouts=Timeouts(pool=0.4, stall=LIFE),
    ) as c:
        holder = c.chat.stream(model="m", messages=MSG)
        async with holder:
            await holder.__anext__()  # the connection is in use from here
            raised, stream, took = await failed_with(c, APITimeoutError)
    on_aiohttp = anyio_backend == "asyncio" and pytestconfig.getoption("--transport") != "httpx"
    expected = Deadline.CONNECT if on_aiohttp else Deadline.POOL
    assert raised.deadline is expected
    assert stream.stats.deadline is expected
    assert took < 0.4 + SLACK


# ------------------------------------------------------------------ ended finished: stats only


@pytest.mark.parametrize(
    ("timeouts", "deadline"),
    [
        pytest.param(Timeouts(finish_grace=0.3), Deadline.FINISH_GRACE, id="finish-grace"),
        pytest.param(Timeouts(finish_grace=None, stall=0.3), Deadline.STALL,
                     id="stall-after-every-choice-finished"),
    ],
)
async def test_a_deadline_that_ends_a_stream_finished_is_in_the_stats(
    timeouts: Timeouts, deadline: Deadline, anyio_backend: str
) -> None:
    async with upstream(finished_then_pings) as up, client(up.base, timeouts=timeouts) as c:
        stream = c.chat.stream(model="m", messages=MSG)
        with anyio.fail_after(LIFE):
            async with stream:
                reply = await stream.complete()
    assert reply.outcome is fluxstream.Outcome.FINISHED and reply.text == "Hello"
    assert stream.stats.deadline is deadline


async def test_no_deadline_in_the_stats_of_a_stream_that_ended_well(anyio_backend: str) -> None:
    async def done(sock: anyio.abc.SocketStream, i: int) -> None:
        await read_request(sock)
        await sock.send(HEAD + text("Hi") + FINISH + b"data: [DONE]\n\n")

    async with upstream(done) as up, client(
        up.base, timeouts=Timeouts(stall=5, first_token=5)
    ) as c:
        stream = c.chat.stream(model="m", messages=MSG)
        with anyio.fail_after(LIFE):
            async with stream:
                await stream.complete()
    assert stream.outcome is fluxstream.Outcome.DONE and stream.stats.deadline is None


# ------------------------------------------------------------------ a request's own deadlines


async def test_a_requests_timeouts_override_the_clients_on_the_wire(anyio_backend: str) -> None:
    """A request's stall limit applies where the client has none, and a request's ``None``
    lifts the client's; its read timeout reaches the HTTP library (the head's wait)."""
    async with upstream(text_then_pings) as up, client(up.base) as c:
        raised, _, _ = await failed_with(c, StallTimeoutError, Timeouts(stall=0.4))
        assert raised.deadline is Deadline.STALL
    async with upstream(silent) as up, client(
        up.base, timeouts=Timeouts(connect=30.0, read=30.0, write=30.0, pool=30.0)
    ) as c:
        raised, _, took = await failed_with(c, APITimeoutError, Timeouts(read=0.4))
        assert raised.deadline is Deadline.HEAD and took < 0.4 + SLACK

    async def pings_then_text(sock: anyio.abc.SocketStream, i: int) -> None:
        await read_request(sock)
        await sock.send(HEAD + text("a"))
        with anyio.move_on_after(1.0):
            await pings(sock)
        await sock.send(text("b") + FINISH + b"data: [DONE]\n\n")

    async with upstream(pings_then_text) as up, client(up.base, timeouts=Timeouts(stall=0.3)) as c:
        with anyio.fail_after(LIFE):
            reply = await c.chat.complete(model="m", messages=MSG, timeouts=Timeouts(stall=None))
        assert reply.text == "ab"
        with anyio.fail_after(LIFE), pytest.raises(StreamError):
            await c.chat.complete(model="m", messages=MSG)  # the client's own still applies
