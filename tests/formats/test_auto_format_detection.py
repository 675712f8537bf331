"""``format="auto"`` decides on the first event that names a format.

Keep-alives (``event: ping``, ``{"type": "ping"}``, ``keepalive``, ``{}``) and errors name none:
a keep-alive before the first chunk must not lock a Chat Completions stream into Anthropic
Messages, and an error before the format is known is the reply's error (``failed``) exactly as
under the named formats. A first frame whose ``type`` is not a string names none either (the
only untyped format, Chat Completions, has no ``type`` at all): it is skipped and counted, as
the named formats skip it, and the rest is read in the format it is in.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fixture_files import chat_expected, chat_stream
from format_corpus import as_corpus, check_reply
from sse_frames import frame, frames

from fluxstream._events import Outcome
from fluxstream._parser import StreamParser, replay
from fluxstream.formats.auto import AutoFormat, identify
from fluxstream.sse import ServerSentEvent

CHAT = chat_stream("cc-openai-py-basic-text")
RESP = chat_stream("resp-syn-error-event-flat")
ANTH = chat_stream("anth-docs-basic")
NAMED = {CHAT: "chat_completions", RESP: "responses", ANTH: "anthropic_messages"}


def chosen(parser: StreamParser) -> str | None:
    fmt = parser._format
    assert isinstance(fmt, AutoFormat)
    return fmt.name


KEEPALIVES = [
    frame({"type": "ping"}, "ping"),
    frame({"type": "ping"}),
    frame({}, "ping"),
    frame({"type": "keepalive"}),
    frame({"type": "keepalive"}, "keepalive"),
]


@pytest.mark.parametrize("keepalive", KEEPALIVES, ids=range(len(KEEPALIVES)))
@pytest.mark.parametrize("path", [CHAT, RESP, ANTH], ids=lambda p: p.stem)
def test_a_leading_keepalive_decides_nothing(keepalive: bytes, path: Any) -> None:
    body = keepalive + keepalive + path.read_bytes()
    parser = StreamParser(format="auto")
    parser.feed(body)
    parser.close()
    check_reply(parser.reply, chat_expected(path))
    assert chosen(parser) == NAMED[path]
    assert parser.reply.skipped_frames == 0
    assert parser.reply.heartbeats >= 2  # the keep-alives count as heartbeats


@pytest.mark.parametrize("fmt", ["chat_completions", "responses", "anthropic_messages", "auto"])
def test_a_first_error_event_fails_the_stream_in_every_format(fmt: str) -> None:
    reply = replay([frame({"message": "upstream overloaded"}, "error")], format=fmt)
    assert reply.outcome is Outcome.FAILED
    assert reply.error is not None and reply.error.message == "upstream overloaded"
    assert reply.skipped_frames == 0


@pytest.mark.parametrize("path", [CHAT, RESP, ANTH], ids=lambda p: p.stem)
def test_a_first_error_decides_nothing_and_stays_the_reply_error(path: Any) -> None:
    error = frame({"message": "first"}, "error")
    auto = replay([error + path.read_bytes()], format="auto")
    named = replay([error + path.read_bytes()], format=NAMED[path])
    assert auto.outcome is Outcome.FAILED
    assert as_corpus(auto) == as_corpus(named)


@pytest.mark.parametrize("value", [None, 5, 1.5, [], ["response.created"], {"a": 1}, True])
@pytest.mark.parametrize("path", [RESP, ANTH], ids=lambda p: p.stem)
def test_a_first_frame_whose_type_is_not_a_string_is_skipped(path: Any, value: Any) -> None:
    lines = [ln for ln in path.read_text().splitlines() if ln.startswith("data:")]
    first = json.loads(lines[0][5:])
    body = frame({**first, "type": value}) + frames(*(ln[5:].strip() for ln in lines[1:]))
    auto = replay([body], format="auto")
    named = replay([body], format=NAMED[path])
    assert as_corpus(auto) == as_corpus(named)
    assert auto.text and auto.skipped_frames == named.skipped_frames == 1


def test_an_untyped_first_chunk_is_still_chat_completions() -> None:
    parser = StreamParser(format="auto")
    parser.feed(frame({"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"}}]})
                + frame({"id": "c", "choices": [{"index": 0, "delta": {},
                                                 "finish_reason": "stop"}]})
                + b"data: [DONE]\n\n")
    parser.close()
    assert chosen(parser) == "chat_completions" and parser.reply.text == "hi"
    assert parser.reply.outcome is Outcome.DONE


@pytest.mark.parametrize(
    ("sse", "name"),
    [
        (ServerSentEvent("message", '{"type":"response.created"}'), "responses"),
        (ServerSentEvent("response.output_text.delta", '{"delta":"x"}'), "responses"),
        (ServerSentEvent("message", '{"type":"message_start","message":{}}'),
         "anthropic_messages"),
        (ServerSentEvent("content_block_delta", "{}"), "anthropic_messages"),
        (ServerSentEvent("message", '{"choices":[]}'), "chat_completions"),
        (ServerSentEvent("message", '{"id":"c","model":"m"}'), "chat_completions"),
        (ServerSentEvent("message", "[DONE]"), "chat_completions"),
        (ServerSentEvent("ping", '{"type":"ping"}'), None),
        (ServerSentEvent("message", '{"type":"keepalive"}'), None),
        (ServerSentEvent("message", "{}"), None),
        (ServerSentEvent("message", ""), None),
        (ServerSentEvent("error", '{"message":"x"}'), None),
        (ServerSentEvent("message", '{"type":"error","message":"x"}'), None),
        (ServerSentEvent("message", '{"error":{"message":"x"}}'), None),
        (ServerSentEvent("message", '{"type":null}'), None),
        (ServerSentEvent("message", '{"type":7}'), None),
        (ServerSentEvent("message", "not json"), None),
        (ServerSentEvent("message", "[1,2]"), None),
        (ServerSentEvent("message", '{"type":"brand_new"}'), None),
    ],
)
def test_identify_names_the_format_an_event_belongs_to(sse: ServerSentEvent,
                                                       name: str | None) -> None:
    assert identify(sse) == name


def test_identify_refuses_a_frame_full_of_tiny_objects_without_decoding_it() -> None:
    data = '{"choices":[' + ",".join(["{}"] * 200_000) + "]}"
    assert identify(ServerSentEvent("message", data)) is None
