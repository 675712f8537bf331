"""A live stream to a page, over real sockets, under uvicorn and hypercorn, as a bare ASGI app,
a Starlette app and a FastAPI app: the events, the page leaving (the upstream closed at once:
a few milliseconds quiet, printed), heartbeats, a page that stops reading, and a reconnect
that nothing can resume."""

from __future__ import annotations

import json
import socket
import time

import anyio
import pytest
from web_support import APPS, SERVERS, http_get, live_app, page_of, read_events

import fluxstream
from fluxstream.server import ServerThread, expected_reply
from fluxstream.web import EventIds

pytestmark = pytest.mark.anyio


def reply_text(max_tokens: int) -> str:
    return expected_reply({
        "model": "m@fill-max-tokens", "messages": [{"role": "user", "content": "web"}],
        "max_tokens": max_tokens,
        "stream": True, "stream_options": {"include_usage": True},
    }).text


@pytest.mark.parametrize("app_kind", APPS)
@pytest.mark.parametrize("server", SERVERS)
async def test_a_live_reply_reaches_the_page_whole_with_named_events_and_ids(
    server: str, app_kind: str, upstream: ServerThread,
) -> None:
    async with live_app(upstream.base_url, server, app_kind) as base:
        status, headers, body, complete = await http_get(base, "/live?max_tokens=40")
    assert status == 200 and complete
    assert headers["content-type"] == "text/event-stream; charset=utf-8"
    assert headers["cache-control"] == "no-cache"
    events = read_events(body)
    page = page_of(body)
    assert page.shown == reply_text(40) and page.twice == 0
    assert page.outcome == "done" and page.kinds[-1] == "end"
    assert {"text", "finish", "usage", "end"} <= set(page.kinds)
    ids = [event_id for _, _, event_id in events]
    assert all(ids) and len(set(ids)) == len(ids)  # every event can be named on a reconnect
    tags = {event_id.partition(".")[0] for event_id in ids if event_id}
    assert len(tags) == 1


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
@pytest.mark.parametrize("app_kind", ["asgi", "fastapi"])
@pytest.mark.parametrize("server", SERVERS)
async def test_the_page_leaving_closes_the_upstream_at_once(
    server: str, app_kind: str, transport: str, upstream: ServerThread,
) -> None:
    await leave_and_time_the_upstream_close(server, app_kind, transport, upstream)


@pytest.mark.trio_only
async def test_on_trio_under_hypercorn_the_reply_arrives_and_leaving_closes_the_upstream(
    upstream: ServerThread,
) -> None:
    async with live_app(upstream.base_url, "hypercorn") as base:
        status, _, body, complete = await http_get(base, "/live?max_tokens=20")
    assert status == 200 and complete
    page = page_of(body)
    assert page.shown == reply_text(20) and page.outcome == "done"
    await leave_and_time_the_upstream_close("hypercorn", "asgi", "httpx", upstream)


async def leave_and_time_the_upstream_close(
    server: str, app_kind: str, transport: str, upstream: ServerThread,
) -> None:
    """A page reads its first text, then closes its connection: the upstream request must
    be closed at once (the server's record of the close says when), not at the reply's end
    (8 s at the drip). Quiet, it takes a few milliseconds (printed; the recipe's "well
    within 100 ms"); the bound leaves a loaded machine's stalled loops their slack, and a
    stream that went on after the page left would still cross it by seconds."""
    upstream.records.clear()
    async with live_app(upstream.base_url, server, app_kind, transport=transport) as base:
        port = int(base.rpartition(":")[2])
        conn = await anyio.connect_tcp("127.0.0.1", port)
        await conn.send(b"GET /live?max_tokens=400&fault=drip%3D0.02 HTTP/1.1\r\n"
                        b"Host: x\r\n\r\n")
        seen = b""
        with anyio.fail_after(10):
            while b"event: text" not in seen:
                seen += await conn.receive()
        assert upstream.records.find_disconnect(completed=False) is None  # still going
        left = time.monotonic()
        await conn.aclose()
        record = await upstream.records.wait_disconnect(5, completed=False)
    took = record.time - left
    print(f"{server} {app_kind} {transport}: the upstream closed {took * 1000:.1f} ms after")
    assert took < 2.0, f"the upstream was closed {took:.3f} s after the page left"


@pytest.mark.parametrize("server", SERVERS)
async def test_heartbeats_keep_an_idle_connection_alive(
    server: str, upstream: ServerThread,
) -> None:
    async with live_app(upstream.base_url, server, options={"heartbeat": 0.05}) as base:
        # The upstream is silent for 1.5 s after its second event: 30 heartbeats' worth, so
        # five of them come even if a loaded machine stalls the server's loop for a second.
        status, _, body, complete = await http_get(
            base, "/live?max_tokens=5&fault=stall-after-events%3D2,stall%3D1.5")
    assert status == 200 and complete
    assert body.count(b": ping\n\n") >= 5, body[:400]
    page = page_of(body)
    assert page.shown == reply_text(5) and page.outcome == "done"


@pytest.mark.parametrize("server", SERVERS)
async def test_a_page_that_stops_reading_is_disconnected_after_the_send_timeout(
    server: str, upstream: ServerThread,
) -> None:
    async with live_app(upstream.base_url, server, options={"send_timeout": 0.3}) as base:
        port = int(base.rpartition(":")[2])
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a tiny window
        try:
            sock.settimeout(5)
            sock.connect(("127.0.0.1", port))
            sock.sendall(b"GET /live?max_tokens=100000 HTTP/1.1\r\nHost: x\r\n\r\n")
            # never read: the response's sends block once the buffers are full
            record = await upstream.records.wait_disconnect(30, completed=False)
        finally:
            sock.close()
    assert record.bytes_written < 40_000_000  # stopped long before the reply's end


@pytest.mark.parametrize("server", SERVERS)
async def test_a_reconnect_to_a_live_stream_is_refused_and_sends_no_request(
    server: str, upstream: ServerThread,
) -> None:
    async with live_app(upstream.base_url, server, "fastapi") as base:
        body = (await http_get(base, "/live?max_tokens=3")).body
        last_id = read_events(body)[-1][2]
        assert last_id is not None
        asked = len(upstream.records.requests)
        answers = {}
        for name, value in [("same", last_id), ("malformed", "12-0"),
                            ("other", EventIds("0123456789ab").id_of(
                                fluxstream.relay.Position(1, 0)))]:
            answers[name] = await http_get(base, "/live?max_tokens=3",
                                           headers={"Last-Event-ID": value})
        assert len(upstream.records.requests) == asked  # none of them reached the model
    assert answers["same"][0] == 410
    assert b'"error":"not_resumable"' in answers["same"][2]
    assert answers["malformed"][0] == 400
    assert answers["other"][0] == 410  # another stream's id: nothing kept either
    assert all(a[1]["content-type"] == "application/json" for a in answers.values())


@pytest.mark.parametrize("server", SERVERS)
async def test_a_model_api_that_refuses_the_request_is_a_502_before_any_event(
    server: str, upstream: ServerThread,
) -> None:
    async with live_app(upstream.base_url, server) as base:
        status, headers, body, complete = await http_get(base, "/live?fault=status%3D401")
    assert status == 502 and complete
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {"error": "upstream_failed",
                                "message": "the model's API failed: AuthenticationError"}


@pytest.mark.parametrize("server", SERVERS)
async def test_a_stream_that_raises_at_its_end_still_ends_the_page_with_its_outcome(
    server: str, upstream: ServerThread,
) -> None:
    once = {"raise_for_outcome": True, "resume": fluxstream.ResumePolicy(max_resumes=0)}
    async with live_app(upstream.base_url, server, stream_options=once) as base:
        status, _, body, complete = await http_get(base, "/live?fault=drop-after-events%3D4")
    assert status == 200
    assert complete  # the body was ended, not aborted by an error out of the app
    page = page_of(body)
    assert page.kinds[-1] == "end" and page.kinds.count("end") == 1
    assert page.outcome == "truncated"
    assert reply_text(30).startswith(page.shown) and page.shown
