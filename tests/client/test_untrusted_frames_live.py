"""What the sans-IO layers do with untrusted frames, seen through the client over a real socket
(127.0.0.1): the typed outcomes reach ``AsyncClient`` users, and no stream ends ``cancelled`` or
with an untyped exception because of server-controlled input."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from raw_upstream import HEAD, LIFE, MSG, answering, upstream
from sse_frames import frame

import fluxstream
from fluxstream import Outcome, RetryPolicy, StreamLimits, Timeouts
from fluxstream.errors import StreamFailedError, StreamTruncatedError

pytestmark = pytest.mark.anyio


def chunk(content: str, *, index: int = 0, finish: str | None = None) -> bytes:
    """A chunk written by hand: ``content`` is a raw JSON string literal (escapes kept)."""
    reason = "null" if finish is None else f'"{finish}"'
    return frame(f'{{"id":"c","model":"m","choices":[{{"index":{index},"delta":'
                 f'{{"content":{content}}},"finish_reason":{reason}}}]}}')


@asynccontextmanager
async def body_server(body: bytes, *, hold: float = 0.0) -> AsyncIterator[str]:
    """Every connection gets ``body`` after the response head, then (after ``hold`` seconds
    of silence) the connection closes."""
    async with upstream(answering(HEAD + body, hold=hold), life=hold + LIFE) as up:
        yield up.base


def client(base: str, **options: object) -> fluxstream.AsyncClient:
    return fluxstream.AsyncClient(base, api_key="k", retry=RetryPolicy(max_attempts=1),
                                  **options)  # type: ignore[arg-type]


async def test_surrogate_halves_across_frames_live() -> None:
    body = chunk('"a\\ud83d"') + chunk('"\\ude42b"', finish="stop") + b"data: [DONE]\n\n"
    async with body_server(body) as base, client(base) as c:
        with anyio.fail_after(10):
            reply = await c.chat.complete(model="m", messages=MSG)
    assert reply.text == "a\U0001f642b" and reply.outcome is Outcome.DONE
    assert reply.skipped_frames == 0


async def test_sentinel_without_finish_reason_live() -> None:
    body = chunk('"8 of 300 tokens"') + b"data: [DONE]\n\n"
    async with body_server(body) as base:
        async with client(base) as c:
            with anyio.fail_after(10), pytest.raises(StreamTruncatedError) as info:
                await c.chat.complete(model="m", messages=MSG)
        assert info.value.reply is not None
        assert info.value.reply.end_reason == "sentinel without a finish reason"
        assert info.value.reply.text == "8 of 300 tokens"
        async with client(base, require_finish_reason=False) as c:
            with anyio.fail_after(10):
                reply = await c.chat.complete(model="m", messages=MSG)
        assert reply.outcome is Outcome.DONE and reply.text == "8 of 300 tokens"


async def test_choices_not_a_list_live() -> None:
    body = (b'data: {"choices": 5}\n\ndata: {"choices": true}\n\n'
            + chunk('"ok"', finish="stop") + b"data: [DONE]\n\n")
    async with body_server(body) as base, client(base) as c:
        with anyio.fail_after(10):
            reply = await c.chat.complete(model="m", messages=MSG)
    assert reply.text == "ok" and reply.skipped_frames == 2 and reply.outcome is Outcome.DONE


async def test_limit_ends_the_live_stream_failed_with_the_reply() -> None:
    body = chunk('"kept"') + chunk('"x"', index=1) + chunk('"y"', finish="stop")
    async with body_server(body + b"data: [DONE]\n\n") as base:
        async with client(base, stream_limits=StreamLimits(max_choices=1)) as c:
            stream = c.chat.stream(model="m", messages=MSG)
            with anyio.fail_after(10), pytest.raises(StreamFailedError) as info:
                async with stream:
                    await stream.complete()
    reply = info.value.reply
    assert reply is not None and reply.outcome is Outcome.FAILED
    assert reply.text == "kept" and "max_choices" in (reply.end_reason or "")


async def test_a_limit_in_a_read_delivers_what_came_before_it_and_fails_at_once() -> None:
    """The read holds a delta, then a frame past ``max_choices``, and the server goes silent:
    the delta is delivered as an event (the reply holds it), and the stream fails at once,
    not after the read timeout."""
    body = chunk('"kept"') + chunk('"x"', index=1)
    async with body_server(body, hold=30) as base:
        async with client(
            base, stream_limits=StreamLimits(max_choices=1),
            timeouts=Timeouts(connect=20, read=20, write=20, pool=20),
        ) as c:
            delivered: list[str] = []
            started = anyio.current_time()
            with anyio.fail_after(10), pytest.raises(StreamFailedError) as info:
                async with c.chat.stream(model="m", messages=MSG) as stream:
                    async for event in stream:
                        if isinstance(event, fluxstream.TextDelta):
                            delivered.append(event.text)
            assert anyio.current_time() - started < 5
    reply = info.value.reply
    assert reply is not None and reply.outcome is Outcome.FAILED
    assert "".join(delivered) == reply.text == "kept"
    assert "max_choices" in (reply.end_reason or "")


async def test_huge_retry_and_id_live() -> None:
    body = (b"retry: " + b"9" * 5000 + b"\nid: " + b"7" * 5000 + b"\n"
            + chunk('"ok"', finish="stop") + b"data: [DONE]\n\n")
    async with body_server(body) as base, client(base) as c:
        with anyio.fail_after(10):
            stream = c.chat.stream(model="m", messages=MSG)
            async with stream:
                reply = await stream.complete()
            token = stream.resume_token()
    assert reply.text == "ok" and reply.outcome is Outcome.DONE
    assert token["reconnection_time"] == 2**31 - 1
