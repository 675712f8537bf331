"""Structured output over real wire bytes: StreamParser events -> StructuredTracker (sans-IO),
for Chat Completions content, Chat Completions tool calls and Anthropic tool-as-schema."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from sse_frames import frame

from fluxstream._parser import StreamParser
from fluxstream.errors import ParseError
from fluxstream.structured import StructuredTracker, parse_reply


class Step(BaseModel):
    title: str
    minutes: int


class Plan(BaseModel):
    goal: str
    steps: list[Step]


PLAN = Plan(goal="tea", steps=[Step(title="boil water", minutes=3), Step(title="steep", minutes=4)])


def chat_body(text: str, *, size: int, finish: str | None = "stop", done: bool = True,
              refusal: str | None = None) -> list[bytes]:
    base = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    out = [frame({**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})]
    if refusal:
        out.append(frame({**base, "choices": [{"index": 0, "delta": {"refusal": refusal}}]}))
    for i in range(0, len(text), size):
        out.append(frame({**base, "choices": [{"index": 0,
                                               "delta": {"content": text[i : i + size]}}]}))
    if finish:
        out.append(frame({**base, "choices": [{"index": 0, "delta": {},
                                               "finish_reason": finish}]}))
    if done:
        out.append(b"data: [DONE]\n\n")
    return out


def drive(reads: list[bytes], tracker: StructuredTracker, *,
          fmt: str = "chat_completions") -> tuple[list[Any], StreamParser]:
    parser = StreamParser(format=fmt)
    dumps: list[Any] = []
    for read in reads:
        for event in parser.feed(read):
            changed = tracker.feed(event)
            if changed is not None and changed.value is not None:
                value = changed.value
                dumps.append(value.model_dump(exclude_unset=True))
    for event in parser.close():
        tracker.feed(event)
    return dumps, parser


def test_chat_content_streams_typed_partials_and_the_final_parse() -> None:
    text = PLAN.model_dump_json()
    tracker = StructuredTracker(Plan)
    dumps, parser = drive(chat_body(text, size=4), tracker)
    assert {"goal": "tea", "steps": [{"title": "boil water"}]} in dumps
    assert dumps[-1] == PLAN.model_dump()
    # reported only on a change (a value growing, or completing): never twice in a row more
    # than once (a string shown in full, then complete), never more often than deltas
    assert len(dumps) <= -(-len(text) // 4)
    assert all(not (a == b == c) for a, b, c in zip(dumps, dumps[1:], dumps[2:], strict=False))
    result = tracker.result()
    assert result.complete and result.value == PLAN
    assert parse_reply(parser.reply, Plan).value == PLAN


def test_chat_content_cut_by_length_is_a_stated_partial() -> None:
    text = PLAN.model_dump_json()
    tracker = StructuredTracker(Plan)
    drive(chat_body(text[:50], size=7, finish="length"), tracker)
    result = tracker.result()
    assert not result.complete and result.reason == "length"
    assert result.value is not None and result.value.steps[0].title == "boil water"


def test_chat_content_cut_by_the_network_is_a_stated_partial() -> None:
    text = PLAN.model_dump_json()
    tracker = StructuredTracker(Plan)
    _, parser = drive(chat_body(text[:50], size=7, finish=None, done=False), tracker)
    result = tracker.result()
    assert not result.complete and result.reason == "truncated"
    assert parse_reply(parser.reply, Plan).reason == "truncated"


def test_chat_refusal_is_surfaced_and_bad_content_is_a_parse_error() -> None:
    tracker = StructuredTracker(Plan)
    drive(chat_body("", size=4, refusal="I can't do that."), tracker)
    assert tracker.result().refusal == "I can't do that."
    bad = StructuredTracker(Plan)
    drive(chat_body('```json\n{"goal": "tea", "steps": [{"title": 1}]}\n```', size=3), bad)
    with pytest.raises(ParseError) as info:
        bad.result()
    assert info.value.errors[0]["loc"] == ("steps", 0, "title")


def test_chat_tool_call_arguments_as_typed_partials() -> None:
    base = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    args = PLAN.model_dump_json()
    reads = [frame({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_1", "type": "function",
         "function": {"name": "make_plan", "arguments": ""}}]}}]})]
    for i in range(0, len(args), 5):
        reads.append(frame({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": args[i : i + 5]}}]}}]}))
    reads.append(frame({**base, "choices": [{"index": 0, "delta": {},
                                            "finish_reason": "tool_calls"}]}))
    reads.append(b"data: [DONE]\n\n")
    tracker = StructuredTracker(tools={"make_plan": Plan})
    dumps, parser = drive(reads, tracker)
    assert {"goal": "tea", "steps": [{"title": "boil water", "minutes": 3}, {}]} in dumps
    assert tracker.call_result(0, 0).value == PLAN
    assert parser.reply.choices[0].tool_calls[0].parse_arguments(Plan) == PLAN
    with pytest.raises(LookupError):
        tracker.result()


def _event(kind: str, data: dict[str, Any]) -> bytes:
    """An event named by its type, as the Anthropic and Responses APIs send them."""
    return frame({"type": kind, **data}, kind)


def test_anthropic_tool_as_schema() -> None:
    args = PLAN.model_dump_json()
    reads = [
        _event("message_start", {"message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1}}}),
        _event("content_block_start", {"index": 0, "content_block": {
            "type": "tool_use", "id": "toolu_1", "name": "Plan", "input": {}}}),
    ]
    for i in range(0, len(args), 6):
        reads.append(_event("content_block_delta", {"index": 0, "delta": {
            "type": "input_json_delta", "partial_json": args[i : i + 6]}}))
    cut = len(reads)
    reads += [
        _event("content_block_stop", {"index": 0}),
        _event("message_delta", {"delta": {"stop_reason": "tool_use", "stop_sequence": None},
                                     "usage": {"output_tokens": 10}}),
        _event("message_stop", {}),
    ]
    tracker = StructuredTracker(tools=Plan)  # one type for every call
    dumps, _ = drive(reads, tracker, fmt="anthropic_messages")
    assert {"goal": "tea"} in dumps and dumps[-1] == PLAN.model_dump()
    assert tracker.call_result(0, 0).value == PLAN
    # the same stream cut by max_tokens halfway through the arguments
    stop = _event("message_delta", {
        "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
        "usage": {"output_tokens": 10}})
    half = [*reads[: cut // 2], stop, _event("message_stop", {})]
    cut_tracker = StructuredTracker(tools=Plan)
    drive(half, cut_tracker, fmt="anthropic_messages")
    partial = cut_tracker.call_result(0, 0)
    assert not partial.complete and partial.reason == "max_tokens"
    assert partial.value is not None and partial.value.goal == "tea"


def test_a_restart_starts_the_object_over() -> None:
    from fluxstream._events import Reset, TextDelta

    tracker = StructuredTracker(Plan)
    tracker.feed(TextDelta("k", 0, 0, '{"goal": "cof'))
    tracker.feed(Reset("k", 1, "restart"))
    assert tracker.content is not None and tracker.content.value is None
    tracker.feed(TextDelta("k", 0, 0, PLAN.model_dump_json()))
    assert tracker.content.value == PLAN


def responses_body(text: str, *, size: int, status: str = "completed",
                   incomplete: str | None = None) -> list[bytes]:
    response = {"id": "resp_1", "object": "response", "model": "m", "status": "in_progress",
                "output": []}
    reads = [_event("response.created", {"response": response}),
             _event("response.output_item.added", {"output_index": 0, "item": {
                 "id": "msg_1", "type": "message", "role": "assistant", "content": []}}),
             _event("response.content_part.added", {
                 "item_id": "msg_1", "output_index": 0, "content_index": 0,
                 "part": {"type": "output_text", "text": ""}})]
    for i in range(0, len(text), size):
        reads.append(_event("response.output_text.delta", {
            "item_id": "msg_1", "output_index": 0, "content_index": 0,
            "delta": text[i : i + size]}))
    final = {**response, "status": status}
    if incomplete:
        final["incomplete_details"] = {"reason": incomplete}
    reads.append(_event(f"response.{status}", {"response": final}))
    return reads


def test_responses_text_format_content() -> None:
    text = PLAN.model_dump_json(indent=1)
    tracker = StructuredTracker(Plan)
    dumps, parser = drive(responses_body(text, size=3), tracker, fmt="responses")
    assert {"goal": "tea", "steps": [{"title": "boil water", "minutes": 3}]} in dumps
    assert tracker.result().value == PLAN
    assert parse_reply(parser.reply, Plan).value == PLAN


def test_responses_incomplete_by_max_output_tokens_is_a_stated_partial() -> None:
    text = PLAN.model_dump_json()
    tracker = StructuredTracker(Plan)
    _, parser = drive(responses_body(text[:45], size=3, status="incomplete",
                                     incomplete="max_output_tokens"), tracker, fmt="responses")
    result = tracker.result()
    assert not result.complete and result.value is not None and result.value.goal == "tea"
    assert result.reason == "incomplete"  # the raw status; parser.reply.choices[0].stop
    assert parser.reply.choices[0].stop == "length"
    replied = parse_reply(parser.reply, Plan)
    assert not replied.complete and replied.value == result.value
