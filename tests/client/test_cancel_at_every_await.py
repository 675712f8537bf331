"""``stream.cancel()`` from another task at every await point of a request closes the upstream.

README: ``cancel()`` (from any task) closes the HTTP response at once and the outcome becomes
``cancelled``. Each case parks the stream at one await point — waiting for the response head,
inside a half-sent head, between two reads, in the ``finish_grace`` wait, in the
``first_token_timeout`` wait, in a retry backoff, in a resume's reconnection delay, waiting for
a retry's or a resume's head, a read-ahead of ``text(coalesce=)`` — then cancels it from another
task. The upstream is a raw socket script (:func:`upstream`) that notes when the client's end of
each connection closed: it must within ``PROMPT`` of ``cancel()``, the iteration must end as soon,
nothing more may be sent, and the outcome is ``cancelled``. Runs on asyncio (aiohttp by
default, httpx with ``--transport httpx``) and on trio (httpx).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from raw_upstream import (
    BUSY,
    FINISH,
    HEAD,
    LIFE,
    MSG,
    PARK,
    PROMPT,
    Upstream,
    read_request,
    text,
    until_client_closes,
    upstream,
)

import fluxstream
from fluxstream import Timeouts
from fluxstream._retry import ResumePolicy, RetryPolicy

pytestmark = pytest.mark.anyio



# ------------------------------------------------------------------ the scripts, one per await


async def head_wait(sock: anyio.abc.SocketStream, i: int, up: Upstream) -> None:
    await read_request(sock)
    await until_client_closes(up, sock, i)


async def half_head(sock: anyio.abc.SocketStream, i: int, up: Upstream) -> None:
    await read_request(sock)
    await sock.send(HEAD[:20])
    await until_client_closes(up, sock, i)


async def between_reads(sock: anyio.abc.SocketStream, i: int, up: Upstream) -> None:
    await read_request(sock)
    await sock.send(HEAD + text("Hel"))
    await until_client_closes(up, sock, i)


async def finish_grace(sock: anyio.abc.SocketStream, i: int, up: Upstream) -> None:
    await read_request(sock)
    await sock.send(HEAD + text("Hel") + FINISH)
    await until_client_closes(up, sock, i)


async def first_token(sock: anyio.abc.SocketStream, i: int, up: Upstream) -> None:
    await read_request(sock)
    await sock.send(HEAD + b": ping\n\n")
    await until_client_closes(up, sock, i)


async def retry_backoff(sock: anyio.abc.SocketStream, i: int, up: Upstream) -> None:
    await read_request(sock)
    await sock.send(BUSY % 5)
    up.parked.set()  # the server closes: the client is in its 5 s backoff


async def retry_head(sock: anyio.abc.SocketStream, i: int, up: Upstream) -> None:
    await read_request(sock)
    if i == 0:
        await sock.send(BUSY % 0)
        return
    await until_client_closes(up, sock, i)


async def resume_delay(sock: anyio.abc.SocketStream, i: int, up: Upstream) -> None:
    await read_request(sock)
    await sock.send(HEAD + b"retry: 5000\n\n" + text("Hel", "1"))
    up.parked.set()  # the server closes: the client waits 5 s before its Last-Event-ID


async def resume_head(sock: anyio.abc.SocketStream, i: int, up: Upstream) -> None:
    await read_request(sock)
    if i == 0:
        await sock.send(HEAD + b"retry: 10\n\n" + text("Hel", "1"))
        return
    await until_client_closes(up, sock, i)


NO_HTTP_TIMEOUTS = Timeouts(connect=None, read=None, write=None, pool=None)
CASES: dict[str, tuple[Callable[..., Awaitable[None]], dict[str, Any], int]] = {
    # name: (script, client options, the connection cancel must close (-1: none open))
    "head": (head_wait, {}, 0),
    "half-head": (half_head, {}, 0),
    "between-reads": (between_reads, {}, 0),
    "between-reads-stall-timeout": (between_reads, {"timeouts": Timeouts(stall=5)}, 0),
    "finish-grace": (finish_grace, {"timeouts": Timeouts(finish_grace=5)}, 0),
    "first-token": (first_token, {"timeouts": Timeouts(first_token=5)}, 0),
    "head-with-first-token-timeout": (head_wait, {"timeouts": Timeouts(first_token=5)}, 0),
    "head-without-any-timeout": (head_wait, {"timeouts": NO_HTTP_TIMEOUTS}, 0),
    "between-reads-without-any-timeout": (between_reads, {"timeouts": NO_HTTP_TIMEOUTS}, 0),
    "retry-backoff": (retry_backoff, {"retry": RetryPolicy(max_attempts=3, base_delay=5)}, -1),
    "retry-head": (retry_head, {"retry": RetryPolicy(max_attempts=3, base_delay=0.01)}, 1),
    "resume-delay": (resume_delay, {}, -1),
    "resume-head": (resume_head, {}, 1),
}


async def consume(stream: Any, how: str) -> None:
    async with stream:
        if how == "events":
            async for _ in stream:
                pass
        else:
            async for _ in stream.text(coalesce=0.016):
                pass


@pytest.mark.parametrize("by", ["cancel", "aclose", "scope"])
@pytest.mark.parametrize("how", ["events", "coalesced-text"])
@pytest.mark.parametrize("case", list(CASES))
async def test_cancel_from_another_task_closes_the_upstream_at_once(
    case: str, how: str, by: str, anyio_backend: str
) -> None:
    """``by``: ``stream.cancel()``, ``await stream.aclose()`` from another task, or the
    consuming task's own cancel scope cancelled (a caller's timeout)."""
    script, options, must_close = CASES[case]
    options = {"retry": RetryPolicy.off(), "resume": ResumePolicy(), **options}

    async def run(sock: anyio.abc.SocketStream, i: int) -> None:
        await script(sock, i, up)

    async with upstream(run) as up:
        async with fluxstream.AsyncClient(up.base, api_key="sk-secret-key", **options) as c:
            stream = c.chat.stream(model="m", messages=MSG)
            cancelled_at = 0.0

            async def canceller() -> None:
                nonlocal cancelled_at
                await up.parked.wait()
                await anyio.sleep(PARK)
                cancelled_at = time.monotonic()
                if by == "cancel":
                    stream.cancel()
                elif by == "aclose":
                    await stream.aclose()
                else:
                    scope.cancel()

            with anyio.fail_after(LIFE - 1):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(canceller)
                    with anyio.CancelScope() as scope:
                        await consume(stream, how)
                ended_at = time.monotonic()
                connections = up.connections
                if must_close >= 0:
                    with anyio.move_on_after(2 * PROMPT):
                        await up.wait_closed(must_close)
            assert stream.outcome is fluxstream.Outcome.CANCELLED, stream.reply.error
            assert ended_at - cancelled_at < PROMPT, "the iteration outlived the cancel"
            if must_close >= 0:
                assert must_close in up.closed_at, "the upstream was never closed"
                took = up.closed_at[must_close] - cancelled_at
                assert took < PROMPT, f"the upstream closed {took:.3f}s after cancel()"
            await anyio.sleep(0.1)
            assert up.connections == connections, "a request was sent after cancel()"
            assert stream.stats.attempts >= 1


@pytest.mark.parametrize("by", ["cancel", "aclose", "scope"])
async def test_no_cancel_leaves_a_connection_checked_out(by: str, anyio_backend: str) -> None:
    """Every case in turn on one client whose pool holds one connection: a connection any of
    them left checked out would make the next request wait for the pool (a PoolTimeout)."""
    current: list[Callable[..., Awaitable[None]]] = [head_wait]
    first = [0]

    async def run(sock: anyio.abc.SocketStream, i: int) -> None:
        await current[0](sock, i - first[0], up)

    limits = httpx.Limits(max_connections=1)
    timeouts = Timeouts(connect=5.0, read=5.0, write=5.0, pool=1.0, finish_grace=5)
    async with upstream(run) as up, fluxstream.AsyncClient(
        up.base, limits=limits, timeouts=timeouts, retry=RetryPolicy.off(),
    ) as c:
        for case, (script, options, _) in CASES.items():
            current[0] = script
            first[0] = up.connections
            up.parked = anyio.Event()
            retry = options.get("retry", RetryPolicy.off())
            stream = c.chat.stream(model="m", messages=MSG, retry=retry)

            async def canceller(stream: Any = stream) -> None:
                await up.parked.wait()
                await anyio.sleep(0.05)
                if by == "cancel":
                    stream.cancel()
                elif by == "aclose":
                    await stream.aclose()
                else:
                    scope.cancel()

            with anyio.fail_after(LIFE - 1):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(canceller)
                    with anyio.CancelScope() as scope:
                        await consume(stream, "events")
            assert stream.outcome is fluxstream.Outcome.CANCELLED, case
        # The pool's one connection is free: a last request gets it at once.
        current[0] = finish_grace
        first[0] = up.connections
        up.parked = anyio.Event()
        with anyio.fail_after(LIFE - 1):  # a connection left checked out: PoolTimeout at 1 s
            stream = c.chat.stream(model="m", messages=MSG)
            async with stream:
                async for event in stream:
                    if isinstance(event, fluxstream.TextDelta):
                        break
        assert stream.reply.text == "Hel"


# ------------------------------------------------------------------ a body read before the stream


async def json_body_cut(sock: anyio.abc.SocketStream, i: int, up: Upstream) -> None:
    await read_request(sock)
    await sock.send(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n"
        b'{"id": "c", "choices": ['
    )
    await until_client_closes(up, sock, i)


async def html_body_cut(sock: anyio.abc.SocketStream, i: int, up: Upstream) -> None:
    await read_request(sock)
    await sock.send(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 1000\r\n\r\n<html>"
    )
    await until_client_closes(up, sock, i)


async def error_body_cut(sock: anyio.abc.SocketStream, i: int, up: Upstream) -> None:
    await read_request(sock)
    await sock.send(
        b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
        b'content-length: 1000\r\n\r\n{"error": '
    )
    await until_client_closes(up, sock, i)


@pytest.mark.parametrize("by", ["cancel", "aclose"])
@pytest.mark.parametrize("script", [json_body_cut, html_body_cut, error_body_cut])
async def test_cancel_while_a_whole_body_is_read_is_a_cancel_not_a_failure(
    script: Callable[..., Awaitable[None]], by: str, anyio_backend: str
) -> None:
    """A JSON reply, a wrong content type's excerpt or an error status's body is read before
    the stream starts; ``cancel()`` then aborts that read, and the error of the aborted read
    (a JSON reply that "broke off", a ``ContentTypeError``) is the caller's doing, not the
    server's: the stream ends ``cancelled`` and nothing is raised."""

    async def run(sock: anyio.abc.SocketStream, i: int) -> None:
        await script(sock, i, up)

    async with upstream(run) as up, fluxstream.AsyncClient(
        up.base, retry=RetryPolicy.off()
    ) as c:
        stream = c.chat.stream(model="m", messages=MSG)
        cancelled_at = 0.0

        async def canceller() -> None:
            nonlocal cancelled_at
            await up.parked.wait()
            await anyio.sleep(PARK)
            cancelled_at = time.monotonic()
            if by == "cancel":
                stream.cancel()
            else:
                await stream.aclose()

        with anyio.fail_after(LIFE - 1):
            async with anyio.create_task_group() as tg:
                tg.start_soon(canceller)
                await consume(stream, "events")
            ended_at = time.monotonic()
            with anyio.move_on_after(2 * PROMPT):
                await up.wait_closed(0)
        assert stream.outcome is fluxstream.Outcome.CANCELLED, stream.reply.error
        assert ended_at - cancelled_at < PROMPT
        assert up.closed_at[0] - cancelled_at < PROMPT
