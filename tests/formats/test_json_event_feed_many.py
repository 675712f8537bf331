"""The typed fast path of the event-typed formats (``JsonEventFormat.feed_many``: Responses'
``response.output_text.delta`` / ``response.function_call_arguments.delta``, Anthropic's
``content_block_delta`` with ``text_delta`` / ``input_json_delta``) against the general path.

The general path is the same format with no quick decoder (``quick_decoder = None``: every
frame through ``feed``). Both must give the same events, the same reply, the same state and the
same errors over streams Hypothesis builds around the edges of the fast path (sequence numbers
that repeat, go back or are not counts, a re-read after ``new_connection``, a new part, a
fragment before its call or block, values of other types, duplicate keys, escaped surrogate
halves, ``NaN``, frames nested deeper than ``from_json`` allows, ``event: error``, invalid JSON,
strict mode), one ``feed_many`` per read against ``feed`` one event at a time.

Every recorded stream of both formats cut at random read boundaries, and the fast path taken
on them, are in ``test_fast_paths.py`` (for every registered format).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fast_paths import without_quick_decoders
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluxstream._events import Event, TextDelta, ToolCallDelta
from fluxstream._limits import StreamLimits
from fluxstream.errors import FluxstreamError
from fluxstream.formats._json_event import JsonEventFormat
from fluxstream.formats.anthropic_messages import AnthropicMessagesFormat
from fluxstream.formats.responses import ResponsesFormat
from fluxstream.sse import ServerSentEvent

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# --------------------------------------------------------------------------- built streams

TEXT = st.sampled_from(["Hello", " wo", "é😀", "", "\ud83d", "\ude00", "x\ud83d", 7, None])


def _dump(obj: Any, rng: st.DataObject) -> str:
    text = json.dumps(obj, ensure_ascii=rng.draw(st.booleans(), "ascii"))
    if any("\ud800" <= c <= "\udfff" for c in text):
        text = json.dumps(obj)  # a decoded frame never holds halves: escaped, as servers send
    twist = rng.draw(st.sampled_from(["none"] * 12 + ["dup", "nan", "deep", "type", "bad"]),
                     "twist")
    if twist == "dup":  # a key twice: the last one counts, for both decoders
        key = rng.draw(st.sampled_from(["type", "delta", "index", "sequence_number"]), "key")
        text = text[:-1] + f', "{key}": ' + json.dumps(obj.get(key, 1)) + "}"
        if rng.draw(st.booleans(), "first"):
            text = "{" + f'"{key}": "x", ' + text[1:]
    elif twist == "nan":
        text = text[:-1] + ', "logprobs": [NaN]}'
    elif twist == "deep":
        depth = rng.draw(st.sampled_from([150, 199, 201, 300]), "depth")
        text = text[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}"
    elif twist == "type":
        text = text[:-1] + ', "obfuscation": "\\ud83d"}'
    elif twist == "bad":
        text = text[:-1]
    return text


@st.composite
def responses_events(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    kind = draw(st.sampled_from(
        ["response.output_text.delta"] * 12 + ["response.function_call_arguments.delta"] * 6
        + ["response.output_item.added", "response.output_text.done", "response.created",
           "response.completed", "error", "keepalive"]))
    obj: dict[str, Any] = {"type": kind}
    seq = draw(st.sampled_from(["next"] * 10 + ["same", "back", "none", "neg", "big", "str"]))
    obj["sequence_number"] = {"same": "@same", "back": "@back", "none": None, "neg": -1,
                              "big": 2**60, "str": "4"}.get(seq, "next")
    if draw(st.integers(0, 9)):
        obj["output_index"] = draw(st.sampled_from([0] * 6 + [1, 2, None, "0", True, 1.0]))
    if draw(st.integers(0, 9)):
        obj["content_index"] = draw(st.sampled_from([0] * 6 + [1, None, "0"]))
    if draw(st.integers(0, 9)):
        obj["item_id"] = draw(st.sampled_from(["msg_1"] * 6 + ["msg_2", "fc_1", None, 5]))
    if kind.endswith(".delta"):
        if draw(st.integers(0, 15)):
            obj["delta"] = draw(TEXT)
        obj["logprobs"] = []
    elif kind == "response.output_item.added":
        obj["item"] = draw(st.sampled_from([
            {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f"},
            {"type": "message", "id": "msg_1"}]))
    elif kind == "response.output_text.done":
        obj["text"] = "done text"
    elif kind in ("response.created", "response.completed"):
        obj["response"] = {"id": "resp_1", "model": "m", "status": "completed"}
    elif kind == "error":
        obj["message"] = "boom"
    event = draw(st.sampled_from([kind] * 8 + ["message", "error", "response.other"]))
    return event, obj


@st.composite
def anthropic_events(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    kind = draw(st.sampled_from(
        ["content_block_delta"] * 16 + ["content_block_start", "content_block_stop",
                                        "message_start", "message_delta", "message_stop",
                                        "ping", "error"]))
    obj: dict[str, Any] = {"type": kind}
    if kind.startswith("content_block"):
        obj["index"] = draw(st.sampled_from([0] * 6 + [1] * 3 + [2, 3, None, "0", True,
                                                                  2**70]))
    if kind == "content_block_delta" and draw(st.integers(0, 15)):
        dkind = draw(st.sampled_from(["text_delta"] * 6 + ["input_json_delta"] * 3
                                     + ["thinking_delta", "signature_delta", "other"]))
        field = {"text_delta": "text", "input_json_delta": "partial_json",
                 "thinking_delta": "thinking", "signature_delta": "signature"}.get(dkind, "x")
        delta: dict[str, Any] = {"type": dkind}
        if draw(st.integers(0, 15)):
            delta[field] = draw(TEXT)
        obj["delta"] = draw(st.sampled_from([delta] * 10 + [None, "text"]))
    elif kind == "content_block_start":
        obj["content_block"] = draw(st.sampled_from([
            {"type": "text", "text": ""}, {"type": "tool_use", "id": "t1", "name": "f",
                                           "input": {}},
            {"type": "thinking", "thinking": ""}]))
    elif kind == "message_start":
        obj["message"] = {"id": "msg_1", "model": "m", "content": [],
                          "usage": {"input_tokens": 3}}
    elif kind == "message_delta":
        obj["delta"] = {"stop_reason": draw(st.sampled_from([None, "end_turn"]))}
    elif kind == "error":
        obj["error"] = {"type": "overloaded_error", "message": "busy"}
    event = draw(st.sampled_from([kind] * 8 + ["message", "error"]))
    return event, obj


def frames(raw: list[tuple[str, dict[str, Any]]], rng: st.DataObject) -> list[ServerSentEvent]:
    """The drawn objects as wire frames: sequence numbers filled in, some frames odd."""
    out = []
    seq = 0
    for event, obj in raw:
        number = obj.get("sequence_number")
        if number == "next":
            seq += 1
            obj["sequence_number"] = seq
        elif number in ("@same", "@back"):  # the last number again, or one before it
            obj["sequence_number"] = seq if number == "@same" else max(0, seq - 2)
        oddity = rng.draw(st.sampled_from(["json"] * 30 + ["invalid", "array", "empty",
                                                           "done"]), "frame")
        data = {"invalid": "{x", "array": "[1]", "empty": "", "done": "[DONE]"}.get(
            oddity
        ) or _dump(obj, rng)
        out.append(ServerSentEvent(event=event, data=data))
    return out


def state(fmt: JsonEventFormat) -> dict[str, Any]:
    names = {n for cls in type(fmt).__mro__ for n in getattr(cls, "__slots__", ())}
    # Parts, items and blocks are objects without an equality: their resume state says them.
    opaque = {"_parts", "_shown", "items", "_blocks", "calls"}
    kept = {name: getattr(fmt, name, None) for name in sorted(names - opaque)}
    kept["calls"] = {i: (c.id, c.name, c.length) for i, c in fmt.calls.items()}
    kept["resume"] = fmt.resume_state()
    return kept


def drive(cls: type[JsonEventFormat], reads: list[list[ServerSentEvent]], strict: bool,
          reconnect_at: int | None, limits: StreamLimits) -> tuple[Any, ...]:
    fmt = cls("k", strict=strict, limits=limits)
    out: list[Event] = []
    error = None
    try:
        for number, batch in enumerate(reads):
            if number == reconnect_at:
                fmt.new_connection()
            fmt.feed_many(batch, out)
    except FluxstreamError as exc:
        error = (type(exc), str(exc))
    return out, error, state(fmt)


def _check(cls: type[JsonEventFormat], sses: list[ServerSentEvent], data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(0, len(sses)), min_size=1, max_size=8),
                            "cuts"))
    reads = [sses[a:b] for a, b in zip([0, *cuts], [*cuts, len(sses)], strict=True)]
    strict = data.draw(st.booleans(), "strict")
    reconnect_at = data.draw(st.none() | st.integers(1, len(reads)), "reconnect")
    limits = StreamLimits(max_tool_calls=data.draw(st.sampled_from([1, 2, 64]), "calls"))
    fast = drive(cls, reads, strict, reconnect_at, limits)
    with without_quick_decoders(cls):
        general = drive(cls, reads, strict, reconnect_at, limits)
    assert repr(fast) == repr(general)  # repr: a NaN the raw payloads hold equals itself


#: How streams usually begin (so that most drawn fragments find their part, call or block).
RESPONSES_HEAD: list[tuple[str, dict[str, Any]]] = [
    ("response.created", {"type": "response.created", "sequence_number": "next",
                          "response": {"id": "resp_1", "model": "m"}}),
    ("response.output_item.added", {
        "type": "response.output_item.added", "sequence_number": "next", "output_index": 0,
        "item": {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f"}}),
    ("response.output_text.delta", {
        "type": "response.output_text.delta", "sequence_number": "next", "output_index": 0,
        "content_index": 0, "item_id": "msg_1", "delta": "Hi"}),
]
ANTHROPIC_HEAD: list[tuple[str, dict[str, Any]]] = [
    ("message_start", {"type": "message_start", "message": {"id": "msg_1", "model": "m",
                                                            "content": []}}),
    ("content_block_start", {"type": "content_block_start", "index": 0,
                             "content_block": {"type": "text", "text": ""}}),
    ("content_block_start", {"type": "content_block_start", "index": 1,
                             "content_block": {"type": "tool_use", "id": "t1", "name": "f",
                                               "input": {}}}),
    ("content_block_start", {"type": "content_block_start", "index": 2,
                             "content_block": {"type": "thinking", "thinking": ""}}),
]


def _heads(head: list[tuple[str, dict[str, Any]]]) -> st.SearchStrategy[Any]:
    return st.sampled_from([head] * 4 + [[]]).map(lambda h: [(e, dict(o)) for e, o in h])


@SETTINGS
@given(head=_heads(RESPONSES_HEAD), raw=st.lists(responses_events(), min_size=4, max_size=40),
       data=st.data())
def test_responses_fast_path_equals_the_general_path(
    head: list[tuple[str, dict[str, Any]]], raw: list[tuple[str, dict[str, Any]]],
    data: st.DataObject
) -> None:
    _check(ResponsesFormat, frames(head + raw, data), data)


@SETTINGS
@given(head=_heads(ANTHROPIC_HEAD), raw=st.lists(anthropic_events(), min_size=4, max_size=40),
       data=st.data())
def test_anthropic_fast_path_equals_the_general_path(
    head: list[tuple[str, dict[str, Any]]], raw: list[tuple[str, dict[str, Any]]],
    data: st.DataObject
) -> None:
    _check(AnthropicMessagesFormat, frames(head + raw, data), data)


def test_a_typical_responses_stream_is_mapped_by_quick() -> None:
    head = [{"type": "response.created", "sequence_number": 0,
             "response": {"id": "r", "model": "m"}},
            {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
             "item": {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "f"}}]
    deltas = [{"type": "response.output_text.delta", "sequence_number": 2 + i,
               "output_index": 1, "content_index": 0, "item_id": "msg_1", "delta": f"w{i} ",
               "logprobs": [], "obfuscation": "abc"} for i in range(10)]
    args = [{"type": "response.function_call_arguments.delta", "sequence_number": 12 + i,
             "output_index": 0, "item_id": "fc_1", "delta": "{}"[i]} for i in range(2)]
    sses = [ServerSentEvent(event=o["type"], data=json.dumps(o)) for o in head + deltas + args]
    fmt = ResponsesFormat("k")
    out: list[Event] = []
    fmt.feed_many(sses, out)
    quick: list[Any] = []
    fmt2 = ResponsesFormat("k")
    fmt2.feed_many(sses[:3], [])  # the first delta opens the part (the general path)
    for sse in sses[3:]:
        quick.append(fmt2.quick(ResponsesFormat.quick_decoder.decode(sse.data), []))  # type: ignore[union-attr]
    assert all(quick)
    assert "".join(e.text for e in out if isinstance(e, TextDelta)) == "".join(
        f"w{i} " for i in range(10))
    assert [e.arguments for e in out if isinstance(e, ToolCallDelta)] == ["", "{", "}"]
    assert fmt.sequence == 13


@pytest.mark.parametrize("after", ["@same", "@back", "next"])
@pytest.mark.parametrize("kind", ["response.output_text.delta",
                                  "response.function_call_arguments.delta"])
def test_a_reread_fragment_past_the_last_number_makes_the_stream_live(
    kind: str, after: str
) -> None:
    """After a re-read begins (``new_connection``), a fragment the fast path maps with a new
    number makes what follows new whatever its number, as the general path does."""
    head = [{"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
             "item": {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f"}},
            {"type": "response.output_text.delta", "sequence_number": 2, "output_index": 1,
             "content_index": 0, "item_id": "msg_1", "delta": "a"}]
    fragment = {"type": kind, "sequence_number": 3, "output_index": 0 if "call" in kind else 1,
                "content_index": 0, "item_id": "msg_1", "delta": "b"}
    later = dict(fragment, delta="c",
                 sequence_number={"@same": 3, "@back": 2, "next": 4}[after])
    reads = [[ServerSentEvent(event=o["type"], data=json.dumps(o)) for o in head],
             [ServerSentEvent(event=kind, data=json.dumps(o)) for o in (fragment, later)]]
    fast = drive(ResponsesFormat, reads, False, 1, StreamLimits())
    with without_quick_decoders(ResponsesFormat):
        general = drive(ResponsesFormat, reads, False, 1, StreamLimits())
    assert repr(fast) == repr(general)
    texts = [getattr(e, "text", getattr(e, "arguments", None)) for e in fast[0]]
    assert texts[-2:] == ["b", "c"]  # the later fragment is not taken for a replay
