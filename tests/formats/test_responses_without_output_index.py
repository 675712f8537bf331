"""Responses streams whose events carry no ``output_index`` (llama.cpp's ``/v1/responses``
never sends it): function calls are found by their item id and numbered in arrival order,
exactly as ``output_index`` would have numbered them, so the reply has its tool calls and
finishes ``tool_calls``. And reasoning summary parts streamed without ``summary_index`` are
shown once, not again when their ``.done`` names ``summary_index: 0`` (LiteLLM's bridge)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fixture_files import chat_streams
from format_corpus import as_corpus
from sse_frames import frames

from fluxstream._events import Outcome
from fluxstream._parser import StreamParser, replay

RESP = [p for p in chat_streams("resp-") if "truncated" not in p.stem]
_INDEX_KEYS = ("output_index",)


def payloads(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in path.read_text().splitlines()
            if line.startswith("data:") and line[5:].strip().startswith("{")]


def without(events: list[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k not in keys} for e in events]


def body(events: list[dict[str, Any]]) -> bytes:
    return frames(*events, named=True)


@pytest.mark.parametrize("fmt", ["responses", "auto"])
@pytest.mark.parametrize("path", RESP, ids=[p.stem for p in RESP])
def test_a_recorded_stream_without_output_index_reads_the_same(path: Path, fmt: str) -> None:
    events = payloads(path)
    full = replay([body(events)], format=fmt)
    bare = replay([body(without(events, "output_index"))], format=fmt)
    assert as_corpus(bare) == as_corpus(full)
    assert [c.stop for c in bare.choices] == [c.stop for c in full.choices]


def llama_cpp_stream(*, output_index: bool) -> list[dict[str, Any]]:
    """The shape llama.cpp's server sends: reasoning, a message, then two function calls."""
    def item(n: int, **fields: Any) -> dict[str, Any]:
        return {"output_index": n, **fields} if output_index else fields

    calls = [("fc_1", "call_a", "get_weather", ['{"city":', '"Paris"}']),
             ("fc_2", "call_b", "get_time", ['{"tz":"CET"}'])]
    out: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
        {"type": "response.output_item.added",
         **item(0, item={"id": "rs_1", "type": "reasoning", "summary": []})},
        {"type": "response.reasoning_text.delta", **item(0, item_id="rs_1", delta="think")},
        {"type": "response.output_item.done",
         **item(0, item={"id": "rs_1", "type": "reasoning", "summary": []})},
        {"type": "response.output_item.added",
         **item(1, item={"id": "msg_1", "type": "message", "content": []})},
        {"type": "response.output_text.delta",
         **item(1, item_id="msg_1", content_index=0, delta="Checking.")},
    ]
    for n, (item_id, call_id, name, pieces) in enumerate(calls, start=2):
        fc = {"id": item_id, "type": "function_call", "call_id": call_id, "name": name,
              "arguments": ""}
        out.append({"type": "response.output_item.added", **item(n, item=fc)})
        out += [{"type": "response.function_call_arguments.delta",
                 **item(n, item_id=item_id, delta=p)} for p in pieces]
        out.append({"type": "response.function_call_arguments.done",
                    **item(n, item_id=item_id, arguments="".join(pieces))})
        out.append({"type": "response.output_item.done",
                    **item(n, item={**fc, "arguments": "".join(pieces), "status": "completed"})})
    out.append({"type": "response.completed",
                "response": {"id": "resp_1", "status": "completed"}})
    return [{**e, "sequence_number": i} for i, e in enumerate(out)]


@pytest.mark.parametrize("fmt", ["responses", "auto"])
def test_function_calls_without_output_index_are_tool_calls(fmt: str) -> None:
    reply = replay([body(llama_cpp_stream(output_index=False))], format=fmt)
    assert reply.outcome is Outcome.DONE and reply.skipped_frames == 0
    calls = reply.choices[0].tool_calls
    assert [(t.index, t.id, t.name, t.arguments) for t in calls] == [
        (2, "call_a", "get_weather", '{"city":"Paris"}'), (3, "call_b", "get_time", '{"tz":"CET"}')]
    assert reply.choices[0].stop == "tool_calls"
    assert reply.text == "Checking." and reply.choices[0].reasoning == "think"
    assert as_corpus(reply) == as_corpus(
        replay([body(llama_cpp_stream(output_index=True))], format=fmt))


def test_arguments_before_their_item_and_deltas_naming_no_item() -> None:
    """A delta that names its item before the item arrives is still that call's; one that
    names no item at all continues the call being streamed."""
    events = [
        {"type": "response.created", "response": {"id": "r"}},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '{"a"'},
        {"type": "response.output_item.added",
         "item": {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "f"}},
        {"type": "response.function_call_arguments.delta", "delta": ":1}"},
        {"type": "response.completed", "response": {"status": "completed"}},
    ]
    reply = replay([body(events)], format="responses")
    [call] = reply.choices[0].tool_calls
    assert (call.index, call.id, call.name, call.arguments) == (0, "c1", "f", '{"a":1}')
    assert reply.choices[0].stop == "tool_calls"


def test_a_token_inside_a_call_without_output_index_resumes_it() -> None:
    """A resume (``Last-Event-ID`` or a token) inside a call: its item is not sent again, so
    the token carries which item is which call."""
    from resume_tokens import token

    pieces = [body([e]) for e in llama_cpp_stream(output_index=False)]
    cut = next(i for i, p in enumerate(pieces) if b'"Paris' in p)
    first = StreamParser(content_key="k", format="responses")
    for piece in pieces[:cut]:
        first.feed(piece)
    second = StreamParser.from_token(token(first), format="responses")
    for piece in pieces[cut:]:
        second.feed(piece)
    second.close()
    whole = replay(pieces, format="responses", content_key="k")
    assert as_corpus(second.reply) == as_corpus(whole)


# --------------------------------------------------------------------------- summary parts


def summary_stream(*, delta_index: Any, done_index: Any) -> list[dict[str, Any]]:
    def index(value: Any) -> dict[str, Any]:
        return {} if value is None else {"summary_index": value}

    return [
        {"type": "response.created", "response": {"id": "r"}},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"id": "rs_1", "type": "reasoning", "summary": []}},
        {"type": "response.reasoning_summary_text.delta", "output_index": 0, "item_id": "rs_1",
         **index(delta_index), "delta": "Weighing "},
        {"type": "response.reasoning_summary_text.delta", "output_index": 0, "item_id": "rs_1",
         **index(delta_index), "delta": "options."},
        {"type": "response.reasoning_summary_text.done", "output_index": 0, "item_id": "rs_1",
         **index(done_index), "text": "Weighing options."},
        {"type": "response.output_text.delta", "output_index": 1, "content_index": 0,
         "delta": "Done."},
        {"type": "response.output_text.done", "content_index": 0, "text": "Done."},
        {"type": "response.completed", "response": {"status": "completed"}},
    ]


@pytest.mark.parametrize(("delta_index", "done_index"), [(None, 0), (0, None), (None, None),
                                                         (0, 0)])
def test_a_summary_part_is_shown_once_whatever_indices_it_names(delta_index: Any,
                                                                 done_index: Any) -> None:
    reply = replay([body(summary_stream(delta_index=delta_index, done_index=done_index))],
                   format="responses")
    assert reply.choices[0].reasoning == "Weighing options."
    assert reply.text == "Done."


def test_a_summary_part_sent_only_as_done_is_still_shown() -> None:
    events = summary_stream(delta_index=0, done_index=0)
    events = [e for e in events if e["type"] != "response.reasoning_summary_text.delta"]
    reply = replay([body(events)], format="responses")
    assert reply.choices[0].reasoning == "Weighing options."
