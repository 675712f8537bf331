"""Interop: the parser assembles chunks that openai-python already decoded.

openai-python is driven over an ``httpx.MockTransport`` that serves a fixture's bytes (no
network); each ``ChatCompletionChunk`` it yields goes to ``StreamParser.feed_chunk``, and the
result must equal our own replay of the same bytes. Without bytes there is no sentinel, so the
outcome is ``finished`` (every choice finished) or ``truncated``, never ``done``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from format_corpus import as_corpus
from test_chat_fixtures import FILES, IDS, require_fixtures

from fluxstream._events import End, Outcome, TextDelta
from fluxstream._parser import StreamParser, replay

openai = pytest.importorskip("openai")

# openai-python raises on in-band error payloads (that is its contract, not ours).
ERRORS = {"cc-syn-vllm-error-object", "cc-vercel-error-only-with-done",
          "cc-vercel-openai-error-after-output", "cc-vercel-openai-error-first-chunk"}


def _client(body: bytes) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return openai.AsyncOpenAI(api_key="sk-test", base_url="http://127.0.0.1:9/v1",
                              http_client=http, max_retries=0)


async def _via_openai(body: bytes) -> tuple[StreamParser, list[Any], int]:
    client = _client(body)
    parser = StreamParser(content_key="k")
    events: list[Any] = []
    chunks = 0
    stream = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    async for chunk in stream:
        assert type(chunk).__name__ == "ChatCompletionChunk"
        chunks += 1
        events += parser.feed_chunk(chunk)
    events += parser.close()
    await client.close()
    return parser, events, chunks


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_openai_python_chunks_assemble_like_our_replay(path: Path) -> None:
    require_fixtures()
    if path.stem in ERRORS:
        pytest.skip("openai-python raises APIError on in-band errors")
    body = path.read_bytes()
    parser, events, chunks = asyncio.run(_via_openai(body))
    assert chunks > 0
    ours = as_corpus(replay([body]))
    theirs = as_corpus(parser.reply)
    assert theirs["choices"] == ours["choices"]
    assert theirs["usage"] == ours["usage"]
    assert theirs["error"] == ours["error"]
    end = events[-1]
    assert isinstance(end, End) and end.outcome is parser.reply.outcome
    assert parser.reply.outcome in (Outcome.FINISHED, Outcome.TRUNCATED)


def test_openai_python_in_band_error_is_raised_by_openai() -> None:
    require_fixtures()
    body = (FILES[0].parent / "cc-vercel-openai-error-after-output.sse").read_bytes()
    with pytest.raises(openai.APIError):
        asyncio.run(_via_openai(body))


def test_text_deltas_from_openai_chunks_carry_offsets() -> None:
    require_fixtures()
    body = (FILES[0].parent / "cc-openai-py-basic-text.sse").read_bytes()
    parser, events, _ = asyncio.run(_via_openai(body))
    text = ""
    for ev in events:
        if isinstance(ev, TextDelta):
            assert ev.offset == len(text) and ev.key == "k"
            text += ev.text
    assert text == parser.reply.text != ""
