"""A ``Last-Event-ID`` reconnect of a stream that did not begin the reply: the replays are
checked where that stream began, in its own API.

After a hand-off to another API (``switch_format``) or a continuation
(``begin_continuation``), the connection being read began part way into the reply. A server
that ignores ``Last-Event-ID`` and replays that stream from the top must have its replay
decoded by that stream's format, from the offsets it began at: an honest replay is dropped
and the reply goes on; another sample under the same ids is refused, never spliced in.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from fluxstream._events import TextDelta
from fluxstream._parser import StreamParser
from fluxstream.errors import ResumeMismatchError


def chat(text: str, event_id: int | None = None) -> bytes:
    chunk = {"id": "chatcmpl-1", "model": "m",
             "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    head = b"" if event_id is None else b"id: %d\n" % event_id
    return head + b"data: " + json.dumps(chunk).encode() + b"\n\n"


def message_event(event_id: int, obj: dict[str, Any]) -> bytes:
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (
        event_id, obj["type"].encode(), json.dumps(obj).encode())


def messages_stream(texts: list[str]) -> bytes:
    """An Anthropic Messages stream with numbered event ids: start, a text block, deltas."""
    events = [
        message_event(1, {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
            "usage": {"input_tokens": 1, "output_tokens": 1}}}),
        message_event(2, {"type": "content_block_start", "index": 0,
                          "content_block": {"type": "text", "text": ""}}),
    ]
    events += [
        message_event(3 + k, {"type": "content_block_delta", "index": 0,
                              "delta": {"type": "text_delta", "text": text}})
        for k, text in enumerate(texts)
    ]
    return b"".join(events)


def texts(parser: StreamParser, data: bytes) -> list[tuple[int, str]]:
    return [(e.offset, e.text) for e in parser.feed(data) if type(e) is TextDelta]


def handed_to_messages() -> StreamParser:
    """A Chat Completions reply that showed "Hello, ", then another upstream of the Messages
    API went on with "world" (event ids 1-4) and broke off."""
    parser = StreamParser()
    assert texts(parser, chat("Hello, ")) == [(0, "Hello, ")]
    parser.switch_format("anthropic_messages")
    assert texts(parser, messages_stream(["wor", "ld"])) == [(7, "wor"), (10, "ld")]
    assert parser.last_event_id == "4"
    parser.new_connection(resume_after=parser.last_event_id)
    return parser


def test_an_honest_replay_after_a_hand_off_to_another_api_is_dropped() -> None:
    parser = handed_to_messages()
    assert texts(parser, messages_stream(["wor", "ld", " more"])) == [(12, " more")]
    assert parser.reply.text == "Hello, world more"


def test_another_sample_replayed_after_a_hand_off_to_another_api_is_refused() -> None:
    parser = handed_to_messages()
    with pytest.raises(ResumeMismatchError, match="differs from what was delivered"):
        parser.feed(messages_stream(["XYZ", "QQ", " more"]))
    assert parser.reply.text == "Hello, world"  # nothing of the other sample


def continued() -> StreamParser:
    """A reply cut after "Hello, " continued by a new request whose stream (ids 1-2) sent
    "world" and " and" and broke off."""
    parser = StreamParser()
    assert texts(parser, chat("Hello, ")) == [(0, "Hello, ")]
    parser.begin_continuation()
    assert texts(parser, chat("world", 1) + chat(" and", 2)) == [(7, "world"), (12, " and")]
    parser.new_connection(resume_after="2")
    return parser


def test_an_honest_replay_of_a_continuation_is_dropped() -> None:
    parser = continued()
    replay = chat("world", 1) + chat(" and", 2) + chat(" more", 3)
    assert texts(parser, replay) == [(16, " more")]
    assert parser.reply.text == "Hello, world and more"


def test_another_sample_replayed_as_a_continuation_is_refused() -> None:
    parser = continued()
    with pytest.raises(ResumeMismatchError, match="differs from what was delivered"):
        parser.feed(chat("earth", 1) + chat(" and", 2) + chat(" more", 3))
    assert parser.reply.text == "Hello, world and"
