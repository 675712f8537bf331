"""Anthropic Messages streams: every recorded ``anth-*`` stream assembles exactly, however it
is read and whether the format is named or recognised (``auto``); the mapping rules and bad
input, one focused test each; fuzz properties like the Chat Completions ones."""

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
)
from fluxstream._parser import StreamParser, replay
from fluxstream.errors import FrameDecodeError

FILES = chat_streams("anth-")
IDS = [p.stem for p in FILES]

STOPS = {
    "anth-docs-basic": "stop",
    "anth-docs-thinking": "stop",
    "anth-docs-tool-use": "tool_calls",
    "anth-sdk-py-basic": "stop",
    "anth-sdk-py-max-tokens-partial-json": "length",
    "anth-sdk-py-refusal-empty-text": "refusal",
    "anth-sdk-py-tool-use": "tool_calls",
    "anth-sdk-py-unknown-block-type": "stop",
    "anth-syn-no-message-stop": "stop",
    "anth-syn-overloaded-midstream": None,
    "anth-vercel-duplicate-message-start": "stop",
    "anth-vercel-message-delta-input-tokens": "stop",
    "anth-vercel-thinking-signature": "stop",
    "anth-vercel-tool-no-args": "tool_calls",
}
#: Frames each recorded stream legitimately skips and counts (unknown block, duplicate start).
SKIPPED = {"anth-sdk-py-unknown-block-type": 1, "anth-vercel-duplicate-message-start": 1}


def test_corpus_is_complete() -> None:
    assert [p.stem for p in FILES] == sorted(STOPS)


@pytest.mark.parametrize("fmt", ["anthropic_messages", "auto"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_recorded_stream_assembles_exactly(path: Path, mode: str, fmt: str) -> None:
    body = require(path).read_bytes()
    reply = replay(reads(body, mode), format=fmt)
    check_reply(reply, expected(path))
    assert reply.bytes == len(body)
    assert reply.choices[0].stop == STOPS[path.stem]
    assert reply.skipped_frames == SKIPPED.get(path.stem, 0)
    assert reply.heartbeats == body.count(b'"type":"ping"') + body.count(b'"type": "ping"')


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_events_rebuild_the_reply(path: Path) -> None:
    events, parser = run([require(path).read_bytes()], format="anthropic_messages")
    check_events_rebuild_reply(events, parser.reply)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_strict_mode_accepts_every_recorded_stream(path: Path) -> None:
    check_reply(replay([require(path).read_bytes()], format="anthropic_messages", strict=True),
                expected(path))


def test_thinking_signature_is_kept_not_shown() -> None:
    reply = replay([require(chat_streams("anth-vercel-thinking-signature")[0]).read_bytes()],
                   format="anthropic_messages")
    (block,) = reply.choices[0].reasoning_blocks
    assert block["type"] == "thinking" and block["thinking"] == reply.choices[0].reasoning
    assert block["signature"].startswith("EvQBCkYICxgC")
    assert "EvQB" not in reply.text and "EvQB" not in (reply.choices[0].reasoning or "")


# --------------------------------------------------------------------------- mapping


#: Anthropic framing: ``event: <type>`` (unless ``named`` is false) then ``data:``.
frame = partial(frames, named=True)


def start(usage: dict[str, Any] | None = None, mid: str = "msg_1") -> dict[str, Any]:
    message: dict[str, Any] = {"id": mid, "type": "message", "role": "assistant",
                               "model": "claude-x", "content": []}
    if usage is not None:
        message["usage"] = usage
    return {"type": "message_start", "message": message}


def block(index: int, **content_block: Any) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": content_block}


def delta(index: int, **d: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": d}


def text(index: int, t: str) -> dict[str, Any]:
    return delta(index, type="text_delta", text=t)


def stop_block(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_delta(reason: str | None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "message_delta",
                           "delta": {"stop_reason": reason, "stop_sequence": None}}
    if usage is not None:
        out["usage"] = usage
    return out


STOP = {"type": "message_stop"}
PING = {"type": "ping"}


def go(*payloads: dict[str, Any] | str, named: bool = True, **kwargs: Any):  # type: ignore[no-untyped-def]
    events, parser = run([frame(*payloads, named=named)], format="anthropic_messages",
                         **kwargs)
    check_events_rebuild_reply(events, parser.reply)
    return events, parser.reply


def test_basic_message_usage_and_outcome() -> None:
    _, reply = go(start({"input_tokens": 5, "output_tokens": 1}), block(0, type="text", text=""),
                  PING, text(0, "Hé"), text(0, "llo"), stop_block(0),
                  message_delta("end_turn", {"output_tokens": 9}), STOP)
    assert reply.text == "Héllo" and reply.id == "msg_1" and reply.model == "claude-x"
    assert reply.usage is not None
    assert reply.usage.model_dump(exclude_unset=True) == {"input_tokens": 5, "output_tokens": 9}
    c = reply.choices[0]
    assert (c.finish_reason, c.stop, reply.outcome) == ("end_turn", "stop", Outcome.DONE)
    assert reply.heartbeats == 1 and reply.end_reason == "message_stop"


@pytest.mark.parametrize(
    ("raw", "stop"),
    [("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"),
     ("tool_use", "tool_calls"), ("refusal", "refusal"), ("pause_turn", "other"),
     ("model_context_window_exceeded", "length")],
)
def test_unified_stop(raw: str, stop: str) -> None:
    events, reply = go(start(), message_delta(raw), STOP)
    assert reply.choices[0].finish_reason == raw and reply.choices[0].stop == stop
    assert next(e for e in events if isinstance(e, Finish)).stop == stop


def test_stop_reason_without_message_stop_is_finished() -> None:
    _, reply = go(start(), block(0, type="text"), text(0, "a"), message_delta("end_turn"))
    assert reply.outcome is Outcome.FINISHED


def test_no_stop_reason_is_truncated() -> None:
    _, reply = go(start(), block(0, type="text"), text(0, "a"))
    assert reply.outcome is Outcome.TRUNCATED


def test_tool_use_blocks_indexed_by_content_block() -> None:
    _, reply = go(
        start(), block(0, type="text", text=""), text(0, "Let me look."), stop_block(0),
        block(1, type="tool_use", id="toolu_1", name="get", input={}),
        delta(1, type="input_json_delta", partial_json=""),
        delta(1, type="input_json_delta", partial_json='{"q": "x'),
        delta(1, type="input_json_delta", partial_json='"}'), stop_block(1),
        block(2, type="tool_use", id="toolu_2", name="ping", input={}),
        delta(2, type="input_json_delta", partial_json=""), stop_block(2),
        message_delta("tool_use"), STOP,
    )
    calls = [(t.index, t.id, t.name, t.arguments) for t in reply.choices[0].tool_calls]
    assert calls == [(1, "toolu_1", "get", '{"q": "x"}'), (2, "toolu_2", "ping", "{}")]


def test_server_tool_use_is_not_a_client_tool_call() -> None:
    _, reply = go(
        start(),
        block(0, type="server_tool_use", id="srvtoolu_1", name="web_search", input={}),
        delta(0, type="input_json_delta", partial_json='{"query": "x"}'), stop_block(0),
        block(1, type="web_search_tool_result", tool_use_id="srvtoolu_1", content=[]),
        stop_block(1),
        block(2, type="text", text=""), text(2, "Found it."),
        delta(2, type="citations_delta", citation={"type": "web_search_result_location"}),
        stop_block(2), message_delta("end_turn"), STOP,
    )
    assert reply.choices[0].tool_calls == [] and reply.text == "Found it."
    assert reply.skipped_frames == 0


def test_redacted_thinking_and_signature_are_kept_in_the_reply() -> None:
    events, reply = go(
        start(),
        block(0, type="thinking", thinking="", signature=""),
        delta(0, type="thinking_delta", thinking="step "),
        delta(0, type="thinking_delta", thinking="one"),
        delta(0, type="signature_delta", signature="sig=="), stop_block(0),
        block(1, type="redacted_thinking", data="opaque"), stop_block(1),
        block(2, type="text", text=""), text(2, "answer"), stop_block(2),
        message_delta("end_turn"), STOP,
    )
    c = reply.choices[0]
    assert (c.text, c.reasoning) == ("answer", "step one")
    assert c.reasoning_blocks == [
        {"type": "thinking", "thinking": "step one", "signature": "sig=="},
        {"type": "redacted_thinking", "data": "opaque"},
    ]
    assert sum(isinstance(e, ReasoningBlock) for e in events) == 2


def test_error_event_mid_stream() -> None:
    events, reply = go(start({"input_tokens": 3, "output_tokens": 1}), block(0, type="text"),
                       text(0, "part"),
                       {"type": "error", "error": {"type": "overloaded_error",
                                                   "message": "Overloaded"}})
    assert reply.error is not None
    assert (reply.error.message, reply.error.type) == ("Overloaded", "overloaded_error")
    assert reply.outcome is Outcome.FAILED and reply.stream_end is Outcome.TRUNCATED
    assert reply.text == "part" and any(isinstance(e, ErrorEvent) for e in events)


def test_usage_is_shallow_updated_by_every_message_delta() -> None:
    _, reply = go(start({"input_tokens": 43, "output_tokens": 1, "cache_read_input_tokens": 0}),
                  message_delta(None, {"output_tokens": 5}),
                  message_delta("end_turn", {"input_tokens": 61, "output_tokens": 7}), STOP)
    assert reply.usage is not None
    assert reply.usage.model_dump(exclude_unset=True) == {
        "input_tokens": 61, "output_tokens": 7, "cache_read_input_tokens": 0}


def test_data_only_frames_without_event_lines() -> None:
    _, reply = go(start(), block(0, type="text"), text(0, "a"), message_delta("end_turn"), STOP,
                  named=False)
    assert reply.text == "a" and reply.outcome is Outcome.DONE


@pytest.mark.parametrize(
    ("payloads", "skipped"),
    [
        ([text(0, "orphan")], 1),  # a delta for a block that never started
        ([stop_block(7)], 1),
        ([block(0, type="text"), block(0, type="text")], 1),  # a block started twice
        ([start(mid="msg_other")], 1),  # a second message_start
        ([{"type": "brand_new_event"}], 1),
        ([block(3, type="hologram")], 1),
        ([block(3, type="hologram"), delta(3, type="hologram_delta", x=1)], 1),
        ([block(0, type="text"), delta(0, type="input_json_delta", partial_json="{")], 1),
        ([block(0, type="text"), delta(0, type="mystery_delta")], 1),
        ([{"type": "content_block_start", "index": "0", "content_block": {"type": "text"}}], 1),
        ([{"type": "content_block_delta", "index": 0, "delta": "nope"}], 1),
        (['{"type": "content_block_start", "index": 0}'], 1),
        (["[1, 2, 3]"], 1),
        (["{nope"], 1),
    ],
)
def test_bad_input_is_skipped_and_counted(payloads: list[Any], skipped: int) -> None:
    events, reply = go(start(), *payloads, block(9, type="text"), text(9, "ok"),
                       message_delta("end_turn"), STOP)
    assert reply.skipped_frames == skipped
    assert sum(isinstance(e, SkippedFrame) for e in events) == skipped
    assert reply.text.endswith("ok") and reply.outcome is Outcome.DONE


def test_events_after_message_stop_are_ignored() -> None:
    _, reply = go(start(), block(0, type="text"), text(0, "a"), message_delta("end_turn"), STOP,
                  text(0, "late"), {"type": "error", "error": {"message": "late"}})
    assert reply.text == "a" and reply.error is None and reply.outcome is Outcome.DONE


@pytest.mark.parametrize(
    "payload",
    [
        '{"type": "message_delta", "delta": "x", "usage": 5}',
        '{"type": "message_delta", "delta": {"stop_reason": 3}}',
        '{"type": "message_start", "message": {"usage": "many", "id": 4}}',
        '{"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", '
        '"id": 1, "name": [], "input": "raw"}}',
        '{"type": "error", "error": "plain string"}',
        '{"type": "error"}',
        '{"type": null}',
    ],
)
def test_hostile_payloads_never_raise(payload: str) -> None:
    events, reply = go(start(), block(0, type="text"), text(0, "a"), payload)
    assert reply.text == "a" and type(events[-1]) is End


def test_invalid_json_in_strict_mode_is_a_typed_error() -> None:
    parser = StreamParser(format="anthropic_messages", strict=True)
    with pytest.raises(FrameDecodeError):
        parser.feed(frame(start(), "{oops"))


def test_whole_message_body() -> None:
    parser = StreamParser(format="anthropic_messages")
    parser.feed_completion({
        "id": "msg_9", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s"},
            {"type": "text", "text": "hi"},
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
        ],
        "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 2},
    })
    parser.close()
    reply = parser.reply
    c = reply.choices[0]
    assert (c.text, c.reasoning, c.stop, reply.outcome) == ("hi", "hm", "tool_calls",
                                                            Outcome.DONE)
    assert [(t.index, t.id, t.arguments) for t in c.tool_calls] == [(2, "toolu_1", '{"a":1}')]
    assert c.reasoning_blocks == [{"type": "thinking", "thinking": "hm", "signature": "s"}]


def test_error_body() -> None:
    parser = StreamParser(format="anthropic_messages")
    parser.feed_completion({"type": "error", "error": {"type": "overloaded_error",
                                                       "message": "Overloaded"}})
    parser.close()
    assert parser.reply.error is not None and parser.reply.outcome is Outcome.FAILED


def test_resume_token_continues_offsets() -> None:
    parser = StreamParser(content_key="k", format="anthropic_messages")
    parser.feed(frame(start(), block(0, type="text"), text(0, "abc")))
    token = {"key": "k", "reply": parser.reply.model_dump(), "offsets": parser.offsets()}
    again = StreamParser.from_token(token, format="anthropic_messages")
    again.feed(frame(block(0, type="text"), text(0, "de"), message_delta("end_turn"), STOP))
    assert again.reply.text == "abcde" and again.reply.outcome is Outcome.DONE


def test_memory_follows_the_thinking_not_the_number_of_deltas() -> None:
    parser = StreamParser(format="anthropic_messages")
    parser.feed(frame(start(), block(0, type="thinking", thinking="")))
    one = frame(delta(0, type="thinking_delta", thinking="x"))
    for _ in range(5000):
        parser.feed(one)
    fmt = parser._format
    blocks = fmt._blocks  # type: ignore[attr-defined]
    assert len(blocks[0].parts) <= 257
    assert parser.reply.choices[0].reasoning == "x" * 5000


# --------------------------------------------------------------------------- fuzz

_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-1, 3), st.text(max_size=5),
                    st.lists(st.integers(), max_size=2))
_BLOCK_TYPES = st.sampled_from(["text", "thinking", "redacted_thinking", "tool_use",
                                "server_tool_use", "mystery", 5])
_DELTA_TYPES = st.sampled_from(["text_delta", "thinking_delta", "signature_delta",
                                "input_json_delta", "citations_delta", "odd", None])


@st.composite
def hostile_events(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["message_start", "content_block_start", "content_block_delta",
                                 "content_block_stop", "message_delta", "message_stop",
                                 "ping", "error", "unknown"]))
    obj: dict[str, Any] = {"type": kind, "index": draw(st.one_of(st.integers(0, 2), _VALUES))}
    if kind == "message_start":
        obj["message"] = draw(st.one_of(_VALUES, st.fixed_dictionaries(
            {"id": _VALUES, "usage": st.one_of(_VALUES, st.dictionaries(
                st.sampled_from(["input_tokens", "output_tokens"]), _VALUES))})))
    elif kind == "content_block_start":
        obj["content_block"] = draw(st.one_of(_VALUES, st.fixed_dictionaries(
            {"type": _BLOCK_TYPES, "id": _VALUES, "name": _VALUES, "input": _VALUES,
             "text": _VALUES, "thinking": _VALUES, "data": _VALUES})))
    elif kind == "content_block_delta":
        obj["delta"] = draw(st.one_of(_VALUES, st.fixed_dictionaries(
            {"type": _DELTA_TYPES, "text": _VALUES, "thinking": _VALUES,
             "partial_json": _VALUES, "signature": _VALUES})))
    elif kind == "message_delta":
        obj["delta"] = draw(st.one_of(_VALUES, st.fixed_dictionaries({"stop_reason": _VALUES})))
        obj["usage"] = draw(st.one_of(_VALUES, st.dictionaries(st.just("output_tokens"),
                                                               _VALUES)))
    elif kind == "error":
        obj["error"] = draw(st.one_of(_VALUES, st.fixed_dictionaries({"message": _VALUES,
                                                                      "type": _VALUES})))
    return obj


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(hostile_events(), max_size=14), st.data())
def test_fuzz_hostile_event_sequences(payloads: list[dict[str, Any]],
                                      data: st.DataObject) -> None:
    body = frame(*payloads, named=data.draw(st.booleans()))
    events, parser = run([body], format="anthropic_messages")
    check_events_rebuild_reply(events, parser.reply)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=8, unique=True)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    assert run(pieces, format="anthropic_messages")[0] == events
    assert as_corpus(parser.reply) == as_corpus(replay([body], format="anthropic_messages"))


# --------------------------------------------------------------------------- continuation


def test_continuation_on_a_new_connection_continues_the_text() -> None:
    """Anthropic resumes by continuation: the partial text is sent as an assistant prefill and
    a new message streams (its own message_start, blocks from 0). The echoed overlap is cut,
    offsets go on, and the new message_start is not a 'second message_start'."""
    parser = StreamParser(content_key="k", format="anthropic_messages")
    events = parser.feed(frame(start({"input_tokens": 5, "output_tokens": 1}),
                               block(0, type="text", text=""),
                               text(0, "The quick brown fox ")))
    assert parser.continuable()
    prefix = parser.begin_continuation(min_overlap=4)
    # Sent without trailing whitespace (Anthropic refuses a prefill ending in it); the
    # whitespace the continuation re-sends is cut as an echo.
    assert prefix == "The quick brown fox"
    events += parser.feed(frame(start({"input_tokens": 9, "output_tokens": 1}, mid="msg_2"),
                                block(0, type="text", text=""),
                                text(0, "brown fox jumps"), text(0, " over."), stop_block(0),
                                message_delta("end_turn", {"output_tokens": 4}), STOP))
    events += parser.close()
    reply = parser.reply
    assert reply.text == "The quick brown fox jumps over."
    assert reply.skipped_frames == 0 and reply.outcome is Outcome.DONE
    assert reply.usage is not None and reply.usage.model_dump(exclude_unset=True) == {
        "input_tokens": 9, "output_tokens": 4}
    check_events_rebuild_reply(events, reply)


def test_a_second_message_start_without_a_new_connection_is_still_skipped() -> None:
    parser = StreamParser(format="anthropic_messages")
    parser.feed(frame(start(), block(0, type="text"), text(0, "a")))
    parser.new_connection()
    parser.feed(frame(block(1, type="text"), text(1, "b"), start(mid="msg_x")))
    assert parser.reply.text == "ab" and parser.reply.skipped_frames == 1


def test_memory_does_not_grow_with_empty_block_starts() -> None:
    """A stream of block starts that never carry content must not grow the format's state with
    the bytes: past MAX_BLOCKS they are skipped and counted."""
    from fluxstream.formats.anthropic_messages import MAX_BLOCKS

    parser = StreamParser(format="anthropic_messages")
    parser.feed(frame(start()))
    extra = 50
    parser.feed(frame(*(block(i, type="text") for i in range(MAX_BLOCKS + extra))))
    assert len(parser._format._blocks) == MAX_BLOCKS  # type: ignore[attr-defined]
    assert parser.reply.skipped_frames == extra


def test_never_shown_data_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Signatures and redacted thinking are not reply text, so max_reply_chars does not bound
    them: the format's own budget does (skipped and counted past it)."""
    from fluxstream.formats import _json_event

    monkeypatch.setattr(_json_event, "MAX_KEPT_CHARS", 100)
    sig = delta(0, type="signature_delta", signature="s" * 40)
    _, reply = go(start(), block(0, type="thinking", thinking=""), sig, sig, sig,
                  stop_block(0), block(1, type="redacted_thinking", data="d" * 50),
                  stop_block(1), message_delta("end_turn"), STOP)
    assert reply.skipped_frames == 2
    assert reply.choices[0].reasoning_blocks == [
        {"type": "thinking", "thinking": "", "signature": "s" * 80}]


# --------------------------------------------------------------------------- surrogates


def _text_delta_json(index: int, text_json: str) -> str:
    return ('{"type":"content_block_delta","index":' + str(index)
            + ',"delta":{"type":"text_delta","text":' + text_json + "}}")


def test_an_emoji_cut_by_utf16_unit_across_events_is_one_code_point() -> None:
    """Node-based gateways cut text by UTF-16 unit: the high half ends one event, the low half
    starts the next. Neither event is valid for the fast decoder; no text may be lost."""
    head = frame(start(), block(0, type="text", text=""))
    body = frames(_text_delta_json(0, '"hi \\ud83d"'), _text_delta_json(0, '"\\ude00 there"'),
                '{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta",'
                '"thinking":"x"}}')
    tail = frame(message_delta("end_turn"), STOP)
    events, parser = run([head + body + tail], format="anthropic_messages")
    reply = parser.reply
    assert reply.text == "hi \U0001f600 there"
    assert [(e.offset, e.text) for e in events if isinstance(e, TextDelta)] == [
        (0, "hi "), (3, "\U0001f600 there")]
    assert reply.skipped_frames == 1  # the thinking delta for a text block
    reply.model_dump_json()  # serialisable: no lone half anywhere
    check_events_rebuild_reply(events, reply)


def test_a_half_still_held_at_the_end_becomes_the_replacement_character() -> None:
    body = (frame(start(), block(0, type="text", text=""))
            + frames(_text_delta_json(0, '"end \\ud83d"'), _text_delta_json(0, '"\\ude00"'),
                   _text_delta_json(0, '"\\udfff lone low, then high \\ud83d"'))
            + frame(message_delta("end_turn"), STOP))
    reply = replay([body], format="anthropic_messages")
    assert reply.text == "end \U0001f600\ufffd lone low, then high \ufffd"
    reply.model_dump_json()


def test_tool_arguments_and_errors_with_halves() -> None:
    body = (frame(start(), block(1, type="tool_use", id="t", name="f", input={}))
            + frames('{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",'
                   '"partial_json":"{\\"e\\": \\"\\ud83d"}}',
                   '{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",'
                   '"partial_json":"\\ude00\\"}"}}',
                   '{"type":"error","error":{"type":"x","message":"bad \\ud83d"}}'))
    reply = replay([body], format="anthropic_messages")
    assert reply.choices[0].tool_calls[0].parse_arguments() == {"e": "\U0001f600"}
    assert reply.error is not None and reply.error.message == "bad \ufffd"
    reply.model_dump_json()
