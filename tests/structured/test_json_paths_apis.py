"""Path events on every API: recorded streams of Chat Completions, Responses, Anthropic and
Gemini cut at random byte boundaries, Gemini's own ``partialArgs`` paths, and the client's
``json_paths=True`` against the embedded server over 127.0.0.1 (asyncio and trio; aiohttp and
httpx by the suite's ``--transport``).

Every run is held to the oracle of ``tests/json_path_oracle.py``: the events a tool call's
final arguments (or a structured reply's text) must make, whatever the cuts.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from fixture_files import CHAT, GEMINI, require
from json_path_oracle import expected, normalized
from pydantic import BaseModel

import fluxstream
from fluxstream import PathDelta, PathDone, PathStart, SkippedFrame
from fluxstream._parser import StreamParser

PATH_EVENTS = (PathStart, PathDelta, PathDone)

RECORDED = {
    "chat_completions": CHAT / "cc-openai-py-parallel-tools.sse",
    "responses": CHAT / "resp-vercel-azure-function-call.sse",
    "anthropic_messages": CHAT / "anth-docs-tool-use.sse",
    "gemini": GEMINI / "gem-vercel-vertex-partial-args.sse",
}


def parse(data: bytes, fmt: str, seed: int, *, paths: bool = True) -> tuple[list[Any], Any]:
    """``data`` fed in random reads (seeded) to a parser of ``fmt``; its events and reply."""
    parser = StreamParser(format=fmt, content_key="k")
    if paths:
        parser.track_paths()
    rng = random.Random(seed)
    events: list[Any] = []
    at = 0
    while at < len(data):
        step = rng.choice((1, 2, 7, 64, 4096))
        events += parser.feed(data[at : at + step])
        at += step
    events += parser.close()
    return events, parser.reply


def by_call(events: list[Any]) -> dict[tuple[int, int | None], list[Any]]:
    out: dict[tuple[int, int | None], list[Any]] = {}
    for event in events:
        if isinstance(event, PATH_EVENTS):
            out.setdefault((event.choice, event.call), []).append(event)
    return out


@pytest.mark.parametrize("fmt", sorted(RECORDED))
def test_recorded_tool_calls_make_the_same_path_events_at_every_cut(fmt: str) -> None:
    data = require(RECORDED[fmt]).read_bytes()
    plain, reply = parse(data, fmt, 0, paths=False)
    calls = [(c.index, t) for c in reply.choices for t in c.tool_calls]
    assert calls, "the fixture has tool calls"
    for seed in range(12):
        events, again = parse(data, fmt, seed)
        assert again == reply
        # Opting in adds path events and changes nothing else.
        assert [e for e in events if not isinstance(e, PATH_EVENTS)] == plain
        found = by_call(events)
        assert set(found) == {(choice, t.index) for choice, t in calls}
        for choice, call in calls:
            got = found[(choice, call.index)]
            assert normalized(got) == expected(json.loads(call.arguments)), (fmt, seed)
            assert all(e.key == "k" for e in got)


CORPUS = sorted([*CHAT.glob("*.sse"), *GEMINI.glob("*.sse")])


def _format_of(path: Path) -> str:
    declared = json.loads(path.with_suffix(".json").read_text(encoding="utf-8")).get("format")
    return declared if isinstance(declared, str) else "gemini"


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_opting_in_changes_nothing_else_on_any_recorded_stream(path: Path) -> None:
    """Every recorded stream (cut mid-JSON, arguments only in a final event, errors, refusals):
    the same events and reply with path events as without, and every call whose arguments
    are whole JSON announces exactly the document's own paths."""
    fmt = _format_of(path)
    data = path.read_bytes()
    plain, reply = parse(data, fmt, 1, paths=False)
    events, again = parse(data, fmt, 1)
    assert again == reply
    assert [e for e in events if not isinstance(e, PATH_EVENTS)] == plain
    found = by_call(events)
    for choice in reply.choices:
        for call in choice.tool_calls:
            try:
                whole = json.loads(call.arguments)
            except ValueError:
                continue  # cut or malformed: what was announced is checked elsewhere
            assert normalized(found[(choice.index, call.index)]) == expected(whole)


def _sse(*payloads: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(p).encode() + b"\r\n\r\n" for p in payloads)


def _call(part: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": [part]}}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate]}


def _pieces(*pieces: dict[str, Any]) -> dict[str, Any]:
    return _call({"functionCall": {"partialArgs": list(pieces), "willContinue": True}})


def test_gemini_partial_args_paths_are_gemini_s_own_and_validated() -> None:
    """Each announced path is one Gemini sent (or a container on the way to it); a piece
    whose ``jsonPath`` is not one, or does not fit the value, is skipped and announces
    nothing."""
    data = _sse(
        _call({"functionCall": {"name": "write_file", "willContinue": True}}),
        _pieces({"jsonPath": "$.path", "stringValue": "src/", "willContinue": True}),
        _pieces({"jsonPath": "$.path", "stringValue": "app.py"}),
        _pieces({"jsonPath": "$.opts.mode", "numberValue": 420},
                {"jsonPath": "$.opts['dry run']", "boolValue": False}),
        _pieces({"jsonPath": "not a path", "stringValue": "x"}),
        _pieces({"jsonPath": "$.path[3]", "stringValue": "x"}),  # "path" is a string
        _pieces({"jsonPath": "$.lines[0]", "stringValue": "a", "willContinue": True}),
        _pieces({"jsonPath": "$.lines[0]", "stringValue": "b"}),
        _call({"functionCall": {}}, finish="STOP"),
    )
    final = {"path": "src/app.py", "opts": {"mode": 420, "dry run": False}, "lines": ["ab"]}
    for seed in range(8):
        events, reply = parse(data, "gemini", seed)
        assert json.loads(reply.choices[0].tool_calls[0].arguments) == final
        assert sum(isinstance(e, SkippedFrame) for e in events) == 2
        got = by_call(events)[(0, 0)]
        assert normalized(got) == expected(final)
        sent = {(), ("path",), ("opts",), ("opts", "mode"), ("opts", "dry run"), ("lines",),
                ("lines", 0)}
        assert {e.path for e in got} == sent
        # The path is complete before the arguments after it began.
        order = [(type(e), e.path) for e in got]
        assert order.index((PathDone, ("path",))) < order.index((PathStart, ("opts",)))


def test_gemini_pieces_out_of_order_end_with_the_corrected_values() -> None:
    """A piece that sets an earlier key again stops the streamed text; at the close the
    whole value replaces it, and the last ``PathDone`` of each path holds that value."""
    data = _sse(
        _call({"functionCall": {"name": "f", "willContinue": True}}),
        _pieces({"jsonPath": "$.a", "stringValue": "x"}),
        _pieces({"jsonPath": "$.b", "numberValue": 1}),
        _pieces({"jsonPath": "$.a", "stringValue": "y"}),
        _call({"functionCall": {}}, finish="STOP"),
    )
    events, reply = parse(data, "gemini", 3)
    final = json.loads(reply.choices[0].tool_calls[0].arguments)
    last: dict[Any, Any] = {}
    for event in by_call(events)[(0, 0)]:
        if isinstance(event, PathDone):
            last[event.path] = event.value
    assert last[()] == final and last[("a",)] == final["a"] and last[("b",)] == 1


# ----------------------------------------------------------------------- over the network

USER = [{"role": "user", "content": "Write the notes file"}]
SCHEMA = {"type": "object", "properties": {
    "path": {"type": "string"}, "content": {"type": "string"},
    "mode": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["path", "content"]}


class Note(BaseModel):
    title: str
    lines: list[str]
    pinned: bool


def open_call(client: fluxstream.AsyncClient, api: str, **extra: Any) -> fluxstream.ReplyStream:
    if api == "chat":
        tools = [{"type": "function", "function": {"name": "write", "parameters": SCHEMA}}]
        return client.chat.stream(model="m", messages=USER, tools=tools, **extra)
    if api == "responses":
        return client.responses.stream(model="m", input=USER, tools=[
            {"type": "function", "name": "write", "parameters": SCHEMA}], **extra)
    if api == "messages":
        return client.messages.stream(model="m", max_tokens=512, messages=USER, tools=[
            {"name": "write", "input_schema": SCHEMA}], **extra)
    return client.gemini.stream(
        model="m", contents=[{"role": "user", "parts": [{"text": USER[0]["content"]}]}],
        tools=[{"functionDeclarations": [{"name": "write", "parameters": SCHEMA}]}],
        **extra)


pytestmark = pytest.mark.anyio

API_NAMES = ("chat", "responses", "messages", "gemini")


@pytest.mark.parametrize("api", API_NAMES)
async def test_json_paths_true_puts_path_events_after_the_deltas(aserver: Any, api: str) -> None:
    async with fluxstream.AsyncClient(base_url=aserver.base_url, api_key="sk") as client:
        async with open_call(client, api, json_paths=True) as stream:
            events = [event async for event in stream]
        async with open_call(client, api) as plain_stream:
            plain = [event async for event in plain_stream]
    reply = stream.reply
    calls = reply.choices[0].tool_calls
    assert calls
    found = by_call(events)
    for call in calls:
        assert normalized(found[(0, call.index)]) == expected(json.loads(call.arguments))
    assert not any(isinstance(e, PATH_EVENTS) for e in plain)  # only when asked
    # Each path event follows the tool-call delta that made it, never before its call began.
    first_delta = next(i for i, e in enumerate(events) if isinstance(e, fluxstream.ToolCallDelta))
    assert all(not isinstance(e, PATH_EVENTS) for e in events[:first_delta])


@pytest.mark.parametrize("api", ("chat", "responses", "gemini"))
async def test_a_structured_reply_s_content_has_paths_of_its_own(aserver: Any, api: str) -> None:
    async with fluxstream.AsyncClient(base_url=aserver.base_url, api_key="sk") as client:
        if api == "chat":
            stream = client.chat.stream(model="m", messages=USER, response_format=Note,
                                        json_paths=True)
        elif api == "responses":
            stream = client.responses.stream(model="m", input=USER, response_format=Note,
                                             json_paths=True)
        else:
            stream = client.gemini.stream(
                model="m", contents=[{"role": "user", "parts": [{"text": "notes"}]}],
                response_format=Note, json_paths=True)
        async with stream:
            events = [event async for event in stream]
    found = by_call(events)
    assert set(found) == {(0, None)}
    assert normalized(found[(0, None)]) == expected(json.loads(stream.reply.text))


async def test_the_anthropic_forced_tool_object_has_paths_as_a_tool_call(aserver: Any) -> None:
    async with fluxstream.AsyncClient(base_url=aserver.base_url, api_key="sk") as client:
        async with client.messages.stream(model="m", max_tokens=512, messages=USER,
                                          response_format=Note, json_paths=True) as stream:
            events = [event async for event in stream]
    call = stream.reply.choices[0].tool_calls[0]
    found = by_call(events)
    assert set(found) == {(0, call.index)}
    assert normalized(found[(0, call.index)]) == expected(json.loads(call.arguments))
    assert Note.model_validate(found[(0, call.index)][-1].value)

