"""``ChatCompletionsFormat.feed_many`` (the parser's per-read call, with an inline path for the
common content-only chunk) against ``feed`` one event at a time.

Hypothesis builds streams of chunks around the edges of the inline path: one or two choices,
an index that is missing, a string or new; a delta with only ``content`` (a string, empty,
``null``, a list) or with ``role``/``refusal``/``reasoning``/``tool_calls`` beside it; a finish
reason, usage, an error, ``object: error``; a missing id or model; escaped surrogate halves;
invalid JSON, non-objects, ``event: error``, ``[DONE]`` and what follows it. Both paths must
give the same events and leave the same state, and in strict mode raise at the same event
with the same events before it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluxstream._events import Event
from fluxstream._limits import StreamLimits
from fluxstream.errors import FluxstreamError
from fluxstream.formats.chat_completions import ChatCompletionsFormat
from fluxstream.sse import ServerSentEvent

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CONTENT = st.sampled_from(["Hello", " wo", "é😀"] * 4 + ["", "\ud83d", "\ude00", "x\ud83d"])


@st.composite
def deltas(draw: st.DrawFn) -> Any:
    shape = draw(st.sampled_from(["content"] * 15 + ["extra", "none", "list", "empty", "junk"]))
    if shape == "content":
        return {"content": draw(CONTENT)}
    if shape == "extra":
        delta: dict[str, Any] = {"content": draw(st.none() | CONTENT)}
        key = draw(st.sampled_from(["role", "refusal", "reasoning_content", "tool_calls"]))
        delta[key] = {
            "role": "assistant",
            "refusal": draw(st.none() | CONTENT),
            "reasoning_content": draw(CONTENT),
            "tool_calls": [{"index": 0, "id": "c1", "function": {"arguments": "{"}}],
        }[key]
        return delta
    if shape == "none":
        return {"content": None}
    if shape == "list":
        return {"content": [{"type": "text", "text": draw(CONTENT)}]}
    if shape == "empty":
        return {}
    return draw(st.sampled_from([None, "text", 3, []]))


@st.composite
def chunks(draw: st.DrawFn) -> ServerSentEvent:
    kind = draw(st.sampled_from(["chunk"] * 40 + ["bad", "array", "done", "error_event"]))
    if kind == "bad":
        return ServerSentEvent(data=draw(st.sampled_from(["{\"choices\": [", "{x}", "{}}"])))
    if kind == "array":
        return ServerSentEvent(data="[1, 2]")
    if kind == "done":
        return ServerSentEvent(data="[DONE]")
    if kind == "error_event":
        return ServerSentEvent(event="error", data='{"message": "overloaded"}')
    obj: dict[str, Any] = {}
    if draw(st.integers(0, 15)):
        obj["id"] = "chatcmpl-1"
    if draw(st.integers(0, 15)):
        obj["model"] = "m"
    obj["object"] = draw(st.sampled_from(["chat.completion.chunk"] * 20 + ["error"]))
    choices = []
    for position in range(draw(st.sampled_from([1] * 10 + [2, 0]))):
        choice: dict[str, Any] = {}
        index = draw(st.sampled_from([0] * 10 + [1, None, "0", "missing"]))
        if index != "missing":
            choice["index"] = index if index is not None else position
        if draw(st.integers(0, 19)):
            choice["delta"] = draw(deltas())
        choice["finish_reason"] = draw(st.sampled_from([None] * 20 + ["stop", "length"]))
        choices.append(choice)
    obj["choices"] = draw(st.sampled_from([choices] * 20 + ["no list"]))
    obj["usage"] = draw(st.sampled_from([None] * 20 + [{}, {"completion_tokens": 3}, 7]))
    if not draw(st.integers(0, 30)):
        obj["error"] = {"message": "boom", "code": 500}
    text = json.dumps(obj, ensure_ascii=draw(st.booleans()))
    if any("\ud800" <= c <= "\udfff" for c in text):  # a decoded frame never holds halves
        text = json.dumps(obj)  # (escaped, as servers send them)
    return ServerSentEvent(data=text, id=draw(st.sampled_from(["", "1"])))


def state(fmt: ChatCompletionsFormat) -> tuple[Any, ...]:
    choices = {
        index: (
            st.text, st.reasoning, st.refusal, st.finish, st.last_call, dict(st.held or {}),
            {n: (c.id, c.name, c.length) for n, c in st.calls.items()},
        )
        for index, st in fmt._choices.items()
    }
    return (
        fmt.id, fmt.model, fmt.done, fmt.done_reason, fmt.cut, fmt.skipped,
        list(fmt.new_choices), fmt._holding, choices,
    )


def one_by_one(fmt: ChatCompletionsFormat, sses: list[ServerSentEvent]) -> tuple[Any, ...]:
    out: list[Event] = []
    error = None
    try:
        for sse in sses:
            out += fmt.feed(sse)
    except FluxstreamError as exc:
        error = (type(exc), str(exc))
    return out, error, state(fmt)


def many(fmt: ChatCompletionsFormat, sses: list[ServerSentEvent]) -> tuple[Any, ...]:
    out: list[Event] = []
    error = None
    try:
        fmt.feed_many(sses, out)
    except FluxstreamError as exc:
        error = (type(exc), str(exc))
    return out, error, state(fmt)


@SETTINGS
@given(
    sses=st.lists(chunks(), max_size=30),
    strict=st.booleans(),
    max_choices=st.sampled_from([1, 2, 64]),
)
def test_feed_many_equals_feed_one_by_one(
    sses: list[ServerSentEvent], strict: bool, max_choices: int
) -> None:
    limits = StreamLimits(max_choices=max_choices)
    expected = one_by_one(ChatCompletionsFormat("k", strict=strict, limits=limits), sses)
    got = many(ChatCompletionsFormat("k", strict=strict, limits=limits), sses)
    assert got == expected


@pytest.mark.parametrize("split", [1, 2, 5])
def test_a_typical_stream_takes_the_inline_path_and_equals_feed(split: int) -> None:
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m"}
    sses = [ServerSentEvent(data=json.dumps({**head, "choices": [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}))]
    sses += [
        ServerSentEvent(data=json.dumps({**head, "choices": [
            {"index": 0, "delta": {"content": f"w{i} "}, "logprobs": None,
             "finish_reason": None}], "usage": None}))
        for i in range(20)
    ]
    sses.append(ServerSentEvent(data=json.dumps({**head, "choices": [
        {"index": 0, "delta": {}, "finish_reason": "stop"}]})))
    sses.append(ServerSentEvent(data="[DONE]"))
    expected = one_by_one(ChatCompletionsFormat("k"), sses)
    fmt = ChatCompletionsFormat("k")
    out: list[Event] = []
    for start in range(0, len(sses), split):
        fmt.feed_many(sses[start : start + split], out)
    assert (out, None, state(fmt)) == expected
    assert "".join(getattr(e, "text", "") for e in out) == "".join(f"w{i} " for i in range(20))


FIRST = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": "a"}}]}
PLAIN = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
         "choices": [{"index": 0, "delta": {"content": "b"}, "finish_reason": None}]}


def _variant(change: str) -> dict[str, Any]:
    obj = json.loads(json.dumps(PLAIN))
    choice = obj["choices"][0]
    if change == "finish_reason":
        choice["finish_reason"] = "stop"
    elif change == "usage":
        obj["usage"] = {"completion_tokens": 2}
    elif change == "error":
        obj["error"] = {"message": "boom"}
    elif change == "object_error":
        obj["object"] = "error"
        obj["message"] = "boom"
    elif change in ("refusal", "reasoning_content", "role"):
        choice["delta"][change] = "r" if change != "role" else "assistant"
    elif change == "tool_calls":
        choice["delta"]["tool_calls"] = [{"index": 0, "id": "c", "function": {"name": "f"}}]
    elif change == "two_choices":
        obj["choices"].append({"index": 1, "delta": {"content": "c"}})
    elif change == "new_index":
        choice["index"] = 3
    elif change == "no_index":
        del choice["index"]
    elif change == "content_list":
        choice["delta"]["content"] = [{"type": "text", "text": "b"}]
    elif change == "high_half":
        choice["delta"]["content"] = "b\ud83d"
    return obj


CHANGES = ["none", "finish_reason", "usage", "error", "object_error", "refusal",
           "reasoning_content", "role", "tool_calls", "two_choices", "new_index", "no_index",
           "content_list", "high_half"]


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("first", ["whole", "no_model", "no_id"])
def test_each_way_off_the_inline_path_equals_feed(change: str, first: str) -> None:
    """After an ordinary first chunk, chunks that differ from the common one in one respect
    (and an ordinary one after them) map as ``feed`` maps them."""
    head = dict(FIRST)
    if first == "no_model":
        del head["model"]
    elif first == "no_id":
        del head["id"]
    frames = [head, _variant(change), PLAIN, _variant(change), PLAIN]
    sses = [ServerSentEvent(data=json.dumps(f)) for f in frames] + [
        ServerSentEvent(data="[DONE]"), ServerSentEvent(data=json.dumps(PLAIN))
    ]
    expected = one_by_one(ChatCompletionsFormat("k"), sses)
    assert many(ChatCompletionsFormat("k"), sses) == expected
    assert expected[0]  # the frames were not all skipped


# --------------------------------------------------------------------------- the decoder

# Whatever its msgspec decoder takes, ``from_json`` decodes to the same value (for every
# format that decodes with msgspec): tests/formats/test_fast_paths.py.


@pytest.mark.parametrize("depth", [150, 199, 200, 201, 202, 300, 990])
@pytest.mark.parametrize("kind", ["arrays", "objects"])
def test_deep_frames_are_decided_as_feed_decides(depth: int, kind: str) -> None:
    """from_json stops at 200 levels, msgspec at ~1,000: a frame deeper than from_json
    allows is still a skipped frame (strict: an error), as it was."""
    value = "[" * depth + "]" * depth if kind == "arrays" else '{"a":' * depth + "1" + "}" * depth
    frame = json.dumps({**PLAIN, "choices": []})[:-1] + ', "x": ' + value + "}"
    sses = [ServerSentEvent(data=json.dumps(FIRST)), ServerSentEvent(data=frame),
            ServerSentEvent(data=json.dumps(PLAIN))]
    for strict in (False, True):
        expected = one_by_one(ChatCompletionsFormat("k", strict=strict), sses)
        assert many(ChatCompletionsFormat("k", strict=strict), sses) == expected
    skipped = one_by_one(ChatCompletionsFormat("k"), sses)[2][5]
    assert skipped == (0 if depth < 199 else 1 if depth > 201 else skipped)
