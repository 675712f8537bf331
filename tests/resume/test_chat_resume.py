"""Resume support of the parser: continuation (echo cut), offsets and resume tokens."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sse_frames import chat_text, frames

from fluxstream._events import Event, Outcome, TextDelta
from fluxstream._parser import StreamParser

PREFIX = "The river bends under the old stone bridge"


def chunks(*texts: str, finish: str | None = None, done: bool = True) -> bytes:
    """A chunk per text, then one with ``finish`` (when given), then ``[DONE]``."""
    out: list[dict[str, Any]] = [
        {"id": "c", "choices": [{"index": 0, "delta": {"content": text}}]} for text in texts
    ]
    if finish:
        out.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return frames(*out, done=done)


def started(*texts: str) -> StreamParser:
    parser = StreamParser(content_key="k")
    parser.feed(chunks(*texts, done=False))
    return parser


def deltas(events: list[Event]) -> list[tuple[int, str]]:
    return [(e.offset, e.text) for e in events if isinstance(e, TextDelta)]


def test_continuable_conditions() -> None:
    assert started(PREFIX).continuable()
    assert not StreamParser().continuable()  # nothing to continue
    assert started(PREFIX).feed(chunks(finish="stop", done=False)) is not None
    parser = started(PREFIX)
    parser.feed(chunks(finish="stop", done=False))
    assert not parser.continuable()  # already finished
    parser = StreamParser()
    parser.feed(b'data: {"choices": [{"index": 0, "delta": {"content": "a"}}, '
                b'{"index": 1, "delta": {"content": "b"}}]}\n\n')
    assert not parser.continuable()  # n > 1
    with pytest.raises(ValueError):
        parser.begin_continuation()


@pytest.mark.parametrize(
    ("echo", "continuation"),
    [
        ("", " and the lights shimmer."),  # a provider that honours the prefix
        (PREFIX[-12:], " and the lights shimmer."),  # echoes the last 12 code points
        (PREFIX, " and the lights shimmer."),  # echoes everything
        (PREFIX[-8:], ", and then"),  # exactly min_overlap
    ],
    ids=["none", "tail-12", "whole", "min-overlap"],
)
@pytest.mark.parametrize("split", [0, 1, 3, 5])
def test_continuation_cuts_the_echo(echo: str, continuation: str, split: int) -> None:
    parser = started(PREFIX)
    assert parser.begin_continuation(min_overlap=8) == PREFIX
    sent = echo + continuation
    pieces = [sent[i : i + split] for i in range(0, len(sent), split)] if split else [sent]
    events: list[Event] = []
    for piece in pieces:
        events += parser.feed(chunks(piece, done=False))
    events += parser.feed(chunks(finish="stop"))
    reply = parser.reply
    assert reply.text == PREFIX + continuation
    assert reply.outcome is Outcome.DONE
    # Offsets go on from the prefix and stay contiguous.
    buf = list(PREFIX)
    for offset, text in deltas(events):
        assert offset == len(buf)
        buf += list(text)
    assert "".join(buf) == reply.text


def test_short_coincidental_overlap_is_kept() -> None:
    parser = started("I like the")
    parser.begin_continuation(min_overlap=8)
    parser.feed(chunks(" the", "se apples", finish="stop"))  # " the" is real text here
    assert parser.reply.text == "I like the these apples"


def test_echo_cut_at_the_end_of_the_stream() -> None:
    parser = started(PREFIX)
    parser.begin_continuation(min_overlap=8)
    parser.feed(chunks(PREFIX[-10:], done=False))  # only the echo, then the bytes end
    events = parser.close()
    assert parser.reply.text == PREFIX
    assert deltas(events) == []


def test_offsets_and_resume_token_round_trip() -> None:
    parser = StreamParser(content_key="key-9")
    parser.feed(b"id: 41\nretry: 900\n" + chunks("Hello", " wor", done=False))
    parser.feed(b'data: {"choices": [{"index": 0, "delta": {"reasoning_content": "hm", '
                b'"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f", '
                b'"arguments": "{\\"a\\":"}}]}}]}\n\n')
    offsets = parser.offsets()
    assert offsets == {"0": {"text": 9, "reasoning": 2, "refusal": 0,
                             "tool_calls": {"0": 5}}}
    token: dict[str, Any] = json.loads(json.dumps({
        "key": parser.content_key, "last_event_id": parser.last_event_id,
        "reconnection_time": parser.reconnection_time, "offsets": offsets,
        "reply": parser.reply.model_dump(mode="json"),
    }))
    resumed = StreamParser.from_token(token)
    assert resumed.content_key == "key-9" and resumed.last_event_id == "41"
    assert resumed.reconnection_time == 900 and resumed.saw_content
    events = resumed.feed(chunks("ld") + b"")
    assert deltas(events) == [(9, "ld")]
    resumed2 = StreamParser.from_token(token)
    resumed2.feed(b'data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, '
                  b'"function": {"arguments": "1}"}}]}, "finish_reason": "tool_calls"}]}\n\n'
                  b"data: [DONE]\n\n")
    reply = resumed2.reply
    assert reply.text == "Hello wor" and reply.choices[0].reasoning == "hm"
    call = reply.choices[0].tool_calls[0]
    assert (call.id, call.name, call.parse_arguments()) == ("t", "f", {"a": 1})
    assert reply.outcome is Outcome.DONE


def test_new_connection_resume_after_sets_the_last_event_id() -> None:
    parser = started("a")
    parser.new_connection(resume_after="17")
    assert parser.last_event_id == "17"


def test_complete_property() -> None:
    parser = started("a")
    assert not parser.complete
    parser.feed(chunks(finish="stop", done=False))
    assert parser.complete and not parser.done


def test_a_continuation_prefix_never_ends_in_whitespace() -> None:
    """Anthropic (and others) refuse a prefill that ends in whitespace (400): the prefix is
    sent without its trailing whitespace, and the whitespace the provider sends again at the
    start of the continuation is cut as an echo, however short."""
    from fluxstream._parser import StreamParser

    for tail, continued in [("\n", "\nNext line."), (" \n\t", " \n\tMore."), ("\n", "Next.")]:
        parser = StreamParser()
        parser.feed(chat_text("First line." + tail))
        sent = parser.begin_continuation(min_overlap=8)
        assert sent == "First line."
        events = parser.feed(chat_text(continued[:1]))
        events += parser.feed(chat_text(continued[1:]))
        events += parser.feed(b"data: [DONE]\n\n")
        texts = [e for e in events if type(e).__name__ == "TextDelta"]
        assert parser.reply.choices[0].text == "First line." + tail + continued.removeprefix(tail)
        assert all(e.offset >= len("First line." + tail) for e in texts)
