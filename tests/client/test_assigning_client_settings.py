"""Assigning a client's settings changes what its next stream uses, as passing them did.

``client.base_url``, ``client.timeout``, ``idle_timeout``, ``stall_timeout``,
``first_token_timeout`` and ``finish_grace`` are documented settings of the client (the timeout
ones deprecated for ``client.timeouts``: assigning one warns); assigning one is taken exactly as
the constructor takes it (parsed and checked the same way) and applies to the streams made
after it. Real sockets: the embedded server (or a raw upstream where the
server cannot misbehave as needed) on 127.0.0.1.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from raw_upstream import FINISH, HEAD, LIFE, read_request, text, upstream

import fluxstream
from fluxstream import Deadline, Timeouts
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.errors import (
    APITimeoutError,
    FirstTokenTimeoutError,
    IdleTimeoutError,
    StallTimeoutError,
)
from fluxstream.server import serve

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "hi"}]
#: How long a deadline may take past its limit on a loaded machine (never tightened).
SLACK = 3.0


def client(base: str, **kwargs: Any) -> fluxstream.AsyncClient:
    kwargs.setdefault("retry", RetryPolicy.off())
    kwargs.setdefault("resume", ResumePolicy(max_resumes=0))
    return fluxstream.AsyncClient(base, **kwargs)


# ------------------------------------------------------------------ timeouts


@pytest.mark.parametrize(
    ("attribute", "value", "fault", "error", "deadline"),
    [
        pytest.param("stall_timeout", 0.4, "stall=20,stall-heartbeat=0.05,stall-after-events=2",
                     StallTimeoutError, Deadline.STALL, id="stall"),
        pytest.param("idle_timeout", 0.4, "stall=20,stall-after-events=2",
                     IdleTimeoutError, Deadline.IDLE, id="idle"),
        pytest.param("first_token_timeout", 0.4, "delay=20",
                     APITimeoutError, Deadline.FIRST_TOKEN, id="first-token"),
        pytest.param("timeout", 0.4, "delay=20", APITimeoutError, Deadline.HEAD, id="timeout"),
        pytest.param("timeout", httpx.Timeout(0.4), "delay=20", APITimeoutError, Deadline.HEAD,
                     id="httpx-timeout"),
    ],
)
async def test_an_assigned_timeout_ends_the_next_stream(
    attribute: str, value: Any, fault: str, error: type[Exception], deadline: Deadline,
    anyio_backend: str,
) -> None:
    async with serve(port=0, faults=fault) as server, client(server.base_url) as c:
        with pytest.warns(DeprecationWarning):
            setattr(c, attribute, value)
        with anyio.fail_after(LIFE + SLACK), pytest.raises(error) as info:
            await c.chat.complete(model="m", messages=MSG)
    assert info.value.deadline is deadline  # type: ignore[attr-defined]


async def test_first_token_timeout_error_type(anyio_backend: str) -> None:
    """After the head, the first-token deadline is its own error (as when passed)."""

    async def head_then_pings(sock: anyio.abc.SocketStream, i: int) -> None:
        await read_request(sock)
        await sock.send(HEAD)
        with anyio.move_on_after(LIFE):
            while True:
                await sock.send(b": ping\n\n")
                await anyio.sleep(0.05)

    async with upstream(head_then_pings) as up, client(up.base) as c:
        with pytest.warns(DeprecationWarning):
            # 2 s: the head (sent at once) comes first even on a loaded machine, or the
            # deadline is the head's (0.4 s did not: "no response head within 0.4s")
            c.first_token_timeout = 2.0
        with anyio.fail_after(LIFE), pytest.raises(FirstTokenTimeoutError):
            await c.chat.complete(model="m", messages=MSG)


async def test_an_assigned_finish_grace_ends_the_next_stream_finished(anyio_backend: str) -> None:
    async def finished_then_silence(sock: anyio.abc.SocketStream, i: int) -> None:
        await read_request(sock)
        await sock.send(HEAD + text("Hello") + FINISH)
        await anyio.sleep(LIFE)

    async with upstream(finished_then_silence) as up, client(
        up.base, timeouts=Timeouts(finish_grace=None)
    ) as c:
        with pytest.warns(DeprecationWarning):
            c.finish_grace = 0.3
        with anyio.fail_after(LIFE):
            stream = c.chat.stream(model="m", messages=MSG)
            async with stream:
                reply = await stream.complete()
    assert reply.text == "Hello"
    assert stream.stats.deadline is Deadline.FINISH_GRACE


def test_assigning_a_timeout_replaces_the_clients_timeouts_field_by_field() -> None:
    c = fluxstream.AsyncClient("http://127.0.0.1:9/v1", timeouts=Timeouts(first_token=30))
    with pytest.warns(DeprecationWarning):
        c.stall_timeout = 5
        c.idle_timeout = 7.5
        c.finish_grace = None
        c.timeout = httpx.Timeout(3.0, read=40.0)
    t = c.timeouts
    assert (t.connect, t.read, t.write, t.pool) == (3.0, 40.0, 3.0, 3.0)
    assert (t.idle, t.stall, t.first_token, t.finish_grace) == (7.5, 5.0, 30.0, None)
    with pytest.warns(DeprecationWarning):
        assert (c.stall_timeout, c.idle_timeout, c.finish_grace) == (5.0, 7.5, None)
        assert c.timeout == httpx.Timeout(3.0, read=40.0)
        c.first_token_timeout = None
    assert c.timeouts.first_token is None and c.timeouts.stall == 5.0


@pytest.mark.parametrize(
    ("attribute", "value", "error", "message"),
    [
        ("stall_timeout", -1, ValueError, r"Timeouts\.stall must be a finite number"),
        ("idle_timeout", float("nan"), ValueError, r"Timeouts\.idle must be a finite number"),
        ("first_token_timeout", "5", TypeError, r"Timeouts\.first_token must be seconds"),
        ("finish_grace", True, TypeError, r"Timeouts\.finish_grace must be seconds"),
        ("timeout", -2.0, ValueError, r"Timeouts\.connect must be a finite number"),
    ],
)
def test_an_assigned_timeout_is_checked_like_the_constructors(
    attribute: str, value: Any, error: type[Exception], message: str
) -> None:
    c = fluxstream.AsyncClient("http://127.0.0.1:9/v1")
    with pytest.warns(DeprecationWarning), pytest.raises(error, match=message):
        fluxstream.AsyncClient("http://127.0.0.1:9/v1", **{attribute: value})
    before = c.timeouts
    with pytest.warns(DeprecationWarning), pytest.raises(error, match=message):
        setattr(c, attribute, value)
    assert c.timeouts == before  # a refused value changes nothing


# ------------------------------------------------------------------ base_url


async def test_an_assigned_base_url_moves_the_next_stream_and_its_key(anyio_backend: str) -> None:
    """Requests and the key go to the new host: ``api_key`` guards the second server, which
    answers 401 to a request without it."""
    async with serve(port=0) as old, serve(port=0, api_key="sk-new-host") as new:
        async with client(old.base_url, api_key="sk-new-host") as c:
            c.base_url = new.base_url + "/"
            assert c.base_url == new.base_url
            with anyio.fail_after(LIFE):
                reply = await c.chat.complete(model="m", messages=MSG)
    assert reply.outcome in (fluxstream.Outcome.DONE, fluxstream.Outcome.FINISHED)
    assert [r.path for r in new.records.requests] == ["/v1/chat/completions"]
    assert old.records.requests == []


async def test_a_stream_made_before_the_assignment_stays_on_its_host(anyio_backend: str) -> None:
    """A stream's attempts all go where it was made for: a retry or a resume never moves a
    reply (nor the key it was sent with) to another host half-way."""
    async with serve(port=0) as old, serve(port=0) as new, client(old.base_url) as c:
        stream = c.chat.stream(model="m", messages=MSG)
        c.base_url = new.base_url
        with anyio.fail_after(LIFE):
            async with stream:
                await stream.complete()
            await c.chat.complete(model="m", messages=MSG)
    assert len(old.records.requests) == 1 and len(new.records.requests) == 1


async def test_credentials_of_an_assigned_base_url_replace_the_old_ones(
    anyio_backend: str,
) -> None:
    async with serve(port=0) as server:
        bare = server.base_url
        with_user = bare.replace("http://", "http://user:pw@")
        async with client(with_user) as c:
            assert c.base_url == bare  # shown without its credentials, as when passed
            await c.chat.complete(model="m", messages=MSG)
            c.base_url = bare + "?api-version=1"
            assert c.base_url == bare + "?api-version=1"
            await c.chat.complete(model="m", messages=MSG)
    first, second = server.records.requests
    assert first.header("authorization") is not None
    assert second.header("authorization") is None  # no key, and the old Basic pair is gone


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("127.0.0.1:8000/v1", "base_url needs http:// or https://"),
        ("http:///v1", "base_url needs a host"),
        ("http://127.0.0.1:70000/v1", "base_url needs a port from 1 to 65535"),
    ],
)
def test_an_assigned_base_url_is_checked_like_the_constructors(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fluxstream.AsyncClient(url)
    c = fluxstream.AsyncClient("http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match=message):
        c.base_url = url
    assert c.base_url == "http://127.0.0.1:9/v1"  # a refused URL changes nothing
