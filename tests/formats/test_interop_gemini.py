"""Interop with google-genai (the official Python SDK), both ways, on the recorded bytes.

google-genai is driven over an ``httpx.MockTransport`` serving a ``gem-*`` body (no network).

* Its ``GenerateContentResponse`` chunks go to ``StreamParser.feed_chunk`` (they arrive as
  ``model_dump()``: snake_case keys, enum members, signatures as bytes); the reply must equal
  our replay of the bytes.
* Its own reading of the stream must agree with ours where it does not raise: per candidate
  the text, the thoughts, the function calls, the last finish reason and usage.
* The other way: our reply as a google-genai ``GenerateContentResponse`` reads back, through
  google-genai's own accessors, as the same text, calls and finish reason.

Where google-genai raises or goes silent (asserted below, so a change in it shows): it raises
``ClientError`` on the raw error object Vertex sends after the stream began (as we fail it),
and ``UnknownApiResponseError`` on SSE it does not expect: a ``data:`` line without the space,
a comment line (``: ping``, what proxies send as keep-alive), an ``event:`` or ``id:`` line. It
goes silent on a stream cut short (no finish reason: it returns the chunks that came, no
error) where we say ``truncated``, and on a prompt blocked before any candidate (a chunk with
``prompt_feedback`` only) where we record the block as the reply's error. It returns Vertex's
streamed ``partialArgs`` pieces as they came, without assembling the arguments.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fixture_files import require
from gemini_corpus import as_corpus, gemini_streams

from fluxstream._events import End, Outcome
from fluxstream._parser import StreamParser, replay
from fluxstream._reply import Reply
from fluxstream.server.render_gemini import gemini_route

genai = pytest.importorskip("google.genai")
types = pytest.importorskip("google.genai.types")
errors = pytest.importorskip("google.genai.errors")

FILES = gemini_streams()
IDS = [p.stem for p in FILES]
#: google-genai raises on the raw error object after the stream began (so do we: failed).
RAISES = {"gem-firebase-vertex-error-raw-json-midstream"}


def _client(body: bytes, seen: list[httpx.Request] | None = None) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    http = httpx.Client(transport=httpx.MockTransport(handler))
    options = types.HttpOptions(base_url="http://127.0.0.1:9", httpx_client=http,
                                retry_options=types.HttpRetryOptions(attempts=1))
    return genai.Client(api_key="test-key", http_options=options)


def _chunks(body: bytes, seen: list[httpx.Request] | None = None) -> list[Any]:
    stream = _client(body, seen).models.generate_content_stream(
        model="gemini-2.5-flash", contents="hi")
    return list(stream)


def _ours(body: bytes) -> Reply:
    return replay([body], format="gemini")


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_google_genai_chunks_assemble_like_our_replay(path: Path) -> None:
    body = require(path).read_bytes()
    if path.stem in RAISES:
        with pytest.raises(errors.ClientError) as raised:
            _chunks(body)
        assert raised.value.code == 499 and raised.value.status == "CANCELLED"
        ours = _ours(body)
        assert ours.outcome is Outcome.FAILED and ours.error is not None
        assert (ours.error.code, ours.error.type) == ("499", "CANCELLED")
        return
    chunks = _chunks(body)
    assert chunks and type(chunks[0]).__name__ == "GenerateContentResponse"
    parser = StreamParser(format="gemini")
    events = []
    for chunk in chunks:
        events += parser.feed_chunk(chunk)
    events += parser.close()
    ours = _ours(body)
    assert as_corpus(parser.reply) == as_corpus(ours)
    assert [c.stop for c in parser.reply.choices] == [c.stop for c in ours.choices]
    assert [c.reasoning_blocks for c in parser.reply.choices] == [
        c.reasoning_blocks for c in ours.choices]
    assert (parser.reply.id, parser.reply.model) == (ours.id, ours.model)
    assert isinstance(events[-1], End) and events[-1].outcome is ours.outcome


def _their_reading(chunks: list[Any]) -> dict[int, dict[str, Any]]:
    """What google-genai's own chunks say, accumulated the obvious way."""
    out: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for cand in chunk.candidates or ():
            entry = out.setdefault(cand.index or 0, {"text": "", "reasoning": "", "calls": [],
                                                     "finish": None})
            for part in (cand.content.parts if cand.content else None) or ():
                if part.text:
                    entry["reasoning" if part.thought else "text"] += part.text
                if part.function_call and part.function_call.name:
                    entry["calls"].append((part.function_call.name, part.function_call.args))
            if cand.finish_reason is not None:
                entry["finish"] = cand.finish_reason.value
    return out


@pytest.mark.parametrize("path", [p for p in FILES if p.stem not in RAISES],
                         ids=[p.stem for p in FILES if p.stem not in RAISES])
def test_google_genai_reads_the_same_bytes_the_same_way(path: Path) -> None:
    body = require(path).read_bytes()
    chunks = _chunks(body)
    theirs = _their_reading(chunks)
    ours = _ours(body)
    assert sorted(theirs) == [c.index for c in ours.choices]
    for choice in ours.choices:
        entry = theirs[choice.index]
        assert entry["text"] == choice.text
        assert (entry["reasoning"] or None) == choice.reasoning
        assert entry["finish"] == choice.finish_reason
        names = [name for name, _ in entry["calls"]]
        assert names == [call.name for call in choice.tool_calls]
        if "partial-args" in path.stem:
            # google-genai hands on the pieces: only the first (argument-less) call has args.
            assert [args for _, args in entry["calls"]] == [None] * 4
        else:
            assert [args or {} for _, args in entry["calls"]] == [
                call.parse_arguments() for call in choice.tool_calls]
    last = next((c.usage_metadata for c in reversed(chunks) if c.usage_metadata), None)
    if ours.usage is None:
        assert last is None
    else:
        assert last is not None
        assert last.total_token_count == ours.usage.model_dump(exclude_unset=True).get(
            "totalTokenCount")


def test_google_genai_is_silent_on_a_cut_stream_where_we_say_truncated() -> None:
    path = FILES[IDS.index("gem-firebase-thought-summary")]
    body = require(path).read_bytes()
    cut = body[: body.rindex(b"data:")]  # the last event, with the finish reason, never came
    chunks = _chunks(cut)
    assert chunks and all(c.candidates[0].finish_reason is None for c in chunks)
    assert _ours(cut).outcome is Outcome.TRUNCATED


def test_google_genai_is_silent_on_a_blocked_prompt_where_we_record_the_block() -> None:
    body = require(FILES[IDS.index("gem-firebase-prompt-blocked")]).read_bytes()
    (chunk,) = _chunks(body)
    assert chunk.candidates is None and chunk.prompt_feedback.block_reason.value == "SAFETY"
    ours = _ours(body)
    assert ours.outcome is Outcome.FAILED and ours.error is not None
    assert ours.error.code == "SAFETY"


@pytest.mark.parametrize("framing", [
    b'data:{"candidates":[{"content":{"parts":[{"text":"a"}]},"finishReason":"STOP"}]}\n\n',
    b': ping\n\ndata: {"candidates":[{"content":{"parts":[{"text":"a"}]},'
    b'"finishReason":"STOP"}]}\n\n',
    b'event: message\ndata: {"candidates":[{"content":{"parts":[{"text":"a"}]},'
    b'"finishReason":"STOP"}]}\n\n',
    b'id: 1\ndata: {"candidates":[{"content":{"parts":[{"text":"a"}]},'
    b'"finishReason":"STOP"}]}\n\n',
], ids=["no-space", "comment", "event-line", "id-line"])
def test_google_genai_raises_on_valid_sse_it_does_not_expect(framing: bytes) -> None:
    with pytest.raises(errors.UnknownApiResponseError):
        _chunks(framing)
    ours = _ours(framing)
    assert ours.text == "a" and ours.outcome is Outcome.DONE


def test_google_genai_sends_what_our_api_sends() -> None:
    seen: list[httpx.Request] = []
    _chunks(require(FILES[0]).read_bytes(), seen)
    (request,) = seen
    assert request.method == "POST"
    # google-genai 3 says v1 where Google's REST docs say v1beta: our server takes both.
    assert gemini_route(request.url.path) == ("gemini-2.5-flash", True)
    assert request.url.params["alt"] == "sse"
    assert request.headers["x-goog-api-key"] == "test-key"
    assert json.loads(request.content)["contents"] == [
        {"parts": [{"text": "hi"}], "role": "user"}]


# --------------------------------------------------------------------------- the other way


def as_genai(reply: Reply) -> Any:
    """Our reply as google-genai's ``GenerateContentResponse`` (what code written against
    google-genai reads)."""
    candidates = []
    for choice in reply.choices:
        parts: list[dict[str, Any]] = []
        if choice.reasoning:
            parts.append({"text": choice.reasoning, "thought": True})
        if choice.text:
            parts.append({"text": choice.text})
        parts += [{"functionCall": {"name": t.name, "args": t.parse_arguments(), "id": t.id}}
                  for t in choice.tool_calls]
        candidates.append({"index": choice.index, "finishReason": choice.finish_reason,
                           "content": {"role": "model", "parts": parts}})
    payload: dict[str, Any] = {"candidates": candidates, "modelVersion": reply.model,
                               "responseId": reply.id}
    if reply.usage is not None:
        payload["usageMetadata"] = reply.usage.model_dump(exclude_unset=True)
    return types.GenerateContentResponse.model_validate(payload)


@pytest.mark.parametrize("path", [p for p in FILES if p.stem not in RAISES
                                  and "blocked" not in p.stem],
                         ids=[p.stem for p in FILES if p.stem not in RAISES
                              and "blocked" not in p.stem])
def test_our_reply_reads_the_same_through_google_genai(path: Path) -> None:
    ours = _ours(require(path).read_bytes())
    response = as_genai(ours)
    choice = ours.choices[0]
    assert (response.text or "") == choice.text
    assert [(c.name, c.args) for c in response.function_calls or ()] == [
        (t.name, t.parse_arguments()) for t in choice.tool_calls]
    finish = response.candidates[0].finish_reason  # None for a stream cut before any
    assert (None if finish is None else finish.value) == choice.finish_reason
    # ... and fed back to us, it is the same reply.
    parser = StreamParser(format="gemini")
    parser.feed_chunk(response)
    parser.close()
    again = parser.reply.choices[0]
    assert (again.text, again.reasoning, again.finish_reason) == (
        choice.text, choice.reasoning, choice.finish_reason)
    assert [(t.name, t.parse_arguments()) for t in again.tool_calls] == [
        (t.name, t.parse_arguments()) for t in choice.tool_calls]
