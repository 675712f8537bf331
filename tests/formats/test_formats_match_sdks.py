"""The reply fluxstream assembles equals what the official SDKs' own stream helpers assemble.

openai-python's ``responses.stream(...).get_final_response()`` and anthropic-sdk-python's
``messages.stream(...).get_final_message()`` accumulate the same recorded bodies (served over
a mock transport, no network); text, reasoning, refusal, tool calls, finish and usage must
agree. Where a helper raises on a recording (its contract, not ours) there is nothing to
compare; the conventions that differ on purpose are named where they apply.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from fixture_files import chat_streams, require
from sse_frames import frames

from fluxstream._parser import replay

RESP = chat_streams("resp-")
ANTH = chat_streams("anth-")
#: Recordings a helper raises on (see tests/test_interop_*.py for why).
OPENAI_RAISES = {"resp-syn-error-event-flat", "resp-syn-refusal-incomplete",
                 "resp-syn-truncated", "resp-vercel-incomplete-data-no-space",
                 "resp-vercel-openai-quota-error"}
ANTHROPIC_RAISES = {"anth-docs-thinking", "anth-syn-overloaded-midstream"}


async def _openai_final(body: bytes) -> Any:
    openai = pytest.importorskip("openai")
    httpx = pytest.importorskip("httpx")

    def handler(request: Any) -> Any:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    client = openai.AsyncOpenAI(api_key="sk-test", base_url="http://127.0.0.1:9/v1",
                                http_client=http, max_retries=0)
    try:
        async with client.responses.stream(model="m", input="hi") as stream:
            async for _ in stream:
                pass
            return await stream.get_final_response()
    finally:
        await client.close()


async def _anthropic_final(body: bytes) -> Any:
    anthropic = pytest.importorskip("anthropic")
    httpx2 = pytest.importorskip("httpx2")

    def handler(request: Any) -> Any:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    client = anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url="http://127.0.0.1:9",
                                      http_client=http, max_retries=0)
    try:
        async with client.messages.stream(
            model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            async for _ in stream:
                pass
            return await stream.get_final_message()
    finally:
        await client.close()


@pytest.mark.parametrize("path", [p for p in RESP if p.stem not in OPENAI_RAISES],
                         ids=[p.stem for p in RESP if p.stem not in OPENAI_RAISES])
def test_responses_reply_equals_openai_final_response(path: Path) -> None:
    body = require(path).read_bytes()
    final = asyncio.run(_openai_final(body))
    ours = replay([body], format="responses")
    choice = ours.choices[0]
    assert choice.text == final.output_text
    assert [(c.id, c.name, c.arguments) for c in choice.tool_calls] == [
        (o.call_id, o.name, o.arguments) for o in final.output if o.type == "function_call"]
    refusal = "".join(part.refusal for o in final.output if o.type == "message"
                      for part in o.content if part.type == "refusal")
    assert (choice.refusal or "") == refusal
    summary = "".join(s.text for o in final.output if o.type == "reasoning"
                      for s in (o.summary or []))
    # fluxstream's reasoning also holds reasoning_text parts (LM Studio); the SDK keeps them
    # in the item's content, not its summary: the summaries come first either way.
    assert (choice.reasoning or "").startswith(summary)
    assert choice.finish_reason == final.status
    assert ours.usage is not None and final.usage is not None
    assert (ours.usage.input_tokens, ours.usage.output_tokens, ours.usage.total_tokens) == (  # type: ignore[attr-defined]
        final.usage.input_tokens, final.usage.output_tokens, final.usage.total_tokens)
    assert ours.usage.prompt_tokens_details is not None
    assert ours.usage.prompt_tokens_details.cached_tokens == (
        final.usage.input_tokens_details.cached_tokens)


@pytest.mark.parametrize("path", [p for p in ANTH if p.stem not in ANTHROPIC_RAISES],
                         ids=[p.stem for p in ANTH if p.stem not in ANTHROPIC_RAISES])
def test_anthropic_reply_equals_anthropic_final_message(path: Path) -> None:
    body = require(path).read_bytes()
    final = asyncio.run(_anthropic_final(body))
    ours = replay([body], format="anthropic_messages")
    choice = ours.choices[0]
    assert choice.text == "".join(b.text for b in final.content if b.type == "text")
    assert (choice.reasoning or "") == "".join(
        b.thinking for b in final.content if b.type == "thinking")
    theirs = [(b.id, b.name, b.input) for b in final.content if b.type == "tool_use"]
    assert [(c.id, c.name) for c in choice.tool_calls] == [(i, n) for i, n, _ in theirs]
    for call, (_, _, value) in zip(choice.tool_calls, theirs, strict=True):
        try:
            assert json.loads(call.arguments) == value
        except ValueError:
            # Cut by max_tokens: both parse the partial JSON; the SDK drops a string still
            # open, fluxstream's partial value keeps what arrived of it.
            assert _covers(call.partial_arguments(), value)
    assert choice.finish_reason == final.stop_reason
    assert ours.usage is not None
    for field, value in final.usage.model_dump(exclude_none=True).items():
        if not isinstance(value, dict):
            assert ours.usage.model_dump().get(field) == value, field


def _covers(ours: Any, theirs: Any) -> bool:
    """``ours`` holds ``theirs`` and possibly more at the end (a partial value parsed
    further: open strings and containers kept)."""
    if isinstance(theirs, dict):
        return isinstance(ours, dict) and all(
            k in ours and _covers(ours[k], v) for k, v in theirs.items())
    if isinstance(theirs, list):
        return isinstance(ours, list) and len(theirs) <= len(ours) and all(
            _covers(a, b) for a, b in zip(ours, theirs, strict=False))
    if isinstance(theirs, str):
        return isinstance(ours, str) and ours.startswith(theirs)
    return bool(ours == theirs)


def test_a_responses_stream_whose_only_content_is_the_final_response() -> None:
    """A server or proxy that emulates streaming with ``response.created`` and a
    ``response.completed`` whose ``response.output`` holds everything (no deltas, no
    ``.done`` events): openai-python's helper returns that output, fluxstream returned an
    empty reply that ended ``done``. The final response is read as a whole body when the
    stream delivered no content at all (never otherwise: nothing can be shown twice)."""
    output = [
        {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
         "content": [{"type": "output_text", "text": "Hello there", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f",
         "arguments": '{"a":1}', "status": "completed"},
    ]
    response = {"id": "resp_1", "object": "response", "created_at": 1, "model": "m",
                "status": "completed", "output": output, "parallel_tool_calls": True,
                "tool_choice": "auto", "tools": [],
                "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7,
                          "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 0}}}
    events = [
        {"type": "response.created", "sequence_number": 0,
         "response": {**response, "status": "in_progress", "output": [], "usage": None}},
        {"type": "response.completed", "sequence_number": 1, "response": response},
    ]
    body = frames(*events, named=True)
    final = asyncio.run(_openai_final(body))
    assert final.output_text == "Hello there"
    for fmt in ("responses", "auto"):
        ours = replay([body], format=fmt)
        choice = ours.choices[0]
        assert choice.text == final.output_text
        assert [(c.id, c.name, c.arguments) for c in choice.tool_calls] == [("call_1", "f",
                                                                             '{"a":1}')]
        assert choice.stop == "tool_calls" and ours.outcome.value == "done"  # type: ignore[union-attr]


def test_an_anthropic_message_start_that_carries_the_content() -> None:
    """The Anthropic analogue: a ``message_start`` whose ``message.content`` already holds the
    blocks (a proxy emulating streaming), then only ``message_delta`` / ``message_stop``.
    anthropic-sdk-python's ``MessageStream`` starts its snapshot from that message and keeps
    the blocks; fluxstream ignored them (an empty reply ending ``done``)."""
    events = [
        {"type": "message_start", "message": {
            "id": "m", "type": "message", "role": "assistant", "model": "x",
            "content": [{"type": "text", "text": "Hello there"},
                        {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 4}}},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
         "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
    ]
    body = frames(*events, named=True)
    final = asyncio.run(_anthropic_final(body))
    for fmt in ("anthropic_messages", "auto"):
        ours = replay([body], format=fmt)
        choice = ours.choices[0]
        assert choice.text == "".join(b.text for b in final.content if b.type == "text")
        assert [(c.id, c.name, json.loads(c.arguments)) for c in choice.tool_calls] == [
            (b.id, b.name, b.input) for b in final.content if b.type == "tool_use"]
        assert choice.stop == "tool_calls" and ours.skipped_frames == 0
