"""Lifecycle edge cases of ``ReplyStream``: one test per defect a review found, so none returns.

Real sockets (the embedded server) where the transport matters; a scripted httpx transport
where a test needs a response no honest server gives (a 400 on the reconnect, a bad gzip body).
"""

from __future__ import annotations

import gc
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from sse_frames import chat_text
from waiting import WITHIN, until

import fluxstream
from fluxstream import Timeouts
from fluxstream._retry import RetryPolicy
from fluxstream.server import serve

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "hi there"}]
#: A wait (backoff, delayed response, stall) that a prompt cancel or close must not sit out.
BACKOFF = 10.0
#: "Prompt": well under ``BACKOFF``, with room for a loaded worker's stalls.
PROMPT = 2.0
SSE = {"content-type": "text/event-stream"}


@pytest.fixture
async def server() -> AsyncIterator[Any]:
    async with serve(port=0) as srv:
        yield srv


class Body(httpx.AsyncByteStream):
    """A response body that yields parts, then raises (a connection that breaks)."""

    def __init__(self, parts: list[bytes], exc: Exception | None = None) -> None:
        self.parts, self.exc = parts, exc

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for part in self.parts:
            yield part
        if self.exc is not None:
            raise self.exc


# ---------------------------------------------------------------------------- structure


async def test_an_abandoned_wrapping_generator_does_not_cancel_the_caller(
    server: Any, anyio_backend: str
) -> None:
    """The FastAPI/Starlette pattern: a generator around the stream, abandoned by its consumer."""
    async with fluxstream.AsyncClient(server.base_url) as client:

        async def tokens() -> AsyncIterator[str]:
            async with client.chat.stream(
                model="m", messages=MSG, extra_headers={"X-Fluxstream-Fault": "drip=0.01"}
            ) as stream:
                async for text in stream.text():
                    yield text

        agen = tokens()
        async for _ in agen:
            break
        await agen.aclose()
        del agen
        gc.collect()
        await anyio.sleep(0.2)  # the caller's task is still alive and uncancelled
        reply = await client.chat.complete(model="m", messages=MSG)
        assert reply.outcome is fluxstream.Outcome.DONE
        await server.wait_disconnect(timeout=WITHIN, completed=False)


async def test_streams_may_close_out_of_order_and_from_another_task(server: Any) -> None:
    async with fluxstream.AsyncClient(server.base_url) as client:
        slow = {"X-Fluxstream-Fault": "drip=0.02"}
        first = client.chat.stream(model="m", messages=MSG, extra_headers=slow)
        second = client.chat.stream(model="m", messages=MSG, extra_headers=slow)
        await first.__aenter__()
        await second.__aenter__()
        await first.__aexit__(None, None, None)  # not LIFO
        async with anyio.create_task_group() as tg:
            tg.start_soon(second.__aexit__, None, None, None)  # another task
        assert first.outcome is second.outcome is fluxstream.Outcome.CANCELLED


async def test_coalesced_text_works_without_async_with(server: Any) -> None:
    async with fluxstream.AsyncClient(server.base_url) as client:
        stream = client.chat.stream(
            model="m", messages=MSG, extra_headers={"X-Fluxstream-Fault": "drip=0.003"}
        )
        # 30 deltas 3 ms apart, joined per 0.2 s: 20 pieces would take 4 s of delivery,
        # which no loaded machine's slowness reaches (0.02 s frames did: 0.4 s)
        pieces = [p async for p in stream.text(coalesce=0.2)]
        assert "".join(pieces) == stream.reply.text and stream.outcome == "done"
        assert len(pieces) < 20


# ---------------------------------------------------------------------------- cancel()


async def test_cancel_during_a_retry_backoff_is_prompt_and_sends_nothing_more(
    server: Any,
) -> None:
    policy = RetryPolicy(max_attempts=3, base_delay=BACKOFF, max_delay=BACKOFF)
    async with fluxstream.AsyncClient(server.base_url, retry=policy) as client:
        stream = client.chat.stream(
            model="m", messages=MSG,
            extra_headers={
                "X-Fluxstream-Fault": f"status=503,retry-after={BACKOFF:g},fail-first=1"
            },
        )
        cancelled_at: list[float] = []

        async def canceller() -> None:
            # once the 503 is written: the client is then in (or entering) its backoff
            await until(lambda: server.records.responses, "the 503 answered")
            cancelled_at.append(time.monotonic())
            stream.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(canceller)
            async with stream:
                async for _ in stream:
                    pass
        assert time.monotonic() - cancelled_at[0] < PROMPT  # not after the backoff
        assert stream.outcome is fluxstream.Outcome.CANCELLED
        assert len(server.records.requests) == 1


async def test_cancel_before_open_sends_nothing_and_cancel_while_waiting_is_prompt(
    server: Any,
) -> None:
    async with fluxstream.AsyncClient(server.base_url) as client:
        stream = client.chat.stream(model="m", messages=MSG)
        stream.cancel()
        async with stream:
            assert [e async for e in stream] == []
        assert stream.outcome is fluxstream.Outcome.CANCELLED
        assert server.records.requests == []

        stream = client.chat.stream(
            model="m", messages=MSG, extra_headers={"X-Fluxstream-Fault": f"delay={BACKOFF:g}"}
        )
        cancelled_at: list[float] = []

        async def canceller() -> None:
            # once the request is in: the client then waits for the (delayed) response
            await until(lambda: server.records.requests, "the request received")
            cancelled_at.append(time.monotonic())
            stream.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(canceller)
            async with stream:
                pass
        assert time.monotonic() - cancelled_at[0] < PROMPT  # not when the response came
        assert stream.outcome is fluxstream.Outcome.CANCELLED


async def test_aclose_from_another_task_is_never_resumed(server: Any) -> None:
    async with fluxstream.AsyncClient(server.base_url) as client:
        stream = client.chat.stream(
            model="m", messages=MSG,
            extra_headers={"X-Fluxstream-Fault": f"stall={BACKOFF:g},stall-after-events=3"},
        )
        reading = anyio.Event()
        closed_at: list[float] = []

        async def closer() -> None:
            await reading.wait()  # the stream is open; its reads then wait in the stall
            closed_at.append(time.monotonic())
            await stream.aclose()

        async with anyio.create_task_group() as tg:
            tg.start_soon(closer)
            async for _ in stream:
                reading.set()
        assert time.monotonic() - closed_at[0] < PROMPT  # not at the stall's end
        assert stream.outcome is fluxstream.Outcome.CANCELLED
        assert stream.stats.attempts == 1 and len(server.records.requests) == 1


async def test_a_timeout_while_opening_states_the_outcome(server: Any) -> None:
    async with fluxstream.AsyncClient(server.base_url) as client:
        stream = client.chat.stream(
            model="m", messages=MSG, extra_headers={"X-Fluxstream-Fault": "delay=3"}
        )
        with pytest.raises(TimeoutError), anyio.fail_after(0.3):
            async with stream:
                pass
    assert stream.outcome is fluxstream.Outcome.CANCELLED


# ---------------------------------------------------------------------------- outcomes


def scripted_client(handler: Any, **kwargs: Any) -> fluxstream.AsyncClient:
    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return fluxstream.AsyncClient("http://scripted.test/v1", "sk-test", http_client=http, **kwargs)


async def test_a_failed_reconnect_after_content_is_a_truncation_with_its_cause(
    anyio_backend: str,
) -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            return httpx.Response(200, headers=SSE, stream=Body(
                [chat_text("Hello ", "1"), chat_text("wor", "2")], httpx.ReadError("peer reset")))
        return httpx.Response(400, json={"error": {"message": "bad resume"}})

    async with scripted_client(handler) as client:
        stream = client.chat.stream(model="m", messages=MSG)
        async with stream:
            events = [e async for e in stream]
    assert len(calls) == 2 and calls[1].headers["last-event-id"] == "2"
    assert isinstance(events[-1], fluxstream.End)
    assert stream.outcome is fluxstream.Outcome.TRUNCATED
    assert stream.reply.text == "Hello wor"
    assert isinstance(stream.cause, fluxstream.APIStatusError)
    calls.clear()
    async with scripted_client(handler) as client:
        with pytest.raises(fluxstream.StreamTruncatedError) as info:
            await client.chat.complete(model="m", messages=MSG)
    assert info.value.reply is not None and info.value.reply.text == "Hello wor"


async def test_a_broken_body_encoding_fails_with_the_partial_reply(anyio_backend: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={**SSE, "content-encoding": "gzip"}, stream=Body([b"not gzip at all"])
        )

    async with scripted_client(handler) as client:
        with pytest.raises(fluxstream.StreamFailedError) as info:
            await client.chat.complete(model="m", messages=MSG)
    assert info.value.reply is not None
    assert info.value.reply.outcome is fluxstream.Outcome.FAILED


async def test_strict_mode_raises_a_typed_error_with_the_reply(anyio_backend: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = chat_text("ok", "1") + b"data: not-json\n\n"
        return httpx.Response(200, headers=SSE, content=body)

    async with scripted_client(handler) as client:
        with pytest.raises(fluxstream.StreamFailedError) as info:
            await client.chat.complete(model="m", messages=MSG, strict=True)
    assert isinstance(info.value.__cause__, fluxstream.FrameDecodeError)
    assert info.value.reply is not None and info.value.reply.text == "ok"


async def test_non_transient_error_events_are_not_retried(anyio_backend: str) -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        body = (b'data: {"error": {"message": "context too long", '
                b'"type": "invalid_request_error"}}\n\ndata: [DONE]\n\n')
        return httpx.Response(200, headers=SSE, content=body)

    async with scripted_client(handler) as client:
        with pytest.raises(fluxstream.StreamFailedError, match="context too long"):
            await client.chat.complete(model="m", messages=MSG)
    assert len(calls) == 1


# ---------------------------------------------------------------------------- timeouts, budget


async def test_the_stall_clock_starts_with_each_connection(server: Any) -> None:
    headers = {"X-Fluxstream-Fault": "status=503,retry-after=1,fail-first=1",
               "X-Fluxstream-Attempt-Key": "stall-clock", "X-Fluxstream-Profile": "heartbeats"}
    policy = RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=2)
    async with fluxstream.AsyncClient(
        server.base_url, timeouts=Timeouts(stall=0.6), retry=policy
    ) as client:
        reply = await client.chat.complete(model="m", messages=MSG, extra_headers=headers)
    assert reply.outcome is fluxstream.Outcome.DONE


async def test_retry_after_is_honoured_for_503_too(server: Any) -> None:
    headers = {"X-Fluxstream-Fault": "status=503,retry-after=0.4,fail-first=1",
               "X-Fluxstream-Attempt-Key": "ra503"}
    policy = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=2)
    async with fluxstream.AsyncClient(server.base_url, retry=policy) as client:
        await client.chat.complete(model="m", messages=MSG, extra_headers=headers)
    first, second = server.records.requests
    assert second.time - first.time >= 0.4


async def test_total_timeout_bounds_all_retries(server: Any) -> None:
    headers = {"X-Fluxstream-Fault": "status=503,fail-first=100",
               "X-Fluxstream-Attempt-Key": "budget"}
    policy = RetryPolicy(max_attempts=50, base_delay=0.2, max_delay=0.2, total_timeout=0.7)
    started = time.monotonic()
    async with fluxstream.AsyncClient(server.base_url, retry=policy) as client:
        with pytest.raises(fluxstream.APIStatusError):
            await client.chat.complete(model="m", messages=MSG, extra_headers=headers)
    assert time.monotonic() - started < 5  # without the time budget: 10 s of backoffs
    assert len(server.records.requests) < 50  # without the time budget: all 50


async def test_idle_timeout_message_names_the_real_limit(server: Any) -> None:
    stall = {"X-Fluxstream-Fault": "stall=3,stall-after-events=2"}
    async with fluxstream.AsyncClient(
        server.base_url, timeouts=Timeouts(connect=0.3, read=0.3, write=0.3, pool=0.3)
    ) as client:
        with pytest.raises(fluxstream.IdleTimeoutError, match=r"0\.3s"):
            await client.chat.complete(model="m", messages=MSG, extra_headers=stall)


async def test_a_timed_out_stream_without_async_with_frees_its_connection(server: Any) -> None:
    http = httpx.AsyncClient(limits=httpx.Limits(max_connections=1), timeout=httpx.Timeout(5))
    async with http, fluxstream.AsyncClient(
        server.base_url, http_client=http, timeouts=Timeouts(stall=0.3)
    ) as client:
        stalled = client.chat.stream(model="m", messages=MSG, extra_headers={
            "X-Fluxstream-Fault": "stall=3,stall-after-events=2,stall-heartbeat=0.05"})
        with pytest.raises(fluxstream.StallTimeoutError):
            async for _ in stalled:
                pass
        with anyio.fail_after(3):  # the only pooled connection was given back
            assert (await client.chat.complete(model="m", messages=MSG)).outcome == "done"


# ---------------------------------------------------------------------------- configuration


async def test_an_injected_clients_timeouts_are_kept(anyio_backend: str) -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(dict(request.extensions["timeout"]))
        finish = b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
        body = chat_text("x", "1") + finish + b"data: [DONE]\n\n"
        return httpx.Response(200, headers=SSE, content=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler), timeout=3) as http:
        async with fluxstream.AsyncClient("http://t/v1", "sk-t", http_client=http) as client:
            await client.chat.complete(model="m", messages=MSG)
        async with fluxstream.AsyncClient("http://t/v1", "sk-t", http_client=http,
                                          timeouts=Timeouts(idle=7)) as client:
            await client.chat.complete(model="m", messages=MSG)
    assert seen[0] == {"connect": 3, "read": 3, "write": 3, "pool": 3}
    assert seen[1]["read"] == 7 and seen[1]["connect"] == 3


async def test_a_callers_authorization_replaces_ours(server: Any) -> None:
    async with fluxstream.AsyncClient(
        server.base_url, api_key="sk-SECRET-123", headers={"Authorization": "Bearer proxy"}
    ) as client:
        await client.chat.complete(model="m", messages=MSG)
    headers = server.records.requests[-1].headers
    assert [v for k, v in headers if k == "authorization"] == ["Bearer <redacted>"]
    assert len([k for k, _ in headers if k == "authorization"]) == 1


def test_repr_hides_credentials_in_the_url() -> None:
    client = fluxstream.AsyncClient("https://user:pa55@example.test/v1?key=abc", api_key="sk-1")
    text = repr(client)
    assert "pa55" not in text and "abc" not in text and "sk-1" not in text


def test_the_sans_io_layers_import_without_the_http_stack() -> None:
    code = ("import sys, fluxstream.sse, fluxstream._parser; "
            "print(any(m in sys.modules for m in ('httpx', 'anyio', 'fluxstream._client')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_no_sentinel_and_an_open_connection_end_finished_after_the_grace(
    server: Any,
) -> None:
    """OCI-style: the finish arrives, then neither [DONE] nor a close; the stream must not hang.

    The proof does not depend on the scheduler: the server stalls for STALL seconds, so a
    stream that ended well before that (half of it is a margin no loaded 2-core machine eats
    up) ended by the grace, not by the server; and it cannot end before the grace elapsed.
    """
    stall = 30
    profile = {"X-Fluxstream-Profile": "no-done"}
    async with fluxstream.AsyncClient(server.base_url) as client:
        await client.chat.complete(model="m", messages=MSG, extra_headers=profile)
        # The server records a response after it has closed it, which may be after the client
        # is done: wait for the record (this was the flake: an empty list under trio).
        with anyio.fail_after(stall / 2):
            while not server.records.responses:  # noqa: ASYNC110 - records are plain lists
                await anyio.sleep(0.01)
        events = server.records.responses[-1].events
        stalled = {**profile, "X-Fluxstream-Fault": f"stall={stall},stall-after-events={events}"}
    # The grace counts from the finish; 1 s leaves the usage chunk (written right after the
    # finish) ample time to arrive on a busy machine.
    async with fluxstream.AsyncClient(
        server.base_url, timeouts=Timeouts(finish_grace=1.0)
    ) as client:
        started = time.monotonic()
        with anyio.fail_after(stall / 2):
            reply = await client.chat.complete(model="m", messages=MSG, extra_headers=stalled)
        assert 1.0 <= time.monotonic() - started < stall / 2
    assert reply.outcome is fluxstream.Outcome.FINISHED
    assert reply.choices[0].finish_reason == "stop" and reply.usage is not None
