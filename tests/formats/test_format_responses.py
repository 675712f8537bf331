"""OpenAI Responses streams: every recorded ``resp-*`` stream assembles exactly, however it is
read and whether the format is named or recognised (``auto``); the mapping rules and bad input,
one focused test each; fuzz properties like the Chat Completions ones."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
from fixture_files import chat_streams, require
from format_corpus import (
    MODES,
    as_corpus,
    check_events_rebuild_reply,
    check_reply,
    expected,
    reads,
    run,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sse_frames import frames

from fluxstream._events import (
    End,
    ErrorEvent,
    Finish,
    Outcome,
    ReasoningBlock,
    SkippedFrame,
    TextDelta,
    ToolCallDelta,
)
from fluxstream._parser import StreamParser, replay
from fluxstream.errors import FrameDecodeError

FILES = chat_streams("resp-")
IDS = [p.stem for p in FILES]

#: The unified finish reason of each recorded stream (``None``: no terminal event arrived).
STOPS = {
    "resp-syn-error-event-flat": None,
    "resp-syn-refusal-incomplete": "content_filter",
    "resp-syn-truncated": None,
    "resp-vercel-azure-function-call": "tool_calls",
    "resp-vercel-azure-text-harness-framing": "stop",
    "resp-vercel-incomplete-data-no-space": "length",
    "resp-vercel-lmstudio-args-only-in-done": "tool_calls",
    "resp-vercel-openai-quota-error": "error",
    "resp-vercel-xai-reasoning-summary": "stop",
}


def test_corpus_is_complete() -> None:
    assert [p.stem for p in FILES] == sorted(STOPS)


@pytest.mark.parametrize("fmt", ["responses", "auto"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_recorded_stream_assembles_exactly(path: Path, mode: str, fmt: str) -> None:
    body = require(path).read_bytes()
    reply = replay(reads(body, mode), format=fmt)
    check_reply(reply, expected(path))
    assert reply.bytes == len(body)
    assert reply.choices[0].stop == STOPS[path.stem]
    assert reply.skipped_frames == 0


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_events_rebuild_the_reply(path: Path) -> None:
    events, parser = run([require(path).read_bytes()], format="responses")
    check_events_rebuild_reply(events, parser.reply)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_strict_mode_accepts_every_recorded_stream(path: Path) -> None:
    check_reply(replay([require(path).read_bytes()], format="responses", strict=True),
                expected(path))


# --------------------------------------------------------------------------- mapping


#: Responses framing: ``event: <type>`` (unless ``named`` is false) then ``data:``.
frame = partial(frames, named=True)


def created(rid: str = "resp_1") -> dict[str, Any]:
    return {"type": "response.created", "sequence_number": 0,
            "response": {"id": rid, "model": "gpt-x", "status": "in_progress", "output": []}}


def text(delta: str, oi: int = 0, ci: int = 0) -> dict[str, Any]:
    return {"type": "response.output_text.delta", "output_index": oi, "content_index": ci,
            "delta": delta}


def item(oi: int, done: bool = False, **fields: Any) -> dict[str, Any]:
    kind = "response.output_item.done" if done else "response.output_item.added"
    return {"type": kind, "output_index": oi, "item": fields}


def fc(oi: int, done: bool = False, args: Any = "", **extra: Any) -> dict[str, Any]:
    return item(oi, done, type="function_call", id=f"fc_{oi}", call_id=f"call_{oi}",
                name="lookup", arguments=args, **extra)


def args_delta(oi: int, delta: Any) -> dict[str, Any]:
    return {"type": "response.function_call_arguments.delta", "output_index": oi,
            "delta": delta}


def args_done(oi: int, arguments: Any) -> dict[str, Any]:
    return {"type": "response.function_call_arguments.done", "output_index": oi,
            "arguments": arguments}


def terminal(status: str = "completed", **response: Any) -> dict[str, Any]:
    return {"type": f"response.{status}",
            "response": {"id": "resp_1", "status": status, **response}}


def go(*payloads: dict[str, Any] | str, named: bool = True, **kwargs: Any):  # type: ignore[no-untyped-def]
    events, parser = run([frame(*payloads, named=named)], format="responses", **kwargs)
    check_events_rebuild_reply(events, parser.reply)
    return events, parser.reply


def test_text_reasoning_refusal_channels_and_offsets() -> None:
    events, reply = go(
        created(),
        {"type": "response.reasoning_summary_text.delta", "output_index": 0,
         "summary_index": 0, "delta": "think"},
        {"type": "response.reasoning_text.delta", "output_index": 0, "content_index": 0,
         "delta": "ing"},
        text("Hé"), text("llo 👋"),
        {"type": "response.refusal.delta", "output_index": 1, "content_index": 0,
         "delta": "no"},
        terminal(usage={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}),
    )
    c = reply.choices[0]
    assert (c.text, c.reasoning, c.refusal) == ("Héllo 👋", "thinking", "no")
    assert [(e.offset, e.text) for e in events if isinstance(e, TextDelta)] == [
        (0, "Hé"), (2, "llo 👋")]  # code points, not bytes or UTF-16 units
    assert reply.id == "resp_1" and reply.model == "gpt-x"
    assert reply.usage is not None
    assert reply.usage.model_dump(exclude_unset=True) == {
        "input_tokens": 3, "output_tokens": 4, "total_tokens": 7}
    assert (c.finish_reason, c.stop, reply.outcome) == ("completed", "stop", Outcome.DONE)


def test_type_is_read_from_the_payload_without_event_lines() -> None:
    _, reply = go(created(), text("a"), terminal(), named=False)
    assert reply.text == "a" and reply.outcome is Outcome.DONE


def test_sentinel_after_the_terminal_event_is_tolerated() -> None:
    _, reply = go(created(), text("a"), terminal(), "[DONE]", named=False)
    assert reply.outcome is Outcome.DONE and reply.end_reason == "response.completed"


def test_events_after_the_terminal_one_are_ignored() -> None:
    _, reply = go(created(), text("a"), terminal(), text("b"), {"type": "error",
                                                                "message": "late"})
    assert reply.text == "a" and reply.error is None and reply.outcome is Outcome.DONE


def test_function_call_streamed_then_confirmed() -> None:
    events, reply = go(created(), fc(1), args_delta(1, '{"q":'), args_delta(1, '"x"}'),
                       args_done(1, '{"q":"x"}'), fc(1, True, '{"q":"x"}'), terminal())
    (call,) = reply.choices[0].tool_calls
    assert (call.index, call.id, call.name, call.arguments) == (1, "call_1", "lookup",
                                                                '{"q":"x"}')
    assert reply.choices[0].stop == "tool_calls"
    assert not any(isinstance(e, ToolCallDelta) and e.replace for e in events)


def test_arguments_only_in_done() -> None:
    _, reply = go(created(), fc(0), args_done(0, '{"a":1}'), terminal())
    assert reply.choices[0].tool_calls[0].arguments == '{"a":1}'


def test_arguments_only_in_output_item_done() -> None:
    _, reply = go(created(), fc(0), fc(0, True, '{"a":1}'), terminal())
    assert reply.choices[0].tool_calls[0].arguments == '{"a":1}'


def test_done_that_extends_the_fragments_delivers_the_rest() -> None:
    events, reply = go(created(), fc(0), args_delta(0, '{"a":'), args_done(0, '{"a":1}'),
                       terminal())
    last = [e for e in events if isinstance(e, ToolCallDelta)][-1]
    assert (last.offset, last.arguments, last.replace) == (5, "1}", False)
    assert reply.choices[0].tool_calls[0].arguments == '{"a":1}'


def test_done_that_disagrees_replaces_the_fragments() -> None:
    events, reply = go(created(), fc(0), args_delta(0, '{"a":12345'),
                       args_done(0, '{"a":1}'), terminal())
    last = [e for e in events if isinstance(e, ToolCallDelta)][-1]
    assert (last.offset, last.arguments, last.replace) == (6, "}", True)
    call = reply.choices[0].tool_calls[0]
    assert call.arguments == '{"a":1}' and call.partial_arguments() == {"a": 1}


def test_replacement_resets_partial_arguments_state() -> None:
    parser = StreamParser(format="responses")
    parser.feed(frame(created(), fc(0), args_delta(0, '{"long":"abcdef')))
    assert parser.partial_arguments(0, 0) == {"long": "abcdef"}
    parser.feed(frame(args_done(0, '{"b":2}')))
    assert parser.partial_arguments(0, 0) == {"b": 2}


def test_object_arguments_are_compact_json() -> None:
    _, reply = go(created(), fc(0), args_done(0, {"a": [1, 2]}), terminal())
    assert reply.choices[0].tool_calls[0].arguments == '{"a":[1,2]}'


def test_delta_before_its_item_is_kept_and_identity_comes_later() -> None:
    _, reply = go(created(), args_delta(0, "{}"), fc(0, True, "{}"), terminal())
    (call,) = reply.choices[0].tool_calls
    assert (call.id, call.name, call.arguments) == ("call_0", "lookup", "{}")


def test_done_text_is_used_only_when_no_delta_arrived() -> None:
    _, reply = go(created(), {"type": "response.output_text.done", "output_index": 0,
                              "content_index": 0, "text": "only in done"}, terminal())
    assert reply.text == "only in done"
    _, reply = go(created(), text("delta"), {"type": "response.output_text.done",
                                             "output_index": 0, "content_index": 0,
                                             "text": "differs"}, terminal())
    assert reply.text == "delta"


@pytest.mark.parametrize(
    ("status", "details", "stop"),
    [("incomplete", {"reason": "max_output_tokens"}, "length"),
     ("incomplete", {"reason": "content_filter"}, "content_filter"),
     ("incomplete", None, "other"),
     ("failed", None, "error"),
     ("completed", None, "stop")],
)
def test_terminal_status_and_unified_stop(status: str, details: Any, stop: str) -> None:
    events, reply = go(created(), text("a"), terminal(status, incomplete_details=details))
    assert reply.choices[0].finish_reason == status and reply.choices[0].stop == stop
    fin = next(e for e in events if isinstance(e, Finish))
    assert fin.reason == status and fin.stop == stop
    assert reply.stream_end is Outcome.DONE


@pytest.mark.parametrize(
    "payload",
    [{"type": "error", "code": "server_error", "message": "boom", "param": None},
     {"type": "error", "error": {"type": "server_error", "code": "server_error",
                                 "message": "boom", "param": None}}],
)
def test_error_event_flat_or_nested(payload: dict[str, Any]) -> None:
    events, reply = go(created(), text("a"), payload)
    assert reply.error is not None and reply.error.message == "boom"
    assert reply.error.code == "server_error"
    assert reply.outcome is Outcome.FAILED and reply.stream_end is Outcome.TRUNCATED
    assert any(isinstance(e, ErrorEvent) for e in events)


def test_response_failed_error_is_the_reply_error() -> None:
    _, reply = go(created(), terminal("failed", error={"code": "rate_limit_exceeded",
                                                       "message": "slow down"}))
    assert reply.error is not None and reply.error.message == "slow down"
    assert reply.error.code == "rate_limit_exceeded"
    assert reply.outcome is Outcome.FAILED and reply.stream_end is Outcome.DONE


def test_error_event_detail_wins_over_the_failed_repeat() -> None:
    _, reply = go(created(), {"type": "error", "error": {"type": "insufficient_quota",
                                                         "message": "quota"}},
                  terminal("failed", error={"code": "x", "message": "repeat"}))
    assert reply.error is not None and reply.error.message == "quota"
    assert reply.error.type == "insufficient_quota"


def test_reasoning_items_are_kept_not_shown() -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [],
                 "encrypted_content": "gAAA..."}
    events, reply = go(created(), item(0, True, **reasoning), text("a", oi=1), terminal())
    assert reply.choices[0].reasoning_blocks == [reasoning]
    assert reply.text == "a" and reply.choices[0].reasoning is None
    assert any(isinstance(e, ReasoningBlock) for e in events)


def test_hosted_tool_events_are_ignored_unknown_types_counted() -> None:
    events, reply = go(
        created(),
        {"type": "response.web_search_call.in_progress", "output_index": 0},
        item(0, type="web_search_call", id="ws_1"),
        {"type": "response.output_text.annotation.added", "annotation": {}},
        {"type": "keepalive"},
        {"type": "totally.new", "x": 1},
        text("a", oi=1),
        terminal(),
    )
    assert reply.text == "a" and reply.choices[0].tool_calls == []
    assert reply.skipped_frames == 1 and reply.heartbeats == 1
    assert [e.reason for e in events if isinstance(e, SkippedFrame)] == [
        "unknown Responses event type 'totally.new'"]


@pytest.mark.parametrize(
    "payload",
    [
        '{"type": "response.output_text.delta", "delta": 5}',
        '{"type": "response.output_text.delta", "delta": null}',
        '{"type": "response.output_text.delta"}',
        '{"type": "response.function_call_arguments.delta", "output_index": "0", "delta": "x"}',
        '{"type": "response.function_call_arguments.delta", "output_index": 0, "delta": 7}',
        '{"type": "response.function_call_arguments.done", "output_index": 0}',
        '{"type": "response.output_item.added", "output_index": 0, "item": "nope"}',
        '{"type": "response.output_item.added", "output_index": null, '
        '"item": {"type": "function_call"}}',
        '{"type": "response.completed", "response": "nope"}',
        '{"type": "response.completed", "response": {"status": 7, "usage": "x"}}',
        '{"type": "response.created", "response": {"id": 5, "model": []}}',
        '{"type": 12}',
        "[1, 2]",
        '"just a string"',
        "{not json",
    ],
)
def test_hostile_payloads_never_raise(payload: str) -> None:
    events, reply = go(created(), text("a"), payload, text("b"))
    assert reply.text.startswith("a")
    assert type(events[-1]) is End


def test_invalid_json_in_strict_mode_is_a_typed_error() -> None:
    parser = StreamParser(format="responses", strict=True)
    with pytest.raises(FrameDecodeError):
        parser.feed(frame(created(), "{oops"))


def test_truncated_without_terminal_event() -> None:
    _, reply = go(created(), text("a"))
    assert reply.outcome is Outcome.TRUNCATED and reply.choices[0].finish_reason is None


def test_whole_response_body() -> None:
    parser = StreamParser(format="responses")
    parser.feed_completion({
        "id": "resp_9", "object": "response", "model": "m", "status": "completed",
        "output": [
            {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text",
                                                            "text": "hm"}]},
            {"type": "message", "content": [{"type": "output_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        ],
        "usage": {"input_tokens": 1, "output_tokens": 2},
    })
    parser.close()
    reply = parser.reply
    c = reply.choices[0]
    assert (c.text, c.reasoning, c.stop, reply.outcome) == ("hi", "hm", "tool_calls",
                                                            Outcome.DONE)
    assert [(t.index, t.id, t.name, t.arguments) for t in c.tool_calls] == [(2, "c1", "f",
                                                                             "{}")]
    assert reply.id == "resp_9" and len(c.reasoning_blocks) == 1


def test_decoded_events_via_feed_chunk_end_done() -> None:
    parser = StreamParser(format="responses")
    for p in (created(), text("a"), terminal()):
        parser.feed_chunk(p)
    assert parser.finished and parser.reply.outcome is Outcome.DONE


def test_resume_token_continues_offsets() -> None:
    parser = StreamParser(content_key="k", format="responses")
    parser.feed(frame(created(), text("abc"), fc(1), args_delta(1, '{"a"')))
    token = {"key": "k", "reply": parser.reply.model_dump(), "offsets": parser.offsets()}
    again = StreamParser.from_token(token, format="responses")
    events = again.feed(frame(text("de"), args_delta(1, ":1}"), terminal()))
    assert [(e.offset, e.text) for e in events if isinstance(e, TextDelta)] == [(3, "de")]
    assert again.reply.text == "abcde"
    assert again.reply.choices[0].tool_calls[0].arguments == '{"a":1}'


# --------------------------------------------------------------------------- fuzz

_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.text(max_size=5),
                    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                         st.integers(),
                                                                         max_size=2))
_KINDS = st.sampled_from([
    "response.created", "response.output_text.delta", "response.output_text.done",
    "response.refusal.delta", "response.reasoning_text.delta",
    "response.reasoning_summary_text.delta", "response.output_item.added",
    "response.output_item.done", "response.function_call_arguments.delta",
    "response.function_call_arguments.done", "response.completed", "response.incomplete",
    "response.failed", "error", "keepalive", "mystery",
])
_FIELDS = st.sampled_from(["delta", "output_index", "content_index", "item", "arguments",
                           "response", "text", "message", "error", "summary_index"])


@st.composite
def hostile_events(draw: st.DrawFn) -> dict[str, Any]:
    obj: dict[str, Any] = {"type": draw(_KINDS)}
    for field in draw(st.lists(_FIELDS, max_size=4)):
        if field == "item":
            obj[field] = draw(st.one_of(_VALUES, st.fixed_dictionaries(
                {"type": st.sampled_from(["function_call", "reasoning", "message", 3]),
                 "call_id": _VALUES, "name": _VALUES, "arguments": _VALUES})))
        elif field == "response":
            obj[field] = draw(st.one_of(_VALUES, st.fixed_dictionaries(
                {"status": _VALUES, "usage": _VALUES, "error": _VALUES,
                 "incomplete_details": _VALUES, "id": _VALUES})))
        else:
            obj[field] = draw(_VALUES)
    return obj


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(hostile_events(), max_size=12), st.data())
def test_fuzz_hostile_event_sequences(payloads: list[dict[str, Any]],
                                      data: st.DataObject) -> None:
    """Whatever the events: no exception, one End last, offsets rebuild every channel, and
    the result does not depend on read boundaries or on naming the format."""
    body = frame(*payloads, named=data.draw(st.booleans()))
    events, parser = run([body], format="responses")
    check_events_rebuild_reply(events, parser.reply)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=8, unique=True)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    assert run(pieces, format="responses")[0] == events
    assert as_corpus(parser.reply) == as_corpus(replay([body], format="responses"))


# --------------------------------------------------------------------------- resume


def _seq(n: int, payload: dict[str, Any]) -> dict[str, Any]:
    return {**payload, "sequence_number": n}


def test_resume_after_a_drop_never_shows_text_twice() -> None:
    """A background response resumed with ``starting_after=N``: whether the server honours it
    or starts over, the text arrives once, at continuing offsets."""
    first = frame(_seq(0, created()), _seq(1, text("Hello")), _seq(2, text(", wor")))
    rest = [_seq(3, text("ld")), _seq(4, terminal())]
    for server_starts_over in (False, True):
        parser = StreamParser(content_key="k", format="responses")
        events = parser.feed(first)
        parser.new_connection()
        fmt = parser._format
        assert fmt.sequence == 2  # type: ignore[attr-defined]
        again = ([_seq(0, created()), _seq(1, text("Hello")), _seq(2, text(", wor"))]
                 if server_starts_over else [])
        events += parser.feed(frame(*again, *rest)) + parser.close()
        assert parser.reply.text == "Hello, world"
        assert parser.reply.outcome is Outcome.DONE
        deltas = [(e.offset, e.text) for e in events if isinstance(e, TextDelta)]
        assert deltas == [(0, "Hello"), (5, ", wor"), (10, "ld")]
        assert fmt.replayed == (3 if server_starts_over else 0)  # type: ignore[attr-defined]


def test_a_repeated_number_within_one_connection_drops_nothing() -> None:
    """Nothing was delivered before a first connection: a number that repeats (a bridge
    numbering each item from 0) is no reason to drop text."""
    parser = StreamParser(format="responses")
    parser.feed(frame(_seq(0, created()), _seq(1, text("a")), _seq(1, text("b")),
                      _seq(2, terminal())))
    parser.close()
    assert parser.reply.text == "ab" and parser.reply.skipped_frames == 0
    assert parser.sequence is None  # such numbers cannot order a starting_after re-read


def test_memory_does_not_grow_with_deltas_naming_new_parts() -> None:
    from fluxstream.formats.responses import MAX_PARTS

    parser = StreamParser(format="responses")
    parser.feed(frame(created(), *(text("x", oi=i) for i in range(MAX_PARTS + 50))))
    assert len(parser._format._parts) == MAX_PARTS  # type: ignore[attr-defined]
    assert parser.reply.text == "x" * (MAX_PARTS + 50)
    # past the cap a .done text is never used (it could repeat streamed text)
    parser.feed(frame({"type": "response.output_text.done", "output_index": 10**6,
                       "content_index": 0, "text": "dup"}))
    assert parser.reply.text == "x" * (MAX_PARTS + 50)


def test_kept_reasoning_items_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from fluxstream.formats import _json_event

    monkeypatch.setattr(_json_event, "MAX_KEPT_CHARS", 250)  # two items of ~108 characters
    items = [item(i, True, type="reasoning", id=f"rs_{i}", encrypted_content="e" * 60)
             for i in range(4)]
    _, reply = go(created(), *items, terminal())
    assert len(reply.choices[0].reasoning_blocks) == 2 and reply.skipped_frames == 2


# --------------------------------------------------------------------------- surrogates


def test_an_emoji_cut_by_utf16_unit_across_events_is_one_code_point() -> None:
    body = frame(created()) + (
        b'data: {"type":"response.output_text.delta","output_index":0,"content_index":0,'
        b'"delta":"a\\ud83d"}\n\n'
        b'data: {"type":"response.output_text.delta","output_index":0,"content_index":0,'
        b'"delta":"\\ude00b"}\n\n'
    ) + frame(fc(1), args_delta(1, '{"e":"')) + (
        b'data: {"type":"response.function_call_arguments.delta","output_index":1,'
        b'"delta":"\\ud83d"}\n\n'
        b'data: {"type":"response.function_call_arguments.delta","output_index":1,'
        b'"delta":"\\ude00\\"}"}\n\n'
    ) + frame(terminal())
    events, parser = run([body], format="responses")
    reply = parser.reply
    assert reply.text == "a\U0001f600b" and reply.skipped_frames == 0
    assert reply.choices[0].tool_calls[0].parse_arguments() == {"e": "\U0001f600"}
    assert [(e.offset, e.text) for e in events if isinstance(e, TextDelta)] == [
        (0, "a"), (1, "\U0001f600b")]
    check_events_rebuild_reply(events, reply)
    reply.model_dump_json()


def test_a_high_half_held_at_the_terminal_event_is_replaced() -> None:
    body = frame(created()) + (
        b'data: {"type":"response.output_text.delta","output_index":0,"content_index":0,'
        b'"delta":"x\\ud83d"}\n\n') + frame(terminal())
    reply = replay([body], format="responses")
    assert reply.text == "x\ufffd" and reply.outcome is Outcome.DONE
