"""Interop: the parser assembles anthropic-sdk-python's own stream events.

anthropic-sdk-python (which uses ``httpx2``) is driven over a ``MockTransport`` serving a
recorded ``anth-*`` body (no network). The raw events of ``messages.create(stream=True)``
(``RawMessageStartEvent`` ...) and the whole event stream of ``messages.stream(...)`` (raw
events plus the ``text``/``thinking``/``signature`` events the helper derives, which are
ignored) go to ``StreamParser.feed_chunk``; the result must equal our replay of the bytes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from fixture_files import chat_streams, require
from format_corpus import as_corpus

from fluxstream._events import End
from fluxstream._parser import StreamParser, replay

anthropic = pytest.importorskip("anthropic")
httpx2 = pytest.importorskip("httpx2")

FILES = chat_streams("anth-")
IDS = [p.stem for p in FILES]
#: anthropic-sdk-python raises on an ``error`` event (its contract, not ours).
RAISES = {"anth-syn-overloaded-midstream"}
#: ``MessageStream``'s accumulation fails on a ``message_delta`` when ``message_start`` carried
#: no ``usage`` (Anthropic's own docs example): ``AttributeError`` on ``None.output_tokens``.
HELPER_RAISES: dict[str, type[Exception]] = {"anth-docs-thinking": AttributeError}


def _client(body: bytes) -> Any:
    def handler(request: Any) -> Any:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url="http://127.0.0.1:9",
                                    http_client=http, max_retries=0)


REQUEST: dict[str, Any] = {"model": "m", "max_tokens": 16,
                           "messages": [{"role": "user", "content": "hi"}]}


async def _raw_events(body: bytes) -> list[Any]:
    client = _client(body)
    try:
        stream = await client.messages.create(**REQUEST, stream=True)
        return [event async for event in stream]
    finally:
        await client.close()


async def _helper_events(body: bytes) -> list[Any]:
    client = _client(body)
    try:
        async with client.messages.stream(**REQUEST) as stream:
            return [event async for event in stream]
    finally:
        await client.close()


def _ours(body: bytes) -> Any:
    return replay([body], format="anthropic_messages")


def _same(theirs: Any, ours: Any, body: bytes) -> None:
    """Equal, except where anthropic-sdk-python's strict SSE decoder drops a final event that
    no blank line terminates (the corpus' EOF flush, README): there the SDK never yields
    ``message_stop``, so its events end ``finished`` where the bytes end ``done``."""
    a, b = as_corpus(theirs), as_corpus(ours)
    if not body.endswith((b"\n\n", b"\r\n\r\n", b"\r\r")) and b["ended"] == "done":
        assert a["ended"] == "finished"
        a["ended"] = "done"
    assert a == b


@pytest.mark.parametrize("fmt", ["anthropic_messages", "auto"])
@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_anthropic_raw_events_assemble_like_our_replay(path: Path, fmt: str) -> None:
    body = require(path).read_bytes()
    if path.stem in RAISES:
        with pytest.raises(anthropic.APIError):
            asyncio.run(_raw_events(body))
        return
    events = asyncio.run(_raw_events(body))
    assert events and type(events[0]).__name__ == "RawMessageStartEvent"
    parser = StreamParser(format=fmt)
    out = []
    for event in events:
        out += parser.feed_chunk(event)
    out += parser.close()
    ours = _ours(body)
    _same(parser.reply, ours, body)
    assert parser.reply.choices[0].stop == ours.choices[0].stop
    assert parser.reply.choices[0].reasoning_blocks == ours.choices[0].reasoning_blocks
    assert isinstance(out[-1], End) and out[-1].outcome is parser.reply.outcome


@pytest.mark.parametrize("path", [p for p in FILES if p.stem not in RAISES],
                         ids=[p.stem for p in FILES if p.stem not in RAISES])
def test_anthropic_message_stream_events(path: Path) -> None:
    body = require(path).read_bytes()
    if path.stem in HELPER_RAISES:
        with pytest.raises(HELPER_RAISES[path.stem]):
            asyncio.run(_helper_events(body))
        return
    events = asyncio.run(_helper_events(body))
    parser = StreamParser(format="anthropic_messages")
    for event in events:
        parser.feed_chunk(event)
    parser.close()
    ours = _ours(body)
    _same(parser.reply, ours, body)
    assert parser.reply.skipped_frames == ours.skipped_frames
