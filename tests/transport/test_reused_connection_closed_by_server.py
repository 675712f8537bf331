"""A server that closes a kept-alive connection after each stream (llama.cpp's server does).

The next request goes out on the pooled connection before the client has noticed the close,
and fails before any byte of a response. Such a request is sent again at once on a fresh
connection, as browsers do: no backoff, no warning, no retry spent, whether the close comes
right after the body or a few milliseconds later. Only that case: a failure on a fresh
connection, or after a response head arrived, is the retry policy's (or a drop).
"""

from __future__ import annotations

import logging
import time

import anyio
import pytest
from scripted_http import LIFE, MSG, Conn, Script, chunk, chunked_head, reply_body, upstream

import fluxstream
from fluxstream._retry import RetryPolicy

pytestmark = pytest.mark.anyio

TRANSPORTS = ["auto", "httpx"]


def close_after_each_stream(delay: float) -> Script:
    async def script(conn: Conn, index: int) -> None:
        if await conn.read_request() is None:
            return
        await conn.send(chunked_head() + chunk(reply_body(f"r{index}")) + b"0\r\n\r\n")
        await anyio.sleep(delay)  # then the connection is closed, never answered again

    return script


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("delay", [0.0, 0.005, 0.05])
async def test_back_to_back_streams_all_end_done_with_retries_off(
    transport: str, delay: float, anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with upstream(close_after_each_stream(delay)) as up, fluxstream.AsyncClient(
        up.base, "k", transport=transport, retry=RetryPolicy.off()
    ) as client:
        outcomes = []
        with anyio.fail_after(LIFE):
            for _ in range(6):
                stream = client.chat.stream(model="m", messages=MSG)
                async with stream:
                    async for _ in stream:
                        pass
                outcomes.append(stream.outcome)
                assert stream.stats.attempts == 1
    assert outcomes == [fluxstream.Outcome.DONE] * 6
    assert len(up.requests) >= 6
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_resend_waits_no_backoff_and_spends_no_retry(
    transport: str, anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with upstream(close_after_each_stream(0.05)) as up, fluxstream.AsyncClient(
        up.base, "k", transport=transport, retry=RetryPolicy(max_attempts=2)
    ) as client:
        for _ in range(4):
            started = time.monotonic()
            stream = client.chat.stream(model="m", messages=MSG)
            async with stream:
                async for _ in stream:
                    pass
            took = time.monotonic() - started
            assert stream.outcome is fluxstream.Outcome.DONE
            assert stream.stats.attempts == 1
            # A backoff is >= 0.17 s; the server's close comes 0.05 s after the body.
            assert took < 1.0, f"{took:.2f}s: waited like a retry"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_fresh_connection_closed_without_a_response_is_not_resent(
    transport: str, anyio_backend: str
) -> None:
    async def silent_close(conn: Conn, index: int) -> None:
        await conn.read_request()  # and close without a byte

    async with upstream(silent_close) as up, fluxstream.AsyncClient(
        up.base, "k", transport=transport, retry=RetryPolicy.off()
    ) as client:
        with anyio.fail_after(LIFE), pytest.raises(fluxstream.APIConnectionError):
            await client.chat.complete(model="m", messages=MSG)
    assert up.connections == 1 and len(up.requests) == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_reused_connection_that_breaks_after_the_head_is_not_resent(
    transport: str, anyio_backend: str
) -> None:
    async def head_then_close_on_the_second(conn: Conn, index: int) -> None:
        if await conn.read_request() is None:
            return
        await conn.send(chunked_head() + chunk(reply_body()) + b"0\r\n\r\n")
        if await conn.read_request() is None:
            return
        await conn.send(chunked_head())  # a head, then the close: a drop, not a resend

    async with upstream(head_then_close_on_the_second) as up, fluxstream.AsyncClient(
        up.base, "k", transport=transport, retry=RetryPolicy.off()
    ) as client:
        with anyio.fail_after(LIFE):
            first = await client.chat.stream(model="m", messages=MSG).until_done()
            second = await client.chat.stream(model="m", messages=MSG).until_done()
    assert first.outcome is fluxstream.Outcome.DONE
    assert second.outcome is fluxstream.Outcome.TRUNCATED
    assert up.connections == 1 and len(up.requests) == 2
