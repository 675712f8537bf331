"""Lone UTF-16 surrogate halves split across events, on every channel of the Responses and
Anthropic Messages formats: text, reasoning (Responses summary and reasoning text, Anthropic
thinking), refusal (Responses) and tool arguments.

Node-based servers and gateways cut strings by UTF-16 unit, so an emoji can end one event as
``\\ud83d`` and start the next as ``\\ude00``; each half alone is not valid text. The halves
must be joined per channel (another channel's event in between changes nothing), delivered
once at one offset, and survive a reconnect between the two halves (a resume re-reads the
stored response from the event after the high half).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
import sse_frames
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluxstream import StreamParser
from fluxstream._events import Event, ReasoningDelta, RefusalDelta, TextDelta, ToolCallDelta

EMOJI = "\U0001f600"

CHANNELS = [
    ("responses", "text"),
    ("responses", "summary"),
    ("responses", "reasoning"),
    ("responses", "refusal"),
    ("responses", "tool"),
    ("anthropic_messages", "text"),
    ("anthropic_messages", "thinking"),
    ("anthropic_messages", "tool"),
]


def _responses(channel: str, pieces: list[str], other: bool) -> list[dict[str, Any]]:
    kinds = {"text": "response.output_text.delta",
             "summary": "response.reasoning_summary_text.delta",
             "reasoning": "response.reasoning_text.delta",
             "refusal": "response.refusal.delta",
             "tool": "response.function_call_arguments.delta"}
    frames: list[dict[str, Any]] = [{"type": "response.created",
                                     "response": {"id": "resp_s", "status": "in_progress"}}]
    if channel == "tool":
        frames.append({"type": "response.output_item.added", "output_index": 1,
                       "item": {"type": "function_call", "call_id": "c", "name": "f",
                                "arguments": ""}})
    for piece in pieces:
        frames.append({"type": kinds[channel], "output_index": 1, "content_index": 0,
                       "summary_index": 0, "delta": piece})
        if other:  # another channel's event between the halves
            other_kind = kinds["refusal" if channel == "text" else "text"]
            frames.append({"type": other_kind, "output_index": 2, "content_index": 0,
                           "delta": "."})
    frames.append({"type": "response.completed", "response": {"status": "completed"}})
    for number, frame in enumerate(frames):
        frame["sequence_number"] = number
    return frames


def _anthropic(channel: str, pieces: list[str], other: bool) -> list[dict[str, Any]]:
    block = {"text": {"type": "text", "text": ""},
             "thinking": {"type": "thinking", "thinking": "", "signature": ""},
             "tool": {"type": "tool_use", "id": "t", "name": "f", "input": {}}}[channel]
    delta_type, field = {"text": ("text_delta", "text"),
                         "thinking": ("thinking_delta", "thinking"),
                         "tool": ("input_json_delta", "partial_json")}[channel]
    frames: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "msg_s", "usage": {}}},
        {"type": "content_block_start", "index": 0, "content_block": block},
    ]
    if other:
        other_block = {"type": "thinking", "thinking": ""} if channel == "text" else {
            "type": "text", "text": ""}
        frames.append({"type": "content_block_start", "index": 1, "content_block": other_block})
    for piece in pieces:
        frames.append({"type": "content_block_delta", "index": 0,
                       "delta": {"type": delta_type, field: piece}})
        if other:
            kind, name = ("thinking_delta", "thinking") if channel == "text" else (
                "text_delta", "text")
            frames.append({"type": "content_block_delta", "index": 1,
                           "delta": {"type": kind, name: "."}})
    frames += [{"type": "content_block_stop", "index": 0},
               {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
               {"type": "message_stop"}]
    return frames


def frames_for(fmt: str, channel: str, pieces: list[str], other: bool) -> list[bytes]:
    """One SSE frame per event, ``json.dumps`` writing lone halves as ``\\uXXXX`` escapes
    exactly as a Node server does."""
    build = _responses if fmt == "responses" else _anthropic
    return [sse_frames.frame(f) for f in build(channel, pieces, other)]


def delivered(events: list[Event], channel: str) -> list[tuple[int, str]]:
    kind: type[Any] = {"text": TextDelta, "summary": ReasoningDelta,
                       "reasoning": ReasoningDelta, "thinking": ReasoningDelta,
                       "refusal": RefusalDelta, "tool": ToolCallDelta}[channel]
    out = []
    for event in events:
        if type(event) is kind:
            text = event.arguments if isinstance(event, ToolCallDelta) else event.text
            if text:
                out.append((event.offset, text))
    return out


def channel_text(parser: StreamParser, channel: str) -> str:
    choice = parser.reply.choices[0]
    if channel == "text":
        return choice.text
    if channel == "refusal":
        return choice.refusal or ""
    if channel == "tool":
        return choice.tool_calls[0].arguments
    return choice.reasoning or ""


def check(fmt: str, channel: str, parser: StreamParser, events: list[Event],
          expected: str) -> None:
    assert channel_text(parser, channel) == expected
    pieces = delivered(events, channel)
    at = 0
    for offset, text in pieces:  # once, in order, at the right offsets, valid UTF-8
        assert offset == at
        text.encode("utf-8")
        at += len(text)
    assert at == len(expected)
    reply = parser.reply
    assert reply.skipped_frames == 0
    reply.model_dump_json()  # no lone half anywhere
    if fmt == "anthropic_messages" and channel == "thinking":
        [kept] = reply.choices[0].reasoning_blocks
        assert kept["thinking"] == expected  # kept to send back: whole, too


@pytest.mark.parametrize(("fmt", "channel"), CHANNELS)
@pytest.mark.parametrize("other", [False, True], ids=["alone", "interleaved"])
@pytest.mark.parametrize("format_name", ["named", "auto"])
def test_an_emoji_cut_between_two_events_is_one_code_point(
    fmt: str, channel: str, other: bool, format_name: str
) -> None:
    value = f'{{"e": "{EMOJI}"}}' if channel == "tool" else f"a{EMOJI}b"
    high, low = EMOJI.encode("utf-16-le", "surrogatepass")[:2], EMOJI.encode(
        "utf-16-le", "surrogatepass")[2:]
    cut = value.index(EMOJI)
    first = value[:cut] + high.decode("utf-16-le", "surrogatepass")
    second = low.decode("utf-16-le", "surrogatepass") + value[cut + 1:]
    parser = StreamParser(format=fmt if format_name == "named" else "auto")
    events: list[Event] = []
    for data in frames_for(fmt, channel, [first, second], other):
        events += parser.feed(data)
    events += parser.close()
    check(fmt, channel, parser, events, value)


@pytest.mark.parametrize(("fmt", "channel"), CHANNELS)
def test_the_halves_are_joined_across_a_reconnect(fmt: str, channel: str) -> None:
    """The connection drops right after the event that ends in a high half; the resumed
    connection (OpenAI's ``starting_after`` re-read, or any resume that keeps the reply)
    starts with the low half: one code point, delivered once."""
    value = f'{{"e": "{EMOJI}"}}' if channel == "tool" else f"a{EMOJI}b"
    units = value.encode("utf-16-le")
    cut = 2 * value.index(EMOJI) + 2
    pieces = [units[:cut].decode("utf-16-le", "surrogatepass"),
              units[cut:].decode("utf-16-le", "surrogatepass")]
    frames = frames_for(fmt, channel, pieces, False)
    split = next(i for i, f in enumerate(frames) if b"\\ud83d" in f) + 1
    parser = StreamParser(format=fmt)
    events: list[Event] = []
    for data in frames[:split]:
        events += parser.feed(data)
    parser.new_connection()
    for data in frames[split:]:
        events += parser.feed(data)
    events += parser.close()
    check(fmt, channel, parser, events, value)


def _utf16_pieces(text: str, cuts: list[int]) -> list[str]:
    units = text.encode("utf-16-le")
    bounds = sorted({0, *(2 * c for c in cuts if 0 < 2 * c < len(units)), len(units)})
    return [units[a:b].decode("utf-16-le", "surrogatepass")
            for a, b in itertools.pairwise(bounds)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=10),
       st.lists(st.integers(0, 25), max_size=8), st.sampled_from(CHANNELS), st.booleans())
def test_any_cut_by_utf16_unit_on_any_channel_is_exact(
    text: str, cuts: list[int], where: tuple[str, str], other: bool
) -> None:
    fmt, channel = where
    value = json.dumps({"e": text}, ensure_ascii=False) if channel == "tool" else text
    pieces = [p for p in _utf16_pieces(value, cuts) if p]
    parser = StreamParser(format=fmt)
    events: list[Event] = []
    for data in frames_for(fmt, channel, pieces, other):
        events += parser.feed(data)
    events += parser.close()
    check(fmt, channel, parser, events, value)
