"""The async session against the embedded server on 127.0.0.1, under asyncio and trio.

Transport matters here, so these tests use real sockets: every reply is compared with what the
server's deterministic script says it sent, and every cancellation is proven from the server's
side (it records when it noticed the client's disconnect).
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from waiting import WITHIN

import fluxstream
from fluxstream import Timeouts
from fluxstream.server import serve
from fluxstream.server.script import expected_reply

#: Backend and transport (``flavour``): httpx on asyncio and trio, aiohttp on asyncio.
pytestmark = [pytest.mark.anyio, pytest.mark.flavours]

USER = [{"role": "user", "content": "Stream me a reply about rivers and bridges"}]
KEY = "sk-test-SECRET-0123456789"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
        },
    },
]


TRANSPORT = {"name": "httpx"}


@pytest.fixture(autouse=True)
def transport(flavour: str) -> str:
    TRANSPORT["name"] = "aiohttp" if flavour.endswith("+aiohttp") else "httpx"
    return TRANSPORT["name"]


def Client(*args: Any, **kwargs: Any) -> fluxstream.AsyncClient:  # reads as the class it makes
    """``fluxstream.AsyncClient`` on the transport this test run is about."""
    if "http_client" not in kwargs:
        kwargs.setdefault("transport", TRANSPORT["name"])
    return fluxstream.AsyncClient(*args, **kwargs)


@pytest.fixture
async def server() -> AsyncIterator[Any]:
    async with serve(port=0) as srv:
        yield srv


def request_body(**params: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": USER, "stream": True,
                            "stream_options": {"include_usage": True}}
    body.update(params)
    return body


def assert_matches(reply: fluxstream.Reply, expected: Any) -> None:
    assert len(reply.choices) == len(expected.choices)
    for got, want in zip(reply.choices, expected.choices, strict=True):
        assert got.index == want.index
        assert got.text == want.text
        assert got.reasoning == want.reasoning
        assert got.finish_reason == want.finish_reason
        assert [(c.index, c.id, c.name, c.arguments) for c in got.tool_calls] == [
            (c.index, c.id, c.name, c.arguments) for c in want.tool_calls
        ]
    if expected.usage is None:
        assert reply.usage is None
    else:
        assert reply.usage is not None
        assert reply.usage.prompt_tokens == expected.usage["prompt_tokens"]
        assert reply.usage.completion_tokens == expected.usage["completion_tokens"]
        assert reply.usage.total_tokens == expected.usage["total_tokens"]


# ---------------------------------------------------------------------------- streaming


async def test_stream_events_and_reply_match_the_script(server: Any) -> None:
    async with Client(server.base_url, KEY) as client:
        texts: list[str] = []
        offsets: list[int] = []
        async with client.chat.stream(model="m", messages=USER) as stream:
            async for event in stream:
                if isinstance(event, fluxstream.TextDelta):
                    assert event.offset == sum(len(t) for t in texts)
                    offsets.append(event.offset)
                    texts.append(event.text)
        reply = stream.reply
    assert reply.outcome is fluxstream.Outcome.DONE
    assert_matches(reply, expected_reply(request_body()))
    assert "".join(texts) == reply.choices[0].text
    assert len(offsets) > 10
    body = server.records.requests[-1].json
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert stream.stats.time_to_first_token is not None
    assert stream.stats.bytes > 0 and stream.stats.events > len(offsets)


async def test_include_usage_can_be_turned_off(server: Any) -> None:
    async with Client(server.base_url) as client:
        reply = await client.chat.complete(model="m", messages=USER, include_usage=False)
    assert reply.usage is None
    assert "stream_options" not in server.records.requests[-1].json


@pytest.mark.parametrize(
    "profile",
    ["openai", "azure", "no-done", "nospace", "crlf", "heartbeats", "multiline", "repeat-role",
     "reasoning", "indexless-tools", "object-args"],
)
async def test_quirk_profiles_assemble_exactly(server: Any, profile: str) -> None:
    tools = TOOLS if profile in ("indexless-tools", "object-args") else None
    async with Client(server.base_url) as client:
        stream = client.chat.stream(
            model="m", messages=USER, tools=tools,
            extra_headers={"X-Fluxstream-Profile": profile},
        )
        async with stream:
            reply = await stream.until_done()
    body = request_body(**({"tools": TOOLS} if tools else {}))
    expected = expected_reply(body, profile)
    assert_matches(reply, expected)
    want = fluxstream.Outcome.DONE if expected.done else fluxstream.Outcome.FINISHED
    assert reply.outcome is want
    if profile == "heartbeats":
        assert reply.heartbeats > 0


async def test_parallel_tool_calls_and_n_choices(server: Any) -> None:
    async with Client(server.base_url) as client:
        reply = await client.chat.complete(model="m", messages=USER, tools=TOOLS)
        assert_matches(reply, expected_reply(request_body(tools=TOOLS)))
        assert [c.name for c in reply.choices[0].tool_calls] == ["get_weather", "get_time"]
        reply = await client.chat.complete(model="m", messages=USER, n=3)
        assert_matches(reply, expected_reply(request_body(n=3)))


async def test_text_iterator_and_coalescing(server: Any) -> None:
    expected = expected_reply(request_body()).text
    async with Client(server.base_url) as client:
        async with client.chat.stream(model="m", messages=USER) as stream:
            pieces = [piece async for piece in stream.text()]
        assert "".join(pieces) == expected and len(pieces) > 10

        # Slow drip: deltas 5 ms apart, frames of 40 ms -> joined, first token not delayed.
        headers = {"X-Fluxstream-Fault": "drip=0.005"}
        async with client.chat.stream(model="m", messages=USER, extra_headers=headers) as stream:
            started = time.monotonic()
            stamps: list[float] = []
            joined: list[str] = []
            async for piece in stream.text(coalesce=0.04):
                stamps.append(time.monotonic() - started)
                joined.append(piece)
        assert "".join(joined) == expected
        assert len(joined[0]) < 10  # the first token alone, at once
        assert len(joined) < len(pieces) / 2  # later deltas joined per frame
        # At most about one string per frame (the last one comes as soon as the bytes end).
        gaps = [b - a for a, b in itertools.pairwise(stamps[1:-1])]
        assert gaps and min(gaps) > 0.02


async def test_base_url_trailing_slash_and_env_fallback(
    server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Client(server.base_url + "/") as client:
        assert (await client.chat.complete(model="m", messages=USER)).outcome == "done"
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    async with Client() as client:
        assert client.base_url == server.base_url
        await client.chat.complete(model="m", messages=USER)
    assert server.records.requests[-1].header("authorization") != f"Bearer {KEY}"  # redacted


async def test_callers_http_client_is_used_and_never_closed(server: Any) -> None:
    seen: list[str] = []

    async def hook(request: httpx.Request) -> None:
        seen.append(str(request.url))

    async with httpx.AsyncClient(event_hooks={"request": [hook]}) as http:
        async with Client(server.base_url, http_client=http) as client:
            await client.chat.complete(model="m", messages=USER)
        assert not http.is_closed
        assert seen == [server.base_url + "/chat/completions"]


async def test_httpx2_client_works(server: Any, anyio_backend: str) -> None:
    httpx2 = pytest.importorskip("httpx2")
    async with httpx2.AsyncClient() as http:
        async with Client(server.base_url, http_client=http) as client:
            reply = await client.chat.complete(model="m", messages=USER)
    assert_matches(reply, expected_reply(request_body()))


# ---------------------------------------------------------------------------- before parsing


async def test_auth_error_is_typed_and_never_shows_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with serve(port=0, api_key="right-key") as srv:
        async with Client(srv.base_url, KEY) as client:
            assert KEY not in repr(client)
            with pytest.raises(fluxstream.AuthenticationError) as info:
                await client.chat.complete(model="m", messages=USER)
    err = info.value
    assert err.status_code == 401 and err.message
    for text in (str(err), repr(err), repr(err.body), caplog.text):
        assert KEY not in text


@pytest.mark.parametrize(
    ("fault", "kind", "status"),
    [
        ("status=404", fluxstream.NotFoundError, 404),
        ("status=429,retry-after=7", fluxstream.RateLimitError, 429),
        ("status=500", fluxstream.APIStatusError, 500),
        ("status=502,status-body=html", fluxstream.APIStatusError, 502),
    ],
)
async def test_http_errors_are_typed(
    server: Any, fault: str, kind: type[fluxstream.APIStatusError], status: int
) -> None:
    async with Client(server.base_url) as client:
        stream = client.chat.stream(
            model="m", messages=USER, extra_headers={"X-Fluxstream-Fault": fault}
        )
        with pytest.raises(kind) as info:
            async with stream:
                pass
    err = info.value
    assert type(err) is kind and err.status_code == status
    if status == 429:
        assert isinstance(err, fluxstream.RateLimitError) and err.retry_after == 7.0
    if "html" in fault:
        assert err.body_excerpt and "<" in err.body_excerpt
        assert "html" in err.message.lower()
    else:
        assert err.type is not None and err.message


async def test_wrong_path_is_not_found(server: Any) -> None:
    async with Client(server.base_url.rsplit("/v1", 1)[0] + "/nope") as client:
        with pytest.raises(fluxstream.NotFoundError):
            await client.chat.complete(model="m", messages=USER)


async def test_json_answer_to_a_stream_request_is_the_same_reply(server: Any) -> None:
    async with Client(server.base_url) as client:
        stream = client.chat.stream(
            model="m", messages=USER, extra_headers={"X-Fluxstream-Profile": "json"}
        )
        async with stream:
            events = [e async for e in stream]
    expected = expected_reply(request_body(), "json")
    assert_matches(stream.reply, expected)
    assert stream.reply.outcome in ("done", "finished")
    assert any(isinstance(e, fluxstream.TextDelta) for e in events)
    assert isinstance(events[-1], fluxstream.End)


async def test_other_content_type_is_a_typed_error(anyio_backend: str, transport: str) -> None:
    respx = pytest.importorskip("respx")
    if anyio_backend != "asyncio" or transport != "httpx":
        pytest.skip("respx mocks httpx's own transport; one run is enough for a header check")
    with respx.mock(base_url="http://mock.local/v1") as mock:
        mock.post("/chat/completions").respond(
            200, text="<html>login</html>", headers={"content-type": "text/html"}
        )
        async with Client("http://mock.local/v1", "sk-t") as client:
            with pytest.raises(fluxstream.ContentTypeError) as info:
                await client.chat.complete(model="m", messages=USER)
    assert "text/html" in str(info.value)


async def test_connection_refused_is_a_connection_error() -> None:
    with anyio.fail_after(5):
        port = _free_port()
        async with Client(f"http://127.0.0.1:{port}/v1") as client:
            with pytest.raises(fluxstream.APIConnectionError):
                await client.chat.complete(model="m", messages=USER)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------- truncation


@pytest.mark.parametrize(
    "fault", ["drop-after=700", "drop-after-events=5", "drop-after=700,drop-reset=1"]
)
async def test_drop_is_truncated_with_partial_text(server: Any, fault: str) -> None:
    expected = expected_reply(request_body()).text
    async with Client(server.base_url) as client:
        stream = client.chat.stream(
            model="m", messages=USER, extra_headers={"X-Fluxstream-Fault": fault}
        )
        async with stream:
            events = [e async for e in stream]
        reply = stream.reply
        assert reply.outcome is fluxstream.Outcome.TRUNCATED
        assert isinstance(events[-1], fluxstream.End) and events[-1].outcome == "truncated"
        text = reply.choices[0].text if reply.choices else ""
        assert text and expected.startswith(text) and text != expected
        assert reply.choices[0].finish_reason is None

        with pytest.raises(fluxstream.StreamTruncatedError) as info:
            await client.chat.complete(
                model="m", messages=USER, extra_headers={"X-Fluxstream-Fault": fault}
            )
        assert info.value.reply is not None and info.value.reply.choices[0].text == text


async def test_error_midstream_fails_and_keeps_partial_text(server: Any) -> None:
    async with Client(server.base_url) as client:
        with pytest.raises(fluxstream.StreamFailedError) as info:
            await client.chat.complete(
                model="m", messages=USER,
                extra_headers={"X-Fluxstream-Profile": "error-midstream"},
            )
    reply = info.value.reply
    assert reply is not None and reply.outcome is fluxstream.Outcome.FAILED
    expected = expected_reply(request_body(), "error-midstream")
    assert reply.choices[0].text == expected.choices[0].text
    assert reply.error is not None and expected.error is not None
    assert reply.error.message == expected.error["message"]


async def test_oversize_event_fails_with_a_typed_error(server: Any) -> None:
    async with Client(server.base_url, max_event_bytes=64 * 1024) as client:
        stream = client.chat.stream(
            model="m", messages=USER, extra_headers={"X-Fluxstream-Fault": "oversize=200000"}
        )
        with pytest.raises(fluxstream.StreamFailedError) as info:
            async with stream:
                async for _ in stream:
                    pass
    assert isinstance(info.value.__cause__, fluxstream.EventTooLargeError)
    assert stream.reply.outcome is fluxstream.Outcome.FAILED


# ---------------------------------------------------------------------------- timeouts


async def test_idle_timeout(server: Any) -> None:
    async with Client(server.base_url, timeouts=Timeouts(idle=0.3)) as client:
        stream = client.chat.stream(
            model="m", messages=USER,
            extra_headers={"X-Fluxstream-Fault": "stall=5,stall-after-events=3"},
        )
        started = time.monotonic()
        with pytest.raises(fluxstream.IdleTimeoutError) as info:
            async with stream:
                async for _ in stream:
                    pass
    assert time.monotonic() - started < 3
    assert info.value.reply is not None and info.value.reply.choices[0].text
    assert stream.reply.outcome is fluxstream.Outcome.FAILED
    await server.records.wait_disconnect(timeout=WITHIN)


async def test_stall_timeout_is_not_fooled_by_heartbeats(server: Any) -> None:
    """Ended by the stall timeout: heartbeats that fooled it would keep the stream open for
    the server's 30 s stall, far beyond the bound (which leaves room for a loaded worker)."""
    async with Client(server.base_url, timeouts=Timeouts(idle=2, stall=0.4)) as client:
        stream = client.chat.stream(
            model="m", messages=USER,
            extra_headers={
                "X-Fluxstream-Fault": "stall=30,stall-after-events=3,stall-heartbeat=0.05"
            },
        )
        started = time.monotonic()
        with pytest.raises(fluxstream.StallTimeoutError) as info:
            async with stream:
                async for _ in stream:
                    pass
    assert 0.35 < time.monotonic() - started < 5
    assert info.value.reply is not None and info.value.reply.heartbeats > 0
    assert info.value.reply.choices[0].text


# ---------------------------------------------------------------------------- cancellation

#: Half a second between events: a stream that read its body to the end instead of closing
#: would take seconds more (and end ``completed``), well beyond ``PROMPT``.
SLOW = {"X-Fluxstream-Fault": "drip=0.5"}
#: A quick drip, for streams cancelled where the moment the server notices does not matter.
DRIP = {"X-Fluxstream-Fault": "drip=0.02"}
#: "At once": the bound between a close and the server noticing it (or the stream ending),
#: with room for a loaded worker's stalls; the paths it rules out take seconds.
PROMPT = 1.0


async def _assert_disconnect_seen(server: Any, closed_at: float) -> None:
    record = await server.records.wait_disconnect(timeout=WITHIN, completed=False)
    latency = record.time - closed_at
    assert latency < PROMPT, f"server saw the disconnect after {latency:.3f}s"


async def _first_text(stream: fluxstream.ReplyStream) -> None:
    async for event in stream:
        if isinstance(event, fluxstream.TextDelta):
            return


async def test_leaving_async_with_early_closes_at_once(server: Any) -> None:
    async with Client(server.base_url) as client:
        async with client.chat.stream(model="m", messages=USER, extra_headers=SLOW) as stream:
            await _first_text(stream)
        closed_at = time.monotonic()
        await _assert_disconnect_seen(server, closed_at)
    assert stream.reply.outcome is fluxstream.Outcome.CANCELLED
    assert stream.reply.choices[0].text


async def test_break_closes_at_once(server: Any) -> None:
    async with Client(server.base_url) as client:
        async with client.chat.stream(model="m", messages=USER, extra_headers=SLOW) as stream:
            async for event in stream:
                if isinstance(event, fluxstream.TextDelta):
                    break
        await _assert_disconnect_seen(server, time.monotonic())
    assert stream.outcome is fluxstream.Outcome.CANCELLED


async def test_aclose_closes_at_once_and_twice_is_harmless(server: Any) -> None:
    async with Client(server.base_url) as client:
        stream = client.chat.stream(model="m", messages=USER, extra_headers=SLOW)
        await _first_text(stream)  # opened lazily by the first anext, no `async with`
        await stream.aclose()
        closed_at = time.monotonic()
        await stream.aclose()
        stream.cancel()
        await _assert_disconnect_seen(server, closed_at)
        assert stream.outcome is fluxstream.Outcome.CANCELLED
        # The pool is still healthy: the next request works on the same client.
        assert (await client.chat.complete(model="m", messages=USER)).outcome == "done"


async def test_cancel_from_another_task_interrupts_a_waiting_read(server: Any) -> None:
    stall = {"X-Fluxstream-Fault": "stall=10,stall-after-events=3"}
    async with Client(server.base_url) as client:
        async with client.chat.stream(model="m", messages=USER, extra_headers=stall) as stream:
            cancelled_at: list[float] = []
            texted = anyio.Event()

            async def canceller() -> None:
                await texted.wait()  # the reader then waits on a silent socket (the stall)
                cancelled_at.append(time.monotonic())
                stream.cancel()
                stream.cancel()  # twice is harmless

            events: list[Any] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(canceller)
                with anyio.fail_after(WITHIN):
                    async for event in stream:
                        events.append(event)
                        if isinstance(event, fluxstream.TextDelta):
                            texted.set()
            ended_at = time.monotonic()
        assert ended_at - cancelled_at[0] < PROMPT  # not at the 10 s stall's end
        assert isinstance(events[-1], fluxstream.End) and events[-1].outcome == "cancelled"
        await _assert_disconnect_seen(server, cancelled_at[0])
    assert stream.reply.choices[0].text


async def test_cancel_scope_and_timeout_close_at_once_and_propagate(server: Any) -> None:
    async with Client(server.base_url) as client:
        # anyio cancel scope (trio-style structured cancellation)
        stream = client.chat.stream(model="m", messages=USER, extra_headers=SLOW)
        with anyio.CancelScope() as scope:
            async with stream:
                async for event in stream:
                    if isinstance(event, fluxstream.TextDelta):
                        scope.cancel()
                        await anyio.sleep(1)  # interrupted by the cancellation
        assert scope.cancel_called
        closed_at = time.monotonic()
        await _assert_disconnect_seen(server, closed_at)
        assert stream.outcome is fluxstream.Outcome.CANCELLED

        # a caller's timeout around a blocked read
        server.records.clear()
        stream = client.chat.stream(
            model="m", messages=USER,
            extra_headers={"X-Fluxstream-Fault": "stall=10,stall-after-events=3"},
        )
        with pytest.raises(TimeoutError):
            # 0.3 s from the first event: the read then waits in the stall (a deadline from
            # the start could pass before the request was sent, on a loaded machine)
            with anyio.fail_after(WITHIN) as deadline:
                async with stream:
                    async for _ in stream:
                        deadline.deadline = min(deadline.deadline, anyio.current_time() + 0.3)
        await _assert_disconnect_seen(server, time.monotonic())
        assert stream.outcome is fluxstream.Outcome.CANCELLED


async def test_asyncio_task_cancel_propagates_cancelled_error(
    server: Any, anyio_backend: str
) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("asyncio.Task.cancel is asyncio-only; trio is covered by cancel scopes")
    import asyncio

    async with Client(server.base_url) as client:
        stream = client.chat.stream(
            model="m", messages=USER,
            extra_headers={"X-Fluxstream-Fault": "stall=10,stall-after-events=3"},
        )

        texted = asyncio.Event()

        async def consume() -> None:
            async with stream:
                async for event in stream:
                    if isinstance(event, fluxstream.TextDelta):
                        texted.set()  # the read then waits on a silent socket (the stall)

        task = asyncio.ensure_future(consume())
        await asyncio.wait_for(texted.wait(), WITHIN)
        task.cancel()
        cancelled_at = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()
        await _assert_disconnect_seen(server, cancelled_at)
        assert stream.outcome is fluxstream.Outcome.CANCELLED
        # cancelling twice is harmless
        task.cancel()
        stream.cancel()
        await stream.aclose()


async def test_no_pooled_connection_leaks_after_cancellations(server: Any) -> None:
    async with httpx.AsyncClient() as http:
        async with Client(server.base_url, http_client=http) as client:
            for _ in range(5):
                async with client.chat.stream(model="m", messages=USER, extra_headers=DRIP) as s:
                    await _first_text(s)
                    s.cancel()
            for _ in range(3):
                await client.chat.complete(model="m", messages=USER)
        pool = http._transport._pool  # type: ignore[attr-defined]
        connections = pool.connections
        assert len(connections) <= 1  # every cancelled stream's connection was closed
        assert all(not c.is_closed() and c.is_idle() for c in connections)


# ---------------------------------------------------------------------------- scale


# CPU-bound: 500 streams took 35 s on a loaded 2-core machine and outran a 60 s bound once;
# the bound is for a hang (a starved pool, a lost wake-up), not for the machine's speed.
@pytest.mark.timeout(300)
async def test_500_concurrent_streams_each_exact(server: Any) -> None:
    results: dict[int, fluxstream.Reply] = {}

    # The server thread serves 500 streams at once: on a loaded machine a stream's sentinel
    # can come seconds after its finish chunk, which the default 2 s grace would (rightly)
    # end as ``finished``; what is checked here is that every reply is exact and done.
    async with Client(server.base_url, timeouts=Timeouts(finish_grace=60)) as client:

        async def one(i: int) -> None:
            messages = [{"role": "user", "content": f"stream number {i} about rivers"}]
            results[i] = await client.chat.complete(model="m", messages=messages, max_tokens=12)

        with anyio.fail_after(240):
            async with anyio.create_task_group() as tg:
                for i in range(500):
                    tg.start_soon(one, i)
    assert len(results) == 500
    for i, reply in results.items():
        body = request_body(
            messages=[{"role": "user", "content": f"stream number {i} about rivers"}],
            max_tokens=12,
        )
        assert_matches(reply, expected_reply(body))
        assert reply.outcome is fluxstream.Outcome.DONE


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "messages": [{"role": "user", "content": "héllo \u2028 \U0001f600"}]},
        {"max_tokens": 10**30, "nested": {"list": [1, 2.5, None, True, False, "x"]}},
        {"tuple": (1, 2), "empty": {}, "int_key": {1: "one"}},
    ],
)
def test_request_bodies_encode_to_the_same_json_as_the_standard_library(body: Any) -> None:
    from fluxstream._client import encode_body

    encoded = encode_body(body)
    assert isinstance(encoded, bytes)
    assert json.loads(encoded) == json.loads(json.dumps(body))


def test_a_body_json_cannot_encode_is_a_type_error() -> None:
    from fluxstream._client import encode_body

    with pytest.raises(TypeError):
        encode_body({"model": object()})
