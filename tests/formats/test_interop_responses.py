"""Interop: the parser assembles openai-python's own Responses stream events.

openai-python is driven over an ``httpx.MockTransport`` that serves a recorded ``resp-*``
body (no network); each event object it yields (``ResponseTextDeltaEvent`` ...) goes to
``StreamParser.feed_chunk``, with ``format="responses"`` and with ``format="auto"``, and the
result must equal our own replay of the same bytes. The terminal event arrives as an object
too, so the outcome is ``done`` just as from bytes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from fixture_files import chat_streams, require
from format_corpus import as_corpus

from fluxstream._events import End
from fluxstream._parser import StreamParser, replay

openai = pytest.importorskip("openai")

FILES = chat_streams("resp-")
IDS = [p.stem for p in FILES]
#: openai-python raises ``APIError`` on an ``error`` event that nests an ``error`` object (its
#: contract, not ours); the flat shape passes through as an event.
RAISES = {"resp-vercel-openai-quota-error"}
#: ``responses.stream``'s accumulator raises where the recording's ``.done`` events carry a
#: different item id than the deltas (``RuntimeError: Completed output item identity
#: changed``); fluxstream takes the text from the deltas.
#: On the flat ``error`` event its accumulator fails with ``IndexError``.
HELPER_RAISES: dict[str, type[Exception]] = {
    "resp-vercel-incomplete-data-no-space": RuntimeError,
    "resp-syn-error-event-flat": IndexError,
}


def _client(body: bytes) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return openai.AsyncOpenAI(api_key="sk-test", base_url="http://127.0.0.1:9/v1",
                              http_client=http, max_retries=0)


async def _raw_events(body: bytes) -> list[Any]:
    client = _client(body)
    try:
        stream = await client.responses.create(model="m", input="hi", stream=True)
        return [event async for event in stream]
    finally:
        await client.close()


async def _helper_events(body: bytes) -> list[Any]:
    client = _client(body)
    try:
        async with client.responses.stream(model="m", input="hi") as stream:
            return [event async for event in stream]
    finally:
        await client.close()


@pytest.mark.parametrize("fmt", ["responses", "auto"])
@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_openai_responses_events_assemble_like_our_replay(path: Path, fmt: str) -> None:
    body = require(path).read_bytes()
    if path.stem in RAISES:
        with pytest.raises(openai.APIError):
            asyncio.run(_raw_events(body))
        return
    events = asyncio.run(_raw_events(body))
    assert events and all(hasattr(e, "model_dump") for e in events)
    assert type(events[0]).__module__.startswith("openai.types.responses")
    parser = StreamParser(format=fmt)
    out = []
    for event in events:
        out += parser.feed_chunk(event)
    out += parser.close()
    ours = replay([body], format="responses")
    assert as_corpus(parser.reply) == as_corpus(ours)
    assert parser.reply.choices[0].stop == ours.choices[0].stop
    assert isinstance(out[-1], End) and out[-1].outcome is ours.outcome


@pytest.mark.parametrize("path", [p for p in FILES if p.stem not in RAISES],
                         ids=[p.stem for p in FILES if p.stem not in RAISES])
def test_openai_responses_stream_helper_events(path: Path) -> None:
    """``client.responses.stream(...)`` yields the same event types with snapshots added."""
    body = require(path).read_bytes()
    if path.stem in HELPER_RAISES:
        with pytest.raises(HELPER_RAISES[path.stem]):
            asyncio.run(_helper_events(body))
        return
    parser = StreamParser(format="auto")
    for event in asyncio.run(_helper_events(body)):
        parser.feed_chunk(event)
    parser.close()
    assert as_corpus(parser.reply) == as_corpus(replay([body], format="responses"))
    assert parser.reply.skipped_frames == 0
