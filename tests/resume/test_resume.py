"""Retries and resume on the embedded server: text is never shown twice, nothing is lost.

Each drop test cuts the first attempt after N body bytes (``drop-after=N,fail-first=1`` with an
attempt key, so the resumed request is served cleanly) for N spread over the whole reply —
inside UTF-8 characters, inside JSON strings, between events, inside tool-call fragments — and
checks that the events a renderer saw add up to exactly the uninterrupted reply, with offsets
that are contiguous: no gap, no repeat.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from sse_frames import frame, frames

import fluxstream
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.server import serve
from fluxstream.server.script import expected_reply

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from resumable_renderer import Renderer  # the example is part of what is tested

pytestmark = pytest.mark.anyio

MESSAGES = [{"role": "user", "content": "A reply long enough to be cut in many places 🌊"}]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"tz": {"type": "string"}}}}},
]
FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05)


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": MESSAGES, "stream": True,
            "stream_options": {"include_usage": True}, **extra}


async def raw_body(base_url: str, request: dict[str, Any]) -> bytes:
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{base_url}/chat/completions", json=request)
        return response.content


def cut_points(data: bytes, count: int) -> list[int]:
    """``count`` cut offsets over the whole body, plus cuts inside multi-byte characters,
    right after a blank line and inside a tool call's arguments."""
    points = {round(i * (len(data) - 2) / (count - 1)) + 1 for i in range(count)}
    multibyte = [i for i, b in enumerate(data) if b >= 0xC0][:10]
    points.update(i + 1 for i in multibyte)  # one byte into a multi-byte character
    boundary = data.find(b"\n\n", len(data) // 3)
    points.update({boundary + 1, boundary + 2})  # between the two LFs, and just after
    args = data.find(b'"arguments":"', len(data) // 2)
    if args > 0:
        points.update({args + 14, args + 16})  # inside a tool call's argument fragment
    return sorted(p for p in points if 0 < p < len(data))


class Checker:
    """Collects what a renderer sees and checks offsets are contiguous."""

    def __init__(self) -> None:
        self.renderer = Renderer()
        self.next_offset: dict[tuple[int, str], int] = {}
        self.resets = 0

    def see(self, event: fluxstream.Event) -> None:
        if isinstance(event, fluxstream.Reset):
            self.resets += 1
            self.next_offset.clear()
        if isinstance(event, (fluxstream.TextDelta, fluxstream.ReasoningDelta)):
            where = (event.choice, event.type)
            assert event.offset == self.next_offset.get(where, 0), "gap or repeat"
            self.next_offset[where] = event.offset + len(event.text)
        self.renderer.apply(event)


def assert_reply(reply: fluxstream.Reply, expected: Any) -> None:
    assert reply.outcome is fluxstream.Outcome.DONE, reply.end_reason
    assert [c.text for c in reply.choices] == [c.text for c in expected.choices]
    assert [c.finish_reason for c in reply.choices] == [c.finish_reason for c in expected.choices]
    assert [[(t.index, t.id, t.name, t.arguments) for t in c.tool_calls] for c in reply.choices] \
        == [[(t.index, t.id, t.name, t.arguments) for t in c.tool_calls] for c in expected.choices]
    assert reply.usage is not None and expected.usage is not None
    assert reply.usage.total_tokens == expected.usage["total_tokens"]


async def stream_with_drop(
    client: fluxstream.AsyncClient, cut: int, attempt_key: str, **kwargs: Any
) -> tuple[fluxstream.ReplyStream, Checker]:
    checker = Checker()
    headers = {"X-Fluxstream-Fault": f"drop-after={cut},fail-first=1",
               "X-Fluxstream-Attempt-Key": attempt_key}
    stream = client.chat.stream(
        model="m", messages=MESSAGES, extra_headers=headers, content_key=attempt_key, **kwargs
    )
    with anyio.fail_after(10):
        async with stream:
            async for event in stream:
                checker.see(event)
    return stream, checker


@pytest.fixture
async def server() -> Any:
    async with serve(port=0) as srv:
        yield srv


# ---------------------------------------------------------------------------- Last-Event-ID


@pytest.mark.parametrize("tools", [False, True], ids=["text", "tool-calls"])
async def test_last_event_id_resume_at_every_cut_is_exact(server: Any, tools: bool) -> None:
    extra = {"tools": TOOLS} if tools else {}
    request = body(**extra)
    expected = expected_reply(request)
    data = await raw_body(server.base_url, request)
    cuts = cut_points(data, 50)
    assert len(cuts) >= 50
    async with fluxstream.AsyncClient(server.base_url, retry=FAST_RETRY) as client:
        for cut in cuts:
            stream, checker = await stream_with_drop(
                client, cut, f"lei-{tools}-{cut}", **extra
            )
            assert_reply(stream.reply, expected)
            # One recovery: a resume, or a plain retry when the cut came before any content.
            if cut < len(data) - len(b"data: [DONE]\n\n"):
                assert stream.stats.attempts == 2
            else:
                assert stream.stats.attempts <= 2
            if not tools:
                assert checker.renderer.text(stream.content_key) == expected.text
    resumed = [r for r in server.records.requests if r.last_event_id is not None]
    assert len(resumed) >= 45  # a cut inside the final bytes may land after [DONE]


async def test_last_event_id_reconnect_waits_for_the_servers_retry_delay(server: Any) -> None:
    async with fluxstream.AsyncClient(server.base_url) as client:
        await stream_with_drop(client, 2000, "delay")
    first, second = server.records.requests[-2:]
    assert second.last_event_id and second.time - first.time >= 0.05  # the server's retry: 50


def test_events_already_delivered_are_dropped_when_a_server_starts_over() -> None:
    """A server that ignores Last-Event-ID and resends from the top shows nothing twice."""
    def event(i: int, text: str) -> bytes:
        return frame({"id": "c", "choices": [{"index": 0, "delta": {"content": text}}]}, id=str(i))

    parser = fluxstream.StreamParser(content_key="k")
    seen = parser.feed(b"".join(event(i, f"t{i} ") for i in range(1, 4)))
    assert parser.last_event_id == "3"
    parser.new_connection(resume_after=parser.last_event_id)
    again = parser.feed(b"".join(event(i, f"t{i} ") for i in range(1, 6)))
    texts = [e.text for e in seen + again if isinstance(e, fluxstream.TextDelta)]
    assert texts == ["t1 ", "t2 ", "t3 ", "t4 ", "t5 "]
    assert [e.offset for e in again if isinstance(e, fluxstream.TextDelta)] == [9, 12]


# ---------------------------------------------------------------------------- continuation


@pytest.mark.parametrize("echo", [False, True], ids=["exact", "provider-echoes-overlap"])
async def test_continuation_resume_is_exact(server: Any, echo: bool) -> None:
    request = body()
    expected = expected_reply(request)
    data = await raw_body(server.base_url, request)
    policy = ResumePolicy(last_event_id=False, continuation=True, min_overlap=4)
    headers_profile = {"X-Fluxstream-Profile": "prefix-echo"} if echo else {}
    async with fluxstream.AsyncClient(
        server.base_url, retry=FAST_RETRY, resume=policy, headers=headers_profile
    ) as client:
        done = 0
        for cut in cut_points(data, 50):
            stream, checker = await stream_with_drop(client, cut, f"cont-{echo}-{cut}")
            reply = stream.reply
            if reply.outcome is fluxstream.Outcome.TRUNCATED:
                # Cut after the finish chunk: the text is whole, only the trailing usage chunk
                # and the sentinel were lost, and a finished choice cannot be continued.
                assert reply.text == expected.text and reply.choices[0].finish_reason == "stop"
                assert cut > len(data) * 0.9
                continue
            assert reply.text == expected.text == checker.renderer.text(stream.content_key)
            assert reply.choices[0].finish_reason == "stop"
            done += 1
    assert done >= 45
    prefixed = [r for r in server.records.requests
                if r.json and r.json["messages"][-1].get("prefix") is True]
    assert len(prefixed) >= 45


# ---------------------------------------------------------------------------- restart


async def test_restart_replaces_the_partial_reply_and_announces_it(server: Any) -> None:
    request = body()
    expected = expected_reply(request)
    data = await raw_body(server.base_url, request)
    policy = ResumePolicy(last_event_id=False, restart=True)
    restarted = 0
    async with fluxstream.AsyncClient(server.base_url, retry=FAST_RETRY, resume=policy) as client:
        for cut in cut_points(data, 50)[::5]:
            stream, checker = await stream_with_drop(client, cut, f"restart-{cut}")
            assert_reply(stream.reply, expected)
            # A cut before any content is a plain retry (nothing to replace), later ones restart.
            assert checker.resets == stream.stats.resumes
            assert checker.renderer.text(stream.content_key) == expected.text
            restarted += checker.resets
    assert restarted >= 8


async def test_without_a_policy_a_drop_stays_truncated(server: Any) -> None:
    async with fluxstream.AsyncClient(server.base_url, resume=ResumePolicy.off()) as client:
        stream, checker = await stream_with_drop(client, 1500, "off")
    assert stream.reply.outcome is fluxstream.Outcome.TRUNCATED
    assert stream.reply.text and checker.resets == 0
    assert len(server.records.requests) == 1


# ---------------------------------------------------------------------------- resume token


async def test_resume_token_lets_another_client_finish_the_stream(server: Any) -> None:
    request = body()
    expected = expected_reply(request)
    async with fluxstream.AsyncClient(server.base_url, resume=ResumePolicy.off()) as client:
        stream, _ = await stream_with_drop(client, 2500, "token")
    assert stream.reply.outcome is fluxstream.Outcome.TRUNCATED
    partial = stream.reply.text
    token = json.loads(json.dumps(stream.resume_token()))  # travels as JSON
    assert token["key"] == "token" and token["last_event_id"]

    async with fluxstream.AsyncClient(server.base_url) as other:  # "another process"
        resumed = other.chat.resume(
            token, extra_headers={"X-Fluxstream-Attempt-Key": "token"}
        )
        async with resumed:
            events = [e async for e in resumed]
    assert_reply(resumed.reply, expected)
    deltas = [e for e in events if isinstance(e, fluxstream.TextDelta)]
    assert deltas[0].offset == len(partial) and deltas[0].key == "token"
    assert partial + "".join(d.text for d in deltas) == expected.text
    assert server.records.requests[-1].last_event_id == token["last_event_id"]


# ---------------------------------------------------------------------------- retries


async def test_retries_before_content_with_backoff_and_a_log_line_each(
    server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="fluxstream")
    headers = {"X-Fluxstream-Fault": "fail-first=2,status=503", "X-Fluxstream-Attempt-Key": "r1"}
    async with fluxstream.AsyncClient(server.base_url, retry=FAST_RETRY) as client:
        reply = await client.chat.complete(model="m", messages=MESSAGES, extra_headers=headers)
    assert_reply(reply, expected_reply(body()))
    assert [r.attempt for r in server.records.requests] == [1, 2, 3]
    assert len([r for r in caplog.records if "retry" in r.getMessage()]) == 2


async def test_retry_after_is_honoured(server: Any) -> None:
    headers = {"X-Fluxstream-Fault": "fail-first=1,status=429,retry-after=0.3",
               "X-Fluxstream-Attempt-Key": "r2"}
    policy = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=5)
    async with fluxstream.AsyncClient(server.base_url, retry=policy) as client:
        started = time.monotonic()
        await client.chat.complete(model="m", messages=MESSAGES, extra_headers=headers)
    assert time.monotonic() - started >= 0.3
    first, second = server.records.requests
    assert second.time - first.time >= 0.3


async def test_retries_are_bounded_and_can_be_switched_off(server: Any) -> None:
    headers = {"X-Fluxstream-Fault": "fail-first=9,status=502", "X-Fluxstream-Attempt-Key": "r3"}
    async with fluxstream.AsyncClient(server.base_url, retry=FAST_RETRY) as client:
        with pytest.raises(fluxstream.APIStatusError) as info:
            await client.chat.complete(model="m", messages=MESSAGES, extra_headers=headers)
    assert info.value.status_code == 502 and len(server.records.requests) == 3
    server.records.clear()
    headers["X-Fluxstream-Attempt-Key"] = "r4"
    async with fluxstream.AsyncClient(server.base_url, retry=RetryPolicy.off()) as client:
        with pytest.raises(fluxstream.APIStatusError):
            await client.chat.complete(model="m", messages=MESSAGES, extra_headers=headers)
    assert len(server.records.requests) == 1
    server.records.clear()
    headers = {"X-Fluxstream-Fault": "fail-first=1,status=400", "X-Fluxstream-Attempt-Key": "r5"}
    async with fluxstream.AsyncClient(server.base_url, retry=FAST_RETRY) as client:
        with pytest.raises(fluxstream.APIStatusError):  # a 400 is not worth a second try
            await client.chat.complete(model="m", messages=MESSAGES, extra_headers=headers)
    assert len(server.records.requests) == 1


async def test_connect_errors_are_retried_then_raised(caplog: pytest.LogCaptureFixture) -> None:
    import socket

    caplog.set_level(logging.WARNING, logger="fluxstream")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with fluxstream.AsyncClient(f"http://127.0.0.1:{port}/v1", retry=FAST_RETRY) as client:
        with pytest.raises(fluxstream.APIConnectionError):
            await client.chat.complete(model="m", messages=MESSAGES)
    assert len([r for r in caplog.records if "retry" in r.getMessage()]) == 2


@pytest.mark.asyncio_only  # respx mocks httpx's transport; one backend is enough
async def test_error_event_before_any_content_is_retried(anyio_backend: str) -> None:
    respx = pytest.importorskip("respx")
    error = (b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'
             b"data: [DONE]\n\n")
    chunk = {"id": "c1", "model": "m", "choices": [
        {"index": 0, "delta": {"content": "fine"}, "finish_reason": "stop"}]}
    good = frames(chunk, done=True)
    sse = {"content-type": "text/event-stream"}
    with respx.mock(base_url="http://mock.local/v1") as mock:
        route = mock.post("/chat/completions")
        route.side_effect = [httpx.Response(200, content=error, headers=sse),
                             httpx.Response(200, content=good, headers=sse)]
        async with fluxstream.AsyncClient("http://mock.local/v1", "sk-t",
                                          retry=FAST_RETRY) as client:
            async with client.chat.stream(model="m", messages=MESSAGES) as stream:
                events = [e async for e in stream]
    assert route.call_count == 2
    assert stream.reply.text == "fine" and stream.reply.error is None
    assert stream.reply.outcome is fluxstream.Outcome.DONE
    assert not any(isinstance(e, (fluxstream.ErrorEvent, fluxstream.Reset)) for e in events)


def test_backoff_is_full_jitter_within_bounds() -> None:
    import random

    policy = RetryPolicy(max_attempts=6, base_delay=0.5, max_delay=4.0)
    rng = random.Random(7)
    for attempt in range(1, 6):
        cap = min(4.0, 0.5 * 2 ** (attempt - 1))
        delays = [policy.delay(attempt, rng=rng) for _ in range(200)]
        assert min(delays) >= 0 and max(delays) <= cap
        assert max(delays) > cap * 0.8  # full jitter spans the whole range
    assert policy.delay(1, retry_after=3.0, rng=rng) == 3.0
    assert policy.delay(1, retry_after=60.0, rng=rng) == 4.0
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


def test_a_transport_error_is_never_a_finished_stream() -> None:
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"},
                                     "finish_reason": "stop"}]}
    body = frame(chunk, id="1")
    clean = fluxstream.StreamParser()
    clean.feed(body)
    clean.close()
    assert clean.reply.outcome is fluxstream.Outcome.FINISHED
    broken = fluxstream.StreamParser()
    broken.feed(body)
    broken.close(cause=ConnectionResetError("reset by peer"))
    assert broken.reply.outcome is fluxstream.Outcome.TRUNCATED
    assert "reset by peer" in (broken.reply.end_reason or "")


def test_an_event_cut_at_the_end_does_not_count_as_delivered() -> None:
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
    whole = frame(chunk, id="1")
    cut = f"id: 2\ndata: {json.dumps(chunk)}".encode()[:-5]
    parser = fluxstream.StreamParser()
    parser.feed(whole + cut)
    parser.close()
    assert parser.reply.outcome is fluxstream.Outcome.TRUNCATED
    assert parser.last_event_id == "1"  # a resume must ask for event 2 again
