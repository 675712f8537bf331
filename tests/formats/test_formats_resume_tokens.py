"""Regressions found by the format audit: resume tokens, ``format="auto"`` and hostile input
that made the Responses / Anthropic Messages formats lose text, show it twice or crash.

Sans-IO: a token is built from a parser exactly as a stream builds one
(:meth:`fluxstream._io.channel.Channel.resume_token`), passed through JSON, and a parser made by
:meth:`StreamParser.from_token` reads the rest of the recorded stream (a ``Last-Event-ID``
resume: the server goes on after the last event delivered). For every cut point the reply
must equal reading the stream in one go.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fixture_files import chat_streams, require
from resume_tokens import ANTH, RESP, content, frames, read, resumed, token
from sse_frames import frame

from fluxstream._events import Outcome
from fluxstream._parser import StreamParser
from fluxstream.errors import ResumeTokenError


@pytest.mark.parametrize("fmt", ["named", "auto"])
@pytest.mark.parametrize("path", RESP + ANTH, ids=[p.stem for p in RESP + ANTH])
def test_a_token_after_any_event_resumes_exactly(path: Path, fmt: str) -> None:
    """Before the fix, with ``auto``: Anthropic text after the token was skipped as deltas of
    blocks that never started (the token's open blocks were not handed to the chosen format),
    and a Responses part's ``.done`` text was shown a second time; named Anthropic: a tool
    without parameters resumed inside its block had arguments ``""`` instead of ``{}``."""
    if fmt == "auto":
        name = "auto"
    else:
        name = "responses" if path.stem.startswith("resp-") else "anthropic_messages"
    pieces = frames(require(path).read_bytes())
    whole = content(read(pieces, name))
    for cut in range(1, len(pieces)):
        reply = resumed(pieces, cut, name)
        if reply is not None:
            assert content(reply) == whole, cut


def test_auto_resumed_responses_keeps_starting_after() -> None:
    """``from_token`` hands the token's ``sequence`` to the format ``auto`` picks: events a
    server replays at or below it are never shown again, and ``parser.sequence`` goes on."""
    pieces = frames(require(chat_streams("resp-vercel-azure-text")[0]).read_bytes())
    first = StreamParser(content_key="k", format="auto")
    for piece in pieces[:4]:
        first.feed(piece)
    state = token(first)
    assert state["sequence"] is not None
    second = StreamParser.from_token(state, format="auto")
    assert second.sequence == state["sequence"]
    assert second.response_id == state["response_id"]
    for piece in pieces:  # a server that ignored starting_after and began again
        second.feed(piece)
    second.close()
    assert content(second.reply) == content(read(pieces, "responses"))


# --------------------------------------------------------------------------- hostile tokens


@pytest.mark.parametrize("blocks", [
    {"0": {"kind": "tool"}},                # a tool block without its call
    {"\u00b2": {"kind": "text"}},           # str.isdigit() but not int()
    {"9" * 5000: {"kind": "text"}},         # past int()'s digit limit
    {"0": {"kind": "thinking", "thinking": 5, "signature": None}},
    {"0": []},
    [1, 2],
])
def test_a_hostile_anthropic_wire_state_cannot_crash(blocks: Any) -> None:
    """A token is data from outside: such a token is refused with the typed error
    (``fluxstream._core.resume_token`` checks the wire state's shape), and the format itself,
    given the state, leaves out what is not what ``resume_state`` writes: the stream goes on
    with typed skips only (before: ``KeyError`` / ``ValueError``)."""
    state = {"key": "k", "reply": {},
             "wire": {"blocks": blocks, "message_started": True, "usage": 3, "stop": 4}}
    with pytest.raises(ResumeTokenError):
        StreamParser.from_token(state, format="anthropic_messages", strict=True)
    parser = StreamParser(content_key="k", format="anthropic_messages", strict=True)
    parser._format.restore_state(state["wire"])
    body = (
        b'data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta",'
        b'"partial_json":"{}"}}\n\n'
        b'data: {"type":"content_block_stop","index":0}\n\n'
        b'data: {"type":"message_delta","delta":{"stop_reason":"end_turn"}}\n\n'
        b'data: {"type":"message_stop"}\n\n'
    )
    parser.feed(body)
    parser.close()
    reply = parser.reply
    reply.model_dump_json()
    assert reply.outcome is Outcome.DONE


# --------------------------------------------------------------------------- auto detection

HI = "\\ud83d"
LO = "\\ude00"


def test_auto_decides_on_a_first_frame_with_a_lone_surrogate_half() -> None:
    """A Node server cuts an emoji by UTF-16 unit in the very first chunk: only
    ``json.loads`` decodes it. The named format joins the halves; ``auto`` skipped the frame
    (strict: raised ``FrameDecodeError``) and lost the text."""
    body = (
        f'data: {{"choices":[{{"index":0,"delta":{{"content":"a{HI}"}}}}]}}\n\n'
        f'data: {{"choices":[{{"index":0,"delta":{{"content":"{LO}b"}},'
        '"finish_reason":"stop"}]}\n\n'
        "data: [DONE]\n\n"
    ).encode()
    for strict in (False, True):
        named = StreamParser(content_key="k", format="chat_completions", strict=strict)
        auto = StreamParser(content_key="k", format="auto", strict=strict)
        for parser in (named, auto):
            parser.feed(body)
            parser.close()
        assert auto.reply.choices[0].text == named.reply.choices[0].text == "a\U0001f600b"
        assert auto.reply.skipped_frames == 0


@pytest.mark.parametrize("fmt", ["responses", "auto"])
def test_a_data_only_responses_stream_opening_with_a_half(fmt: str) -> None:
    body = (
        'data: {"type":"response.output_text.delta","sequence_number":1,"output_index":0,'
        f'"content_index":0,"delta":"a{HI}"}}\n\n'
        'data: {"type":"response.output_text.delta","sequence_number":2,"output_index":0,'
        f'"content_index":0,"delta":"{LO}b"}}\n\n'
        'data: {"type":"response.completed","sequence_number":3,'
        '"response":{"status":"completed"}}\n\n'
    ).encode()
    parser = StreamParser(content_key="k", format=fmt, strict=True)
    parser.feed(body)
    parser.close()
    assert parser.reply.choices[0].text == "a\U0001f600b"


# --------------------------------------------------------------------------- held halves


def _surrogate_streams() -> dict[str, list[bytes]]:
    resp = [
        '{"type":"response.created","sequence_number":0,"response":{"id":"r","status":"in_progress"}}',
        '{"type":"response.output_text.delta","sequence_number":1,"output_index":0,'
        f'"content_index":0,"delta":"a{HI}"}}',
        '{"type":"response.output_text.delta","sequence_number":2,"output_index":0,'
        f'"content_index":0,"delta":"{LO}b"}}',
        '{"type":"response.function_call_arguments.delta","sequence_number":3,'
        f'"output_index":1,"delta":"[\\"{HI}"}}',
        '{"type":"response.function_call_arguments.delta","sequence_number":4,'
        f'"output_index":1,"delta":"{LO}\\"]"}}',
        '{"type":"response.completed","sequence_number":5,"response":{"status":"completed"}}',
    ]
    anth = [
        '{"type":"message_start","message":{"id":"m","usage":{"input_tokens":1}}}',
        '{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}',
        f'{{"type":"content_block_delta","index":0,"delta":{{"type":"thinking_delta","thinking":"t{HI}"}}}}',
        f'{{"type":"content_block_delta","index":0,"delta":{{"type":"thinking_delta","thinking":"{LO}u"}}}}',
        '{"type":"content_block_stop","index":0}',
        '{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}',
        f'{{"type":"content_block_delta","index":1,"delta":{{"type":"text_delta","text":"a{HI}"}}}}',
        f'{{"type":"content_block_delta","index":1,"delta":{{"type":"text_delta","text":"{LO}b"}}}}',
        '{"type":"content_block_stop","index":1}',
        '{"type":"message_delta","delta":{"stop_reason":"end_turn"}}',
        '{"type":"message_stop"}',
    ]
    return {
        "responses": [f"data: {d}\n\n".encode() for d in resp],
        "anthropic_messages": [f"data: {d}\n\n".encode() for d in anth],
    }


@pytest.mark.parametrize("fmt", ["responses", "anthropic_messages"])
def test_a_token_between_the_halves_of_an_emoji_keeps_it_whole(fmt: str) -> None:
    """The high half a format holds back for the channel's next fragment is part of the
    state a token carries (as a number: a lone half is not valid in every JSON encoder).
    Before: the resumed reply had U+FFFD where the emoji was."""
    pieces = _surrogate_streams()[fmt]
    whole = content(read(pieces, fmt))
    assert "\U0001f600" in whole[0][0][0]
    for cut in range(1, len(pieces)):
        reply = resumed(pieces, cut, fmt)
        if reply is not None:
            assert content(reply) == whole, cut


# --------------------------------------------------------------------------- whole bodies


@pytest.mark.parametrize("item", [
    {"type": "message", "content": 5},
    {"type": "message", "content": "abc"},
    {"type": "message", "content": [{"type": "output_text", "text": 5}]},
    {"type": "reasoning", "summary": 7, "content": True},
    {"type": "reasoning", "summary": [{"text": "ok"}], "content": 1.5},
])
def test_a_hostile_responses_body_cannot_crash(item: dict[str, Any]) -> None:
    """A non-streaming ``response`` body whose item fields have the wrong type: before,
    ``TypeError: 'int' object is not iterable`` from deep inside ``feed_completion``."""
    parser = StreamParser(content_key="k", format="responses")
    parser.feed_completion({"object": "response", "status": "completed", "output": [item]})
    parser.close()
    reply = parser.reply
    reply.model_dump_json()
    assert reply.choices[0].finish_reason == "completed"


# --------------------------------------------------------------------------- Responses parts


def test_a_reasoning_summary_and_reasoning_text_are_different_parts() -> None:
    """Summary parts count by ``summary_index`` and reasoning-text parts by
    ``content_index``: summary 0 streamed as deltas must not make the ``.done`` of content
    0 (a server that sends the reasoning text only whole) look delivered. Before, both were
    the part ``("reasoning", 0, 0)`` and the reasoning text was lost."""
    events = [
        {"type": "response.created", "sequence_number": 0,
         "response": {"id": "r", "status": "in_progress"}},
        {"type": "response.reasoning_summary_text.delta", "sequence_number": 1,
         "output_index": 0, "summary_index": 0, "delta": "Summary. "},
        {"type": "response.reasoning_summary_text.done", "sequence_number": 2,
         "output_index": 0, "summary_index": 0, "text": "Summary. "},
        {"type": "response.reasoning_text.done", "sequence_number": 3,
         "output_index": 0, "content_index": 0, "text": "Full thoughts."},
        {"type": "response.completed", "sequence_number": 4,
         "response": {"status": "completed"}},
    ]
    body = b"".join(frame(e) for e in events)
    for fmt in ("responses", "auto"):
        assert read([body], fmt).choices[0].reasoning == "Summary. Full thoughts."


# --------------------------------------------------------------------------- error events


@pytest.mark.parametrize("fmt", ["responses", "anthropic_messages"])
@pytest.mark.parametrize("strict", [False, True])
def test_a_plain_text_error_event_is_the_replys_error(fmt: str, strict: bool) -> None:
    """A proxy's ``event: error`` whose data is not JSON ("upstream timed out"): Chat
    Completions and ``auto`` make it the reply's error (outcome ``failed``); the two event
    formats skipped it (strict: raised ``FrameDecodeError``) and the stream ended
    ``truncated`` with the reason lost, as if a resume could help."""
    body = (b'data: {"type":"response.output_text.delta","output_index":0,"delta":"Hi"}\n\n'
            if fmt == "responses" else
            b'data: {"type":"message_start","message":{"id":"m"}}\n\n'
            b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text"}}\n\n'
            b'data: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"text_delta","text":"Hi"}}\n\n')
    parser = StreamParser(content_key="k", format=fmt, strict=strict)
    parser.feed(body + b"event: error\ndata: upstream timed out\n\n")
    parser.close()
    reply = parser.reply
    assert reply.outcome is Outcome.FAILED
    assert reply.error is not None and reply.error.message == "upstream timed out"
    assert reply.choices[0].text == "Hi" and reply.skipped_frames == 0


def test_final_arguments_that_disagree_replace_the_streamed_ones_after_a_resume() -> None:
    """A server whose ``function_call_arguments.done`` differs from its deltas (whitespace
    normalised here): read in one go the final value replaces the streamed one. Resumed from
    a token between the deltas, the format no longer has the streamed text and trusted it
    as a prefix of the final value: the arguments came out as a splice of both."""
    events = [
        {"type": "response.created", "sequence_number": 0,
         "response": {"id": "r", "status": "in_progress"}},
        {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
         "item": {"type": "function_call", "call_id": "c1", "name": "f", "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "sequence_number": 2,
         "output_index": 0, "delta": '{"city": '},
        {"type": "response.function_call_arguments.delta", "sequence_number": 3,
         "output_index": 0, "delta": '"Paris"}'},
        {"type": "response.function_call_arguments.done", "sequence_number": 4,
         "output_index": 0, "arguments": '{"city":"Paris"}'},
        {"type": "response.completed", "sequence_number": 5,
         "response": {"status": "completed"}},
    ]
    pieces = [frame(e) for e in events]
    whole = content(read(pieces, "responses"))
    assert whole[0][0][4] == [(0, "c1", "f", '{"city":"Paris"}')]
    for cut in range(1, len(pieces)):
        reply = resumed(pieces, cut, "responses")
        assert reply is not None and content(reply) == whole, cut


@pytest.mark.parametrize("bogus", [2**53, 2**70, -1])
def test_an_absurd_sequence_number_does_not_hide_what_follows(bogus: int) -> None:
    """``sequence_number`` drops replays; one absurd value (past what a token can carry, or
    negative) made every later event look delivered already: the rest of the text was lost,
    and a resume from a token taken there showed it (the token could not hold the number)."""
    events = [
        {"type": "response.created", "sequence_number": 0,
         "response": {"id": "r", "status": "in_progress"}},
        {"type": "response.output_text.delta", "sequence_number": bogus, "output_index": 0,
         "content_index": 0, "delta": "Hello"},
        {"type": "response.output_text.delta", "sequence_number": 2, "output_index": 0,
         "content_index": 0, "delta": " world"},
        {"type": "response.completed", "sequence_number": 3,
         "response": {"status": "completed"}},
    ]
    pieces = [frame(e) for e in events]
    whole = content(read(pieces, "responses"))
    assert whole[0][0][0] == "Hello world"
    for cut in range(1, len(pieces)):
        reply = resumed(pieces, cut, "responses")
        assert reply is not None and content(reply) == whole, cut


# --------------------------------------------------------------------------- skipped frames


@pytest.mark.parametrize("fmt", ["responses", "anthropic_messages"])
def test_a_skipped_frame_shows_the_frame(fmt: str) -> None:
    """``SkippedFrame.data`` is an excerpt of what was skipped, for diagnosis. Every frame
    the two event formats skipped after decoding it showed ``"<unserialisable>"`` (the
    placeholder was serialised instead of the frame)."""
    parser = StreamParser(content_key="k", format=fmt)
    events = parser.feed(b'data: {"type":"brand_new_event","detail":42}\n\n')
    assert [type(e).__name__ for e in events] == ["SkippedFrame"]
    assert "brand_new_event" in events[0].data  # type: ignore[attr-defined]
    assert "unserialisable" not in events[0].data  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["resp-vercel-azure-text-harness-framing",
                                  "anth-sdk-py-basic"])
def test_auto_is_not_decided_by_an_empty_object(name: str) -> None:
    """A proxy's ``data: {}`` keep-alive before the first event: an object without a
    ``type`` decided Chat Completions, and the whole Responses / Anthropic reply was lost.
    Chat Completions itself ignores ``{}``, so it decides nothing now."""
    body = require(chat_streams(name)[0]).read_bytes()
    fmt = "responses" if name.startswith("resp-") else "anthropic_messages"
    named = content(read([body], fmt))
    assert content(read([b"data: {}\n\n" + body], "auto")) == named


# --------------------------------------------------------------------------- bounded state


def test_responses_calls_named_only_by_empty_final_arguments_are_calls() -> None:
    """``function_call_arguments.done`` (or ``output_item.done``) with empty arguments for an
    item never announced: the format kept a call the reply never heard of — without bound
    (the assembler's ``max_tool_calls`` never saw them: 5000 such events, 5000 calls kept) —
    and the finish was ``tool_calls`` for a reply without a tool call."""
    from fluxstream.errors import LimitExceededError

    def done(index: int) -> str:
        return json.dumps({"type": "response.function_call_arguments.done",
                           "output_index": index, "arguments": ""})

    parser = StreamParser(content_key="k", format="responses")
    parser.feed(f"data: {done(3)}\n\n".encode())
    parser.feed(b'data: {"type":"response.completed","response":{"status":"completed"}}\n\n')
    choice = parser.reply.choices[0]
    assert choice.stop == "tool_calls" and [c.index for c in choice.tool_calls] == [3]

    flood = StreamParser(content_key="k", format="responses")
    # The calls before the limit are delivered with the read; the limit is raised next.
    flood.feed("".join(f"data: {done(i)}\n\n" for i in range(5000)).encode())
    with pytest.raises(LimitExceededError):
        flood.close()
    assert len(flood.reply.choices[0].tool_calls) <= flood.limits.max_tool_calls


@pytest.mark.parametrize("bogus", [-1, 2**53, 2**70])
@pytest.mark.parametrize("fmt", ["responses", "anthropic_messages"])
def test_an_index_out_of_range_is_a_skipped_frame(fmt: str, bogus: int) -> None:
    """A tool call (or block) index that is not a count, ``-1`` or past 2**53: the formats made
    it a tool call of the reply, and a resume token then carried an index the parser refuses
    (``ResumeTokenError``: not a count) — a token fluxstream wrote itself. Such a frame is
    skipped and counted, as any frame naming nothing usable."""
    if fmt == "responses":
        events = [
            {"type": "response.output_item.added", "sequence_number": 0, "output_index": bogus,
             "item": {"type": "function_call", "call_id": "c", "name": "f", "arguments": ""}},
            {"type": "response.function_call_arguments.delta", "sequence_number": 1,
             "output_index": bogus, "delta": "{}"},
            {"type": "response.output_text.delta", "sequence_number": 2, "output_index": 0,
             "content_index": 0, "delta": "Hi"},
        ]
    else:
        events = [
            {"type": "message_start", "message": {"id": "m"}},
            {"type": "content_block_start", "index": bogus,
             "content_block": {"type": "tool_use", "id": "c", "name": "f", "input": {}}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "text_delta", "text": "Hi"}},
        ]
    pieces = [frame(e) for e in events]
    parser = StreamParser(content_key="k", format=fmt)
    for piece in pieces:
        parser.feed(piece)
    reply = parser.reply
    assert reply.choices[0].tool_calls == [] and reply.choices[0].text == "Hi"
    assert reply.skipped_frames >= 1
    resumed_parser = StreamParser.from_token(token(parser), format=fmt)
    assert resumed_parser.reply.choices[0].text == "Hi"


@pytest.mark.parametrize("chunk", [
    b'{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":-1,"id":"t",'
    b'"function":{"name":"f","arguments":"{}"}}]}}]}',
    b'{"id":"c","choices":[{"index":-2,"delta":{"content":"hi"}}]}',
])
def test_chat_completions_tokens_with_odd_indices_are_accepted(chunk: bytes) -> None:
    parser = StreamParser(content_key="k", format="chat_completions")
    """Chat Completions keeps any integer index the wire gives, negative ones included: a
    token it wrote must resume (the token check refused them as "not a count")."""
    parser.feed(b"data: " + chunk + b"\n\n")
    resumed = StreamParser.from_token(token(parser), format="chat_completions")
    assert resumed.offsets() == parser.offsets()
