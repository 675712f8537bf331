"""A live stream to a page, over real sockets, under uvicorn and hypercorn, as a bare ASGI app,
a Starlette app and a FastAPI app: the events, the page leaving (the upstream closed within
100 ms), heartbeats, a page that stops reading, and a reconnect that nothing can resume."""

from __future__ import annotations

import socket
import time

import anyio
import pytest
from web_support import APPS, SERVERS, Backing, Page, http_get, make_app, read_events, serving

import fluxstream
from fluxstream.server import ServerThread, expected_reply
from fluxstream.web import EventIds

pytestmark = pytest.mark.anyio


def reply_text(max_tokens: int) -> str:
    return expected_reply({
        "model": "m", "messages": [{"role": "user", "content": "web"}], "max_tokens": max_tokens,
        "stream": True, "stream_options": {"include_usage": True},
    }).text


@pytest.mark.parametrize("app_kind", APPS)
@pytest.mark.parametrize("server", SERVERS)
async def test_a_live_reply_reaches_the_page_whole_with_named_events_and_ids(
    server: str, app_kind: str, upstream: ServerThread,
) -> None:
    async with fluxstream.AsyncClient(upstream.base_url, api_key="k") as client:
        app = make_app(app_kind, Backing(client))
        async with serving(server, app) as base:
            status, headers, body = await http_get(base, "/live?max_tokens=40")
    assert status == 200
    assert headers["content-type"] == "text/event-stream; charset=utf-8"
    assert headers["cache-control"] == "no-cache"
    events = read_events(body)
    page = Page()
    for name, data, event_id in events:
        page.apply(name, data, event_id)
    assert page.shown == reply_text(40) and page.twice == 0
    assert page.outcome == "done" and page.kinds[-1] == "end"
    assert {"text", "finish", "usage", "end"} <= set(page.kinds)
    ids = [event_id for _, _, event_id in events]
    assert all(ids) and len(set(ids)) == len(ids)  # every event can be named on a reconnect
    tags = {event_id.partition(".")[0] for event_id in ids if event_id}
    assert len(tags) == 1


@pytest.mark.parametrize("app_kind", ["asgi", "fastapi"])
@pytest.mark.parametrize("server", SERVERS)
async def test_the_page_leaving_closes_the_upstream_within_100_ms(
    server: str, app_kind: str, upstream: ServerThread,
) -> None:
    async with fluxstream.AsyncClient(upstream.base_url, api_key="k") as client:
        app = make_app(app_kind, Backing(client))
        async with serving(server, app) as base:
            port = int(base.rpartition(":")[2])
            conn = await anyio.connect_tcp("127.0.0.1", port)
            await conn.send(b"GET /live?max_tokens=400&fault=drip%3D0.02 HTTP/1.1\r\n"
                            b"Host: x\r\n\r\n")
            seen = b""
            with anyio.fail_after(10):
                while b"event: text" not in seen:
                    seen += await conn.receive()
            assert upstream.records.find_disconnect() is None  # the reply is still going
            left = time.monotonic()
            await conn.aclose()
            record = await upstream.records.wait_disconnect(5, completed=False)
    assert record.time - left < 0.1, f"the upstream was closed {record.time - left:.3f} s after"


@pytest.mark.parametrize("server", SERVERS)
async def test_heartbeats_keep_an_idle_connection_alive(
    server: str, upstream: ServerThread,
) -> None:
    async with fluxstream.AsyncClient(upstream.base_url, api_key="k") as client:
        backing = Backing(client, options={"heartbeat": 0.05})
        async with serving(server, make_app("asgi", backing)) as base:
            # the upstream is silent for 0.6 s after its second event
            status, _, body = await http_get(
                base, "/live?max_tokens=5&fault=stall-after-events%3D2,stall%3D0.6")
    assert status == 200
    assert body.count(b": ping\n\n") >= 5, body[:400]
    page = Page()
    for name, data, event_id in read_events(body):
        page.apply(name, data, event_id)
    assert page.shown == reply_text(5) and page.outcome == "done"


@pytest.mark.parametrize("server", SERVERS)
async def test_a_page_that_stops_reading_is_disconnected_after_the_send_timeout(
    server: str, upstream: ServerThread,
) -> None:
    async with fluxstream.AsyncClient(upstream.base_url, api_key="k") as client:
        backing = Backing(client, options={"send_timeout": 0.3})
        async with serving(server, make_app("asgi", backing)) as base:
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
    async with fluxstream.AsyncClient(upstream.base_url, api_key="k") as client:
        async with serving(server, make_app("fastapi", Backing(client))) as base:
            _, _, body = await http_get(base, "/live?max_tokens=3")
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
