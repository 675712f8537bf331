"""Whatever the points where a page's connection is cut and the page reconnects with its
``Last-Event-ID``, the text it rebuilds by offset is the reply, no character shown twice
(Hypothesis; the reply produced into a memory log while it is followed, or before)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from web_support import Exchange, Page, messages

import fluxstream
from fluxstream.relay import MemoryReplyLog, produce
from fluxstream.server import ServerThread, expected_reply
from fluxstream.web import EventStreamResponse

MAX_TOKENS = 40


@pytest.fixture(scope="module")
def module_upstream() -> Iterator[ServerThread]:
    with ServerThread(profile="openai") as running:
        yield running


def reply_text() -> str:
    return expected_reply({
        "model": "m@fill-max-tokens", "messages": messages(), "max_tokens": MAX_TOKENS,
        "stream": True, "stream_options": {"include_usage": True},
    }).text


async def rebuild(base_url: str, cuts: list[int], live: bool, drip: float) -> Page:
    """The page after following one reply with a connection cut after each of ``cuts``
    events (then whole), reconnecting each time with its ``Last-Event-ID``."""
    log = MemoryReplyLog(frame=0.002)
    key = uuid.uuid4().hex
    page = Page()
    async with fluxstream.AsyncClient(base_url, api_key="k") as client:
        stream = client.chat.stream(
            model="m@fill-max-tokens", messages=messages(), max_tokens=MAX_TOKENS, content_key=key,
            extra_headers={"X-Fluxstream-Fault": f"drip={drip}"},
        )
        async with anyio.create_task_group() as tasks:
            if live:
                recorded = log.record(stream, only_consumer=True)
                await recorded.start()  # the key exists: follow at once

                async def drain() -> None:
                    async with recorded:
                        async for _ in recorded:
                            pass

                tasks.start_soon(drain)
            else:
                await produce(stream, log)
            with anyio.fail_after(30):
                for cut in [*cuts, None]:
                    status = await Exchange(page, cut).run(EventStreamResponse.follow(log, key))
                    if status == 204:
                        break
                    assert status == 200
                    if page.outcome is not None:
                        break
                while page.outcome is None:  # every cut used: follow to the end
                    assert await Exchange(page).run(EventStreamResponse.follow(log, key)) == 200
    return page


@settings(max_examples=40, deadline=None)
@given(
    cuts=st.lists(st.integers(1, 12), max_size=12),
    live=st.booleans(),
    drip=st.sampled_from([0.0, 0.001]),
)
def test_the_rebuilt_text_is_the_reply_whatever_the_cuts(
    module_upstream: ServerThread, cuts: list[int], live: bool, drip: float,
) -> None:
    page = anyio.run(rebuild, module_upstream.base_url, cuts, live, drip)
    assert page.shown == reply_text()
    assert page.twice == 0
    assert page.outcome == "done"
