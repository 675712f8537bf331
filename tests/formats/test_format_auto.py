"""``format="auto"``: every recorded stream of every format (``cc-*``, ``resp-*``, ``anth-*``)
assembles exactly when the format is recognised from the first event; the recognition rules;
the unified finish reason of Chat Completions."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from fixture_files import chat_streams, require
from format_corpus import MODES, check_events_rebuild_reply, check_reply, expected, reads, run
from sse_frames import frames as _sse

from fluxstream._events import ErrorEvent, Finish, Outcome, SkippedFrame, TextDelta
from fluxstream._parser import StreamParser, replay
from fluxstream._reply import unified_stop
from fluxstream.formats import FORMATS, AutoFormat, ChatCompletionsFormat, detect

FILES = chat_streams("cc-") + chat_streams("resp-") + chat_streams("anth-")
IDS = [p.stem for p in FILES]
NAMES = {"cc": "chat_completions", "resp": "responses", "anth": "anthropic_messages"}


def test_every_format_is_registered() -> None:
    assert set(FORMATS) == {"chat_completions", "responses", "anthropic_messages", "gemini",
                            "auto"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_recorded_stream_assembles_exactly_with_auto(path: Path, mode: str) -> None:
    body = require(path).read_bytes()
    parser = StreamParser(format="auto")
    for piece in reads(body, mode):
        parser.feed(piece)
    parser.close()
    check_reply(parser.reply, expected(path))
    fmt = parser._format
    assert isinstance(fmt, AutoFormat) and fmt.name == NAMES[path.stem.split("-")[0]]
    named = replay(reads(body, mode), format=NAMES[path.stem.split("-")[0]])
    assert parser.reply.model_dump(exclude={"content_key"}) == named.model_dump(
        exclude={"content_key"})


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_events_rebuild_the_reply_with_auto(path: Path) -> None:
    events, parser = run([require(path).read_bytes()], format="auto")
    check_events_rebuild_reply(events, parser.reply)


@pytest.mark.parametrize(
    ("event", "payload", "name"),
    [
        ("message", {"type": "message_start", "message": {}}, "anthropic_messages"),
        ("ping", {"type": "ping"}, None),  # a keep-alive: any proxy may send one
        ("content_block_delta", {}, "anthropic_messages"),
        ("message", {"type": "response.created", "response": {}}, "responses"),
        ("response.output_text.delta", {"delta": "x"}, "responses"),
        ("message", {"id": "c", "object": "chat.completion.chunk", "choices": []},
         "chat_completions"),
        ("message", {"choices": [{"index": 0, "delta": {"content": "x"}}]}, "chat_completions"),
        ("message", {"error": {"message": "boom"}}, None),  # errors name no format
        ("message", {"object": "error", "message": "boom"}, None),
        ("message", {"type": None, "id": "x"}, None),  # typed, but not by a string
        ("message", {"type": "error", "error": {"message": "boom"}}, None),
        ("error", {"error": {"message": "boom"}}, None),
        ("message", {"type": "brand_new"}, None),
    ],
)
def test_detect(event: str, payload: dict[str, Any], name: str | None) -> None:
    assert detect(event, payload) == name


def test_a_leading_error_is_recorded_and_the_decision_waits() -> None:
    events, parser = run([_sse(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        {"type": "message_start", "message": {"id": "m"}},
        {"type": "message_stop"},
    )], format="auto")
    assert any(isinstance(e, ErrorEvent) for e in events)
    reply = parser.reply
    assert reply.error is not None and reply.error.message == "Overloaded"
    assert reply.outcome is Outcome.FAILED and reply.stream_end is Outcome.DONE
    assert parser._format.name == "anthropic_messages"  # type: ignore[attr-defined]


def test_an_error_only_stream_ends_failed() -> None:
    _, parser = run([_sse({"type": "error", "message": "nope"})], format="auto")
    assert parser.reply.outcome is Outcome.FAILED and parser.reply.error is not None


def test_unknown_first_payloads_are_skipped_and_counted() -> None:
    events, parser = run([_sse({"type": "brand_new"}, "{bad",
                               {"type": "response.created", "response": {"id": "r"}},
                               {"type": "response.output_text.delta", "delta": "a"},
                               {"type": "response.completed", "response": {
                                   "status": "completed"}})], format="auto")
    assert sum(isinstance(e, SkippedFrame) for e in events) == 2
    assert parser.reply.skipped_frames == 2
    assert parser.reply.text == "a" and parser.reply.outcome is Outcome.DONE


def test_sentinel_first_is_chat_completions() -> None:
    _, parser = run([b"data: [DONE]\n\n"], format="auto")
    assert parser._format.name == "chat_completions"  # type: ignore[attr-defined]
    assert parser.done


def test_feed_chunk_recognises_decoded_events() -> None:
    parser = StreamParser(format="auto")
    parser.feed_chunk({"type": "message_start", "message": {"id": "m", "usage": {}}})
    parser.feed_chunk({"type": "content_block_start", "index": 0,
                       "content_block": {"type": "text", "text": ""}})
    parser.feed_chunk({"type": "content_block_delta", "index": 0,
                       "delta": {"type": "text_delta", "text": "hi"}})
    parser.feed_chunk({"type": "message_delta", "delta": {"stop_reason": "end_turn"}})
    parser.feed_chunk({"type": "message_stop"})
    assert parser.reply.text == "hi" and parser.reply.outcome is Outcome.DONE


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ({"choices": [{"index": 0, "message": {"content": "cc"}, "finish_reason": "stop"}]},
         "cc"),
        ({"object": "response", "status": "completed",
          "output": [{"type": "message", "content": [{"type": "output_text",
                                                      "text": "resp"}]}]}, "resp"),
        ({"type": "message", "content": [{"type": "text", "text": "anth"}],
          "stop_reason": "end_turn"}, "anth"),
    ],
)
def test_feed_completion_recognises_whole_bodies(body: dict[str, Any], text: str) -> None:
    parser = StreamParser(format="auto")
    parser.feed_completion(body)
    parser.close()
    assert parser.reply.text == text and parser.reply.outcome is Outcome.DONE
    assert parser.reply.choices[0].stop == "stop"


def test_resume_token_with_auto_restores_once_the_format_is_known() -> None:
    parser = StreamParser(content_key="k", format="auto")
    parser.feed(_sse({"type": "response.created", "response": {"id": "r"}},
                     {"type": "response.output_text.delta", "delta": "abc"}))
    token = {"key": "k", "reply": parser.reply.model_dump(), "offsets": parser.offsets()}
    again = StreamParser.from_token(token, format="auto")
    again.feed(_sse({"type": "response.output_text.delta", "delta": "de"},
                    {"type": "response.completed", "response": {"status": "completed"}}))
    assert again.reply.text == "abcde" and again.reply.id == "r"


# --------------------------------------------------------------------------- unified stop


@pytest.mark.parametrize(
    ("raw", "calls", "stop"),
    [("stop", False, "stop"), ("stop", True, "tool_calls"), ("length", False, "length"),
     ("tool_calls", True, "tool_calls"), ("function_call", True, "tool_calls"),
     ("content_filter", False, "content_filter"), ("error", False, "error"),
     ("STOP", False, "stop"), ("MAX_TOKENS", False, "length"), ("SAFETY", False,
                                                                "content_filter"),
     ("abort", False, "other"), ("end_turn", False, "stop"), ("completed", True, "tool_calls"),
     (None, False, None)],
)
def test_unified_stop_table(raw: str | None, calls: bool, stop: str | None) -> None:
    assert unified_stop(raw, tool_calls=calls) == stop


CC_STOPS = {
    "cc-openai-py-length": "length",
    "cc-openai-py-tool-call": "tool_calls",
    "cc-openai-py-refusal": "stop",
    "cc-openai-py-basic-text": "stop",
    # Gemini says "stop" after a tool call: the raw reason stays, the unified one is tool_calls.
    "cc-vercel-gemini-two-calls-one-chunk": "tool_calls",
}


@pytest.mark.parametrize("name", sorted(CC_STOPS))
def test_chat_completions_unified_stop(name: str) -> None:
    path = require(chat_streams(name)[0])
    events, parser = run([path.read_bytes()], format="chat_completions")
    choice = parser.reply.choices[0]
    assert choice.finish_reason == expected(path)["choices"]["0"]["finish_reason"]
    assert choice.stop == CC_STOPS[name]
    assert [e.stop for e in events if isinstance(e, Finish)][-1] == CC_STOPS[name]


def test_reply_with_stop_round_trips() -> None:
    path = require(chat_streams("anth-vercel-thinking-signature")[0])
    reply = replay([path.read_bytes()], format="auto")
    again = type(reply).model_validate(reply.model_dump(mode="json"))
    assert again == reply and again.choices[0].stop == "stop"
    assert again.choices[0].reasoning_blocks == reply.choices[0].reasoning_blocks




def test_auto_hands_the_parsers_limits_to_the_chosen_format() -> None:
    """A format that caps its own state (Chat Completions) gets the parser's limits through
    ``auto`` as it does when named, not the defaults."""
    from fluxstream._limits import StreamLimits

    limits = StreamLimits(max_choices=1, max_tool_calls=1)
    parser = StreamParser(format="auto", limits=limits)
    parser.feed(_sse({"choices": [{"index": 0, "delta": {"content": "x"}}]}))
    inner = parser._format.inner  # type: ignore[attr-defined]
    assert isinstance(inner, ChatCompletionsFormat) and inner.limits is limits


def test_fast_event_makers_build_the_same_frozen_events() -> None:
    """The formats build their hot events without the frozen ``__init__``: the objects must be
    indistinguishable from the ordinary ones (equal, frozen, same dump)."""
    import dataclasses
    import pickle

    import pydantic

    from fluxstream._events import (
        Event,
        Finish,
        ReasoningDelta,
        RefusalDelta,
        TextDelta,
        ToolCallDelta,
    )
    from fluxstream.formats import _event_makers as makers

    pairs = [
        (makers.text_delta("k", 1, 2, "hé"), TextDelta("k", 1, 2, "hé")),
        (makers.reasoning_delta("k", 0, 3, "r"), ReasoningDelta("k", 0, 3, "r")),
        (makers.refusal_delta("k", 0, 4, "n"), RefusalDelta("k", 0, 4, "n")),
        (makers.tool_delta("k", 0, 2, None, "f", "{}", 7),
         ToolCallDelta("k", 0, 2, None, "f", "{}", 7)),
        (makers.finish_event("k", 0, "stop", None), Finish("k", 0, "stop")),
        (makers.finish_event("k", 1, "tool_use", "tool_calls"),
         Finish("k", 1, "tool_use", "tool_calls")),
    ]
    # On CPython the makers are the fast ones, not a fallback to the class.
    assert makers.text_delta is not TextDelta and makers.finish_event is not Finish
    adapter = pydantic.TypeAdapter(Event)
    for fast, slow in pairs:
        assert type(fast) is type(slow) and fast == slow and hash(fast) == hash(slow)
        assert repr(fast) == repr(slow)
        assert dataclasses.asdict(fast) == dataclasses.asdict(slow)
        assert dataclasses.replace(fast) == slow
        assert pickle.loads(pickle.dumps(fast)) == slow
        assert adapter.dump_python(fast) == adapter.dump_python(slow)
        assert adapter.validate_python(adapter.dump_python(fast)) == slow
        with pytest.raises(dataclasses.FrozenInstanceError):
            fast.key = "x"  # type: ignore[misc]
        with pytest.raises(AttributeError):
            fast.__dict__  # noqa: B018 - slotted, like the class's own instances


def test_a_leading_error_event_with_plain_text_is_the_reply_error() -> None:
    _, parser = run([b"event: error\ndata: upstream overloaded\n\n"], format="auto")
    reply = parser.reply
    assert reply.error is not None and reply.error.message == "upstream overloaded"
    assert reply.outcome is Outcome.FAILED and reply.skipped_frames == 0


# --------------------------------------------------------------------------- fuzz

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_format_anthropic import hostile_events as anthropic_events  # noqa: E402
from test_format_responses import hostile_events as responses_events  # noqa: E402

_CHAT = st.fixed_dictionaries({
    "choices": st.lists(st.fixed_dictionaries({
        "index": st.integers(0, 1),
        "delta": st.fixed_dictionaries({"content": st.one_of(st.none(), st.text(max_size=3))}),
        "finish_reason": st.one_of(st.none(), st.just("stop"))}), max_size=2)})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(anthropic_events(), responses_events(), _CHAT,
                          st.just({"type": "error", "message": "x"})), max_size=10),
       st.data())
def test_fuzz_auto_on_mixed_hostile_streams(payloads: list[dict[str, Any]],
                                            data: st.DataObject) -> None:
    """Whatever the first events and whatever follows (events of other formats included):
    no exception, one End last, offsets rebuild every channel, read boundaries do not matter."""
    body = _sse(*payloads)
    events, parser = run([body], format="auto")
    check_events_rebuild_reply(events, parser.reply)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=8, unique=True)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    assert run(pieces, format="auto")[0] == events


def _utf16_pieces(text: str, cuts: list[int]) -> list[str]:
    """``text`` cut at UTF-16 unit positions (a cut may fall between a pair's halves)."""
    units = text.encode("utf-16-le")
    bounds = sorted({0, *(2 * c for c in cuts if 0 < 2 * c < len(units)), len(units)})
    return [units[a:b].decode("utf-16-le", "surrogatepass")
            for a, b in itertools.pairwise(bounds)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12),
       st.lists(st.integers(0, 30), max_size=8), st.sampled_from(["responses", "anthropic"]))
def test_text_cut_by_utf16_unit_is_never_lost_or_garbled(text: str, cuts: list[int],
                                                          fmt: str) -> None:
    """Any text, cut anywhere by UTF-16 unit into events with ``\\u`` escapes (as Node-based
    servers send them), assembles to exactly that text in both formats, with and without
    ``auto``; every delivered fragment is valid UTF-8."""
    pieces = _utf16_pieces(text, cuts)
    if fmt == "responses":
        frames = [{"type": "response.created", "response": {"id": "r"}}]
        frames += [{"type": "response.output_text.delta", "output_index": 0,
                    "content_index": 0, "delta": p} for p in pieces]
        frames.append({"type": "response.completed", "response": {"status": "completed"}})
        name = "responses"
    else:
        frames = [{"type": "message_start", "message": {"id": "m"}},
                  {"type": "content_block_start", "index": 0,
                   "content_block": {"type": "text", "text": ""}}]
        frames += [{"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": p}} for p in pieces]
        frames += [{"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
                   {"type": "message_stop"}]
        name = "anthropic_messages"
    body = _sse(*frames)
    for f in (name, "auto"):
        events, parser = run([body], format=f)
        assert parser.reply.text == text
        for ev in events:
            if isinstance(ev, TextDelta):
                ev.text.encode("utf-8")
