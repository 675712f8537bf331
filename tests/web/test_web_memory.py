"""Many open pages do not grow the server's memory per event: forty pages following one
reply at once grow it as one page does (the relay's entries, and each event's bytes, made
once and shared by every follower of the process), not forty times as much; a page holds one
event at a time."""

from __future__ import annotations

import gc
import tracemalloc
import uuid

import anyio
import anyio.lowlevel
import pytest
from web_support import Exchange, Page, messages

import fluxstream
from fluxstream.relay import MemoryReplyLog, ReplyLog, produce
from fluxstream.server import ServerThread
from fluxstream.web import EventStreamResponse

pytestmark = pytest.mark.anyio

#: Memory is sampled when the first page has had this many events, and this many.
EARLY, LATE = 100, 400


class Browser(Page):
    """A page as the server sees it: what it shows lives in the browser, not here (a
    :class:`Page` keeps its text and its event kinds, which grow per event)."""

    def apply(self, name: str, data: str, event_id: str | None) -> None:
        self.last_id = event_id
        if name == "end":
            super().apply(name, data, event_id)


async def recorded_reply(base_url: str) -> tuple[ReplyLog, str]:
    """A reply of 700 deltas, an entry each, in a memory log of its own."""
    log = MemoryReplyLog(frame=0)
    key = uuid.uuid4().hex
    async with fluxstream.AsyncClient(base_url, api_key="k") as client:
        await produce(client.chat.stream(
            model="m@fill-max-tokens", messages=messages("a long one"), max_tokens=700,
            content_key=key,
            extra_headers={"X-Fluxstream-Fault": "drip=0.001"},  # an entry per delta
        ), log)
    return log, key


async def growth(log: ReplyLog, key: str, pages: int) -> int:
    """Traced memory growth from the first page's event ``EARLY`` to its event ``LATE``,
    ``pages`` pages following the reply at once, each given its events in turn."""
    samples: dict[int, int] = {}

    def sample(page: Page) -> None:
        if exchanges[0].sent in (EARLY, LATE):
            gc.collect()
            samples[exchanges[0].sent] = tracemalloc.get_traced_memory()[0]

    async def take_turns(exchange: Exchange) -> None:
        await anyio.lowlevel.checkpoint()

    exchanges = [Exchange(Browser(), on_event=sample, pause=take_turns)]
    exchanges += [Exchange(Browser(), pause=take_turns) for _ in range(pages - 1)]
    with anyio.fail_after(60):
        async with anyio.create_task_group() as followers:
            for exchange in exchanges:
                followers.start_soon(exchange.run, EventStreamResponse.follow(log, key))
    assert all(e.page.outcome == "done" and e.sent > LATE for e in exchanges)
    return samples[LATE] - samples[EARLY]


async def test_many_open_pages_do_not_grow_memory_per_event() -> None:
    with ServerThread(profile="openai") as upstream:
        alone = await recorded_reply(upstream.base_url)
        crowded = await recorded_reply(upstream.base_url)
    tracemalloc.start()
    try:
        one = await growth(*alone, pages=1)
        forty = await growth(*crowded, pages=40)
    finally:
        tracemalloc.stop()
    # 40 pages x 300 events: a page keeping even 20 bytes per event would add 240 kB
    assert forty - one < 60_000, (one, forty)
