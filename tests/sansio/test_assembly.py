"""Every provider quirk the assembler must survive, one focused test each (plus outcomes).

Streams are written as chunk dicts and framed as SSE bytes, so the whole pipeline (decoder,
format, assembler) runs exactly as it does on the network.
"""

from __future__ import annotations

import json
import tracemalloc
from functools import partial
from typing import Any

import pydantic
import pytest
from sse_frames import frames

from fluxstream._events import (
    End,
    ErrorEvent,
    Event,
    Finish,
    Outcome,
    ReasoningDelta,
    RefusalDelta,
    Reset,
    SkippedFrame,
    TextDelta,
    ToolCallDelta,
    ToolCallDone,
    TypedEvent,
    UsageUpdate,
)
from fluxstream._parser import StreamParser, replay
from fluxstream._reply import Reply, ToolCall, Usage
from fluxstream.errors import ArgumentsError, FrameDecodeError
from fluxstream.sse import ServerSentEvent

#: Chunks as one body, ``[DONE]`` last unless ``done=False``.
frame = partial(frames, done=True)


def chunk(*choices: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": list(choices),
            **top}


def ch(index: int | None = 0, finish: str | None = None, **delta: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"delta": delta, "finish_reason": finish}
    if index is not None:
        c["index"] = index
    return c


def tc(index: int | None = None, id: str | None = None, name: str | None = None,
       args: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "function", "function": {}}
    if index is not None:
        out["index"] = index
    if id is not None:
        out["id"] = id
    if name is not None:
        out["function"]["name"] = name
    if args is not None:
        out["function"]["arguments"] = args
    return out


def run(body: bytes, **kwargs: Any) -> tuple[list[Event], Reply]:
    parser = StreamParser(content_key="k", **kwargs)
    events = parser.feed(body) + parser.close()
    return events, parser.reply


# --------------------------------------------------------------------------- content


def test_empty_choices_never_crash_and_never_produce_text() -> None:
    events, reply = run(frame(
        chunk(prompt_filter_results=[{"prompt_index": 0}], id="", model=""),
        chunk(ch(content="Hi"), id="real", model="gpt"),
        {"choices": None, "usage": None},
        {"choices": []},
        {},
        chunk(usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}),
    ))
    assert reply.text == "Hi" and len(reply.choices) == 1
    assert reply.id == "real" and reply.model == "gpt"  # first non-empty values
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hi"]
    assert reply.usage == Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3)


@pytest.mark.parametrize(
    "roles",
    [["assistant", None, None], ["assistant"] * 3, ["", "", ""], [None, None, None]],
    ids=["once", "every-chunk", "empty-string", "never"],
)
def test_role_never_starts_a_new_message(roles: list[str | None]) -> None:
    chunks = []
    for role, text in zip(roles, ["a", "b", "c"], strict=True):
        delta: dict[str, Any] = {"content": text}
        if role is not None:
            delta["role"] = role
        chunks.append(chunk(ch(**delta)))
    _, reply = run(frame(*chunks))
    assert reply.text == "abc" and len(reply.choices) == 1


def test_only_non_empty_strings_are_text() -> None:
    events, reply = run(frame(
        chunk(ch(role="assistant", content="", refusal=None)),
        chunk(ch(content=None)),
        chunk(ch()),
        chunk({"index": 0}),
        chunk(ch(content=5)),
        chunk(ch(content="x")),
    ))
    assert reply.text == "x"
    assert [type(e) for e in events] == [TextDelta, End]
    assert reply.choices[0].reasoning is None and reply.choices[0].refusal is None


def test_a_choice_without_content_still_exists() -> None:
    _, reply = run(frame(chunk(ch(role="assistant", content=""))), )
    assert [c.index for c in reply.choices] == [0]
    assert reply.choices[0].text == ""


def test_reasoning_from_reasoning_content_or_reasoning() -> None:
    events, reply = run(frame(
        chunk(ch(reasoning_content="", content=None)),  # DeepSeek's empty first chunk
        chunk(ch(reasoning_content="think ")),
        chunk(ch(reasoning="more ")),  # Groq/Cerebras/OpenRouter field
        chunk(ch(reasoning_content="once", reasoning="once")),  # both: counted once
        chunk(ch(content="answer")),
    ))
    assert reply.choices[0].reasoning == "think more once"
    assert reply.text == "answer"
    offsets = [e.offset for e in events if isinstance(e, ReasoningDelta)]
    assert offsets == [0, 6, 11]


def test_mistral_content_parts() -> None:
    _, reply = run(frame(
        chunk(ch(content=[{"type": "thinking", "thinking": [{"type": "text", "text": "hm"}]}])),
        chunk(ch(content=[{"type": "text", "text": "4"}, {"type": "image_url"}, "junk"])),
        chunk(ch(content=[{"type": "thinking", "thinking": "!"}])),
        chunk(ch(content="")),
    ))
    assert reply.choices[0].reasoning == "hm!"
    assert reply.text == "4"


def test_refusal_channel() -> None:
    events, reply = run(frame(
        chunk(ch(content=None, refusal="")),
        chunk(ch(refusal="I can't")),
        chunk(ch(refusal=" help.", finish="stop")),
    ))
    assert reply.choices[0].refusal == "I can't help." and reply.text == ""
    assert [(e.offset, e.text) for e in events if isinstance(e, RefusalDelta)] == [
        (0, "I can't"), (7, " help.")]


def test_offsets_count_code_points_per_channel_and_choice() -> None:
    events, _ = run(frame(
        chunk(ch(0, content="日本"), ch(1, content="a")),
        chunk(ch(0, content="👍🏽"), ch(1, content="b")),
        chunk(ch(0, content="x")),
    ))
    deltas = [(e.choice, e.offset, e.text) for e in events if isinstance(e, TextDelta)]
    assert deltas == [(0, 0, "日本"), (1, 0, "a"), (0, 2, "👍🏽"), (1, 1, "b"), (0, 4, "x")]
    assert all(e.key == "k" for e in events if isinstance(e, TextDelta))


# --------------------------------------------------------------------------- finish, usage, n


def test_finish_reason_last_non_null_wins_and_finish_is_emitted_on_change() -> None:
    events, reply = run(frame(
        chunk(ch(content="a")),
        chunk(ch(finish="tool_calls")),
        chunk(ch(finish=None)),
        chunk(ch(finish="tool_calls")),  # repeated: no second Finish
        chunk(ch(finish="stop")),  # changed (Gemini): one more Finish, raw string kept
        chunk(ch(finish="")),
    ))
    assert reply.choices[0].finish_reason == "stop"
    assert [e.reason for e in events if isinstance(e, Finish)] == ["tool_calls", "stop"]


def test_finish_reason_on_the_content_chunk() -> None:
    _, reply = run(frame(chunk(ch(content="bye", finish="stop"))))
    assert reply.text == "bye" and reply.choices[0].finish_reason == "stop"


def test_usage_from_any_chunk_last_non_null_wins() -> None:
    events, reply = run(frame(
        chunk(ch(content="a"), usage={"prompt_tokens": 5, "completion_tokens": 1,
                                      "total_tokens": 6}),
        chunk(ch(content="b"), usage=None),
        chunk(ch(finish="stop"), usage={
            "prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7,
            "prompt_cache_hit_tokens": 3,
            "completion_tokens_details": {"reasoning_tokens": 1},
        }),
        {"choices": [], "usage": None},
    ))
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 2 and reply.usage.total_tokens == 7
    assert reply.usage.completion_tokens_details is not None
    assert reply.usage.completion_tokens_details.reasoning_tokens == 1
    assert reply.usage.model_extra == {"prompt_cache_hit_tokens": 3}  # extra fields kept
    assert [e.usage.total_tokens for e in events if isinstance(e, UsageUpdate)] == [6, 7]


def test_choices_are_keyed_by_index_not_position() -> None:
    _, reply = run(frame(
        chunk(ch(1, content="one"), ch(0, content="zero")),
        chunk(ch(2, content="two")),
        chunk(ch(0, content="!", finish="stop")),
        chunk(ch(2, finish="length"), ch(1, finish="stop")),
    ))
    assert [(c.index, c.text, c.finish_reason) for c in reply.choices] == [
        (0, "zero!", "stop"), (1, "one", "stop"), (2, "two", "length")]
    assert reply.text == "zero!"


# --------------------------------------------------------------------------- tool calls


def _calls(reply: Reply, choice: int = 0) -> list[tuple[int, str | None, str | None, str]]:
    return [(t.index, t.id, t.name, t.arguments) for t in reply.choices[choice].tool_calls]


def test_tool_call_id_and_name_are_set_once() -> None:
    events, reply = run(frame(
        chunk(ch(tool_calls=[tc(0, "call_1", "search", "")])),
        chunk(ch(tool_calls=[tc(0, "call_1", "search", '{"q":')])),  # repeats everything
        chunk(ch(tool_calls=[tc(0, "", "", '"x"}')])),  # empty id/name never clobber
        chunk(ch(finish="tool_calls")),
    ))
    assert _calls(reply) == [(0, "call_1", "search", '{"q":"x"}')]
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    # id/name only on the delta where they first became known; offsets per call.
    assert [(d.id, d.name, d.arguments, d.offset) for d in deltas] == [
        ("call_1", "search", "", 0), (None, None, '{"q":', 0), (None, None, '"x"}', 5)]


def test_late_name_and_missing_name() -> None:
    _, reply = run(frame(
        chunk(ch(tool_calls=[tc(0, "a", None, "")])),
        chunk(ch(tool_calls=[tc(0, "a", "late", "{}")])),
        chunk(ch(tool_calls=[tc(1, "b", None, "{}")])),
    ))
    assert _calls(reply) == [(0, "a", "late", "{}"), (1, "b", None, "{}")]


def test_parallel_interleaved_calls_never_mix() -> None:
    _, reply = run(frame(
        chunk(ch(tool_calls=[tc(0, "c0", "f", '{"a"'), tc(1, "c1", "g", '{"b"')])),
        chunk(ch(tool_calls=[tc(1, None, None, ":2}"), tc(0, None, None, ":1")])),
        chunk(ch(tool_calls=[tc(0, None, None, "}")])),
        chunk(ch(finish="tool_calls")),
    ))
    assert _calls(reply) == [(0, "c0", "f", '{"a":1}'), (1, "c1", "g", '{"b":2}')]


def test_first_call_may_have_index_1() -> None:
    _, reply = run(frame(
        chunk(ch(content="Let me check.")),
        chunk(ch(tool_calls=[tc(1, "toolu_1", "weather", "")])),
        chunk(ch(tool_calls=[tc(1, None, None, '{"city":"Paris"}')])),
        chunk(ch(finish="tool_calls")),
    ))
    assert _calls(reply) == [(1, "toolu_1", "weather", '{"city":"Paris"}')]
    assert reply.choices[0].tool_calls[0].parse_arguments() == {"city": "Paris"}


def test_fragments_without_index() -> None:
    _, reply = run(frame(
        # Gemini: one complete call per delta, ids differ -> new calls.
        chunk(ch(tool_calls=[tc(None, "g1", "f", '{"x":1}')])),
        chunk(ch(tool_calls=[tc(None, "g2", "f", '{"x":')])),
        # The same id as the current call (and a repeated name) -> continues it.
        chunk(ch(tool_calls=[tc(None, "g2", "f", "2}")])),
        # No id but a name while the current call has one -> new call.
        chunk(ch(tool_calls=[tc(None, None, "h", '{"y"')])),
        # No id, no name -> continues the most recently touched call.
        chunk(ch(tool_calls=[tc(None, None, None, ":3}")])),
        # A different non-empty id -> a new call even though the current one has no id.
        chunk(ch(tool_calls=[tc(None, "g4", None, "{}")])),
    ))
    assert _calls(reply) == [
        (0, "g1", "f", '{"x":1}'), (1, "g2", "f", '{"x":2}'), (2, None, "h", '{"y":3}'),
        (3, "g4", None, "{}")]


def test_fragment_without_index_continues_the_most_recently_touched_call() -> None:
    _, reply = run(frame(
        chunk(ch(tool_calls=[tc(0, "a", "f", "{"), tc(1, "b", "g", "[")])),
        chunk(ch(tool_calls=[tc(0, None, None, "}")])),
        chunk(ch(tool_calls=[{"function": {"arguments": " "}}])),  # -> call 0 (touched last)
        chunk(ch(tool_calls=[tc(1, None, None, "]")])),
    ))
    assert _calls(reply) == [(0, "a", "f", "{} "), (1, "b", "g", "[]")]


def test_metadata_only_fragment_does_not_open_a_call() -> None:
    sig = {"extra_content": {"google": {"thought_signature": "sig"}}}
    events, reply = run(frame(
        chunk(ch(tool_calls=[sig])),
        chunk(ch(tool_calls=[tc(None, "g1", "f", "{}")])),
        chunk(ch(tool_calls=[sig])),  # continues g1, adds nothing
        chunk(ch(finish="tool_calls")),
    ))
    assert _calls(reply) == [(0, "g1", "f", "{}")]
    assert len([e for e in events if isinstance(e, ToolCallDelta)]) == 1


def test_arguments_sent_as_an_object() -> None:
    _, reply = run(frame(
        chunk(ch(tool_calls=[tc(0, "o", "get", {"city": "Zürich", "days": [1, 2]})])),
        chunk(ch(finish="tool_calls")),
    ))
    call = reply.choices[0].tool_calls[0]
    assert call.arguments == '{"city":"Zürich","days":[1,2]}'  # compact, not ASCII-escaped
    assert call.parse_arguments() == {"city": "Zürich", "days": [1, 2]}


class Weather(pydantic.BaseModel):
    city: str
    days: int = 1


def test_parse_arguments_with_a_model_and_errors_only_when_asked() -> None:
    _, reply = run(frame(
        chunk(ch(tool_calls=[tc(0, "a", "weather", '{"city": "Oslo", "days": 3}')])),
        chunk(ch(tool_calls=[tc(1, "b", "weather", '{"city": ')])),  # cut by max_tokens
        chunk(ch(tool_calls=[tc(2, "c", "weather", '{"town": "x"}')])),
        chunk(ch(tool_calls=[tc(3, "d", "noargs", "")])),
        chunk(ch(finish="length")),
    ))
    assert reply.outcome is Outcome.DONE  # nothing raised while streaming
    good, cut, wrong, empty = reply.choices[0].tool_calls
    assert good.parse_arguments(Weather) == Weather(city="Oslo", days=3)
    assert good.parse_arguments() == {"city": "Oslo", "days": 3}
    with pytest.raises(ArgumentsError) as info:
        cut.parse_arguments()
    assert info.value.name == "weather" and info.value.arguments == '{"city": '
    with pytest.raises(ArgumentsError):
        cut.parse_arguments(Weather)
    with pytest.raises(ArgumentsError, match="Weather"):
        wrong.parse_arguments(Weather)
    with pytest.raises(ArgumentsError):
        empty.parse_arguments()  # "" is not JSON
    assert cut.partial_arguments() == {}
    assert isinstance(info.value, ValueError)


def test_tool_call_done_on_finish_and_at_a_clean_end() -> None:
    events, _ = run(frame(
        chunk(ch(0, tool_calls=[tc(0, "a", "f", "{}")]), ch(1, tool_calls=[tc(0, "b", "g", "[]")])),
        chunk(ch(0, finish="tool_calls")),
    ))
    kinds = [(type(e).__name__, getattr(e, "choice", None)) for e in events]
    assert kinds == [
        ("ToolCallDelta", 0), ("ToolCallDelta", 1),
        ("Finish", 0), ("ToolCallDone", 0),  # right after its choice's finish
        ("ToolCallDone", 1),  # choice 1 never finished: done at the clean end (sentinel)
        ("End", None),
    ]
    done = [e for e in events if isinstance(e, ToolCallDone)]
    assert done[0].call == ToolCall(index=0, id="a", name="f", arguments="{}")


def test_no_tool_call_done_when_truncated() -> None:
    events, reply = run(frame(chunk(ch(tool_calls=[tc(0, "a", "f", '{"x":')])), done=False))
    assert reply.outcome is Outcome.TRUNCATED
    assert not [e for e in events if isinstance(e, ToolCallDone)]
    assert reply.choices[0].tool_calls[0].arguments == '{"x":'  # kept


# --------------------------------------------------------------------------- errors, frames


@pytest.mark.parametrize(
    ("payload", "message", "code", "etype", "param"),
    [
        ({"error": {"message": "boom", "type": "server_error", "code": "x1", "param": "p"}},
         "boom", "x1", "server_error", "p"),
        ({"error": "plain string error"}, "plain string error", None, None, None),
        ({"object": "error", "message": "Engine loop has died", "type": "InternalServerError",
          "code": 500}, "Engine loop has died", "500", "InternalServerError", None),
        ({"error": {"code": 429}}, '{"code":429}', "429", None, None),
    ],
    ids=["openai", "string", "vllm-flat", "no-message"],
)
def test_error_payload(payload: dict[str, Any], message: str, code: str | None,
                       etype: str | None, param: str | None) -> None:
    events, reply = run(frame(chunk(ch(content="partial")), payload))
    err = [e for e in events if isinstance(e, ErrorEvent)]
    assert [(e.message, e.code, e.error_type, e.param) for e in err] == [
        (message, code, etype, param)]
    assert err[0].raw == payload
    assert reply.text == "partial"  # the partial reply is kept
    assert reply.error is not None and reply.error.message == message
    assert reply.error.code == code and reply.error.type == etype
    assert reply.outcome is Outcome.FAILED
    assert reply.stream_end is Outcome.DONE  # the sentinel still arrived
    end = events[-1]
    assert isinstance(end, End) and end.outcome is Outcome.FAILED
    assert end.reason == "error payload (sentinel)"


def test_error_then_eof_without_sentinel() -> None:
    _, reply = run(frame(chunk(ch(content="a")), {"error": {"message": "x"}}, done=False))
    assert reply.outcome is Outcome.FAILED and reply.stream_end is Outcome.TRUNCATED


def test_openrouter_error_chunk_with_finish_reason_error() -> None:
    _, reply = run(frame(
        chunk(ch(content="Hel")),
        chunk(ch(content="", finish="error"), error={"code": 502, "message": "Provider down"}),
        done=False,
    ))
    assert reply.choices[0].finish_reason == "error"
    assert reply.error is not None and reply.error.message == "Provider down"
    assert reply.outcome is Outcome.FAILED and reply.stream_end is Outcome.FINISHED


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"error": {"message": "overloaded", "type": "overloaded_error"}}', "overloaded"),
        (b'{"message": "flat"}', "flat"),
        (b"Internal Server Error", "Internal Server Error"),
    ],
)
def test_sse_error_event(data: bytes, message: str) -> None:
    body = frame(chunk(ch(content="a"))) .replace(b"data: [DONE]\n\n", b"")
    body += b"event: error\ndata: " + data + b"\n\n"
    events, reply = run(body)
    assert [e.message for e in events if isinstance(e, ErrorEvent)] == [message]
    assert reply.outcome is Outcome.FAILED and reply.text == "a"


def test_invalid_frame_is_skipped_and_counted_and_the_stream_goes_on() -> None:
    body = frame(chunk(ch(content="a")), b'{"choices": [', b"[1, 2]",
                 chunk(ch(content="b", finish="stop")))
    events, reply = run(body)
    skipped = [e for e in events if isinstance(e, SkippedFrame)]
    assert [s.reason.split(":")[0] for s in skipped] == ["invalid JSON", "not a JSON object"]
    assert skipped[0].data == '{"choices": ['
    assert reply.skipped_frames == 2 and reply.text == "ab"
    assert reply.outcome is Outcome.DONE


def test_skipped_frame_excerpt_is_short() -> None:
    events, _ = run(frame(b"{" + b"x" * 1000))
    skipped = [e for e in events if isinstance(e, SkippedFrame)]
    assert len(skipped[0].data) == 200


def test_strict_mode_raises_frame_decode_error() -> None:
    with pytest.raises(FrameDecodeError) as info:
        run(frame(chunk(ch(content="a")), b"{nope"), strict=True)
    assert info.value.data == "{nope"


def test_empty_data_frames_are_not_errors() -> None:
    _, reply = run(b"data:\n\ndata: \n\n" + frame(chunk(ch(content="a"))), strict=True)
    assert reply.skipped_frames == 0 and reply.text == "a"


# --------------------------------------------------------------------------- sentinel, outcome


@pytest.mark.parametrize("sentinel", [b"data: [DONE]", b"data:  [DONE] ", b"data:[DONE]\r"])
def test_sentinel_variants_and_nothing_after_it(sentinel: bytes) -> None:
    body = frame(chunk(ch(content="a", finish="stop")), done=False) + sentinel + b"\n\n"
    body += frame(chunk(ch(content="AFTER")), {"error": {"message": "late"}})
    parser = StreamParser()
    events = parser.feed(body)
    assert parser.finished and parser.done
    assert isinstance(events[-1], End) and events[-1].reason == "sentinel"
    assert parser.feed(b"data: {}\n\n") == [] and parser.close() == []
    reply = parser.reply
    assert reply.text == "a" and reply.error is None and reply.outcome is Outcome.DONE
    assert reply.bytes == len(body) + len(b"data: {}\n\n")


def test_sentinel_is_never_parsed_as_json() -> None:
    _, reply = run(frame(chunk(ch(content="a", finish="stop"))), strict=True)
    assert reply.skipped_frames == 0 and reply.outcome is Outcome.DONE


def test_finished_without_sentinel() -> None:
    events, reply = run(frame(chunk(ch(0, content="a"), ch(1, content="b")),
                              chunk(ch(0, finish="stop"), ch(1, finish="length")), done=False))
    assert reply.outcome is Outcome.FINISHED and reply.end_reason == "eof"
    assert events[-1] == End(Outcome.FINISHED, "eof")


def test_truncated_when_a_choice_has_no_finish_reason() -> None:
    _, reply = run(frame(chunk(ch(0, content="a"), ch(1, content="b")),
                         chunk(ch(0, finish="stop")), done=False))
    assert reply.outcome is Outcome.TRUNCATED
    assert [c.text for c in reply.choices] == ["a", "b"]


def test_truncated_when_nothing_arrived() -> None:
    assert replay([b""]).outcome is Outcome.TRUNCATED
    assert replay([b": keep-alive\n\n"]).outcome is Outcome.TRUNCATED


def test_payload_cut_at_eof_is_dropped_silently_and_truncates() -> None:
    body = frame(chunk(ch(content="a", finish="stop")), done=False)
    body += b'data: {"choices": [], "usage": {"prompt_tok'
    events, reply = run(body)
    assert reply.skipped_frames == 0 and not [e for e in events if isinstance(e, SkippedFrame)]
    assert reply.outcome is Outcome.TRUNCATED and reply.end_reason == "eof mid-event"
    assert reply.text == "a"  # every delta kept


def test_complete_final_event_without_blank_line_still_counts() -> None:
    body = frame(chunk(ch(content="a")), done=False) + b'data: {"choices": [{"index": 0, ' \
        b'"delta": {}, "finish_reason": "stop"}]}'
    _, reply = run(body)
    assert reply.outcome is Outcome.FINISHED and reply.choices[0].finish_reason == "stop"
    _, reply = run(frame(chunk(ch(content="a", finish="stop")), done=False) + b"data: [DONE]")
    assert reply.outcome is Outcome.DONE


def test_cancel_and_fail_end_once() -> None:
    parser = StreamParser()
    parser.feed(frame(chunk(ch(content="a")), done=False))
    assert not parser.finished and parser.saw_content
    assert parser.reply.outcome is None
    events = parser.cancel("user pressed stop")
    assert events == [End(Outcome.CANCELLED, "user pressed stop")]
    assert parser.cancel("again") == [] and parser.fail("x") == [] and parser.close() == []
    assert parser.reply.outcome is Outcome.CANCELLED and parser.reply.text == "a"

    parser = StreamParser()
    parser.feed(frame(chunk(ch(content="a")), done=False))
    assert parser.fail("connection reset", ConnectionResetError()) == [
        End(Outcome.FAILED, "connection reset")]
    assert parser.reply.outcome is Outcome.FAILED and parser.reply.error is None


def test_close_with_a_transport_cause() -> None:
    parser = StreamParser()
    parser.feed(frame(chunk(ch(content="a")), done=False))
    (end,) = parser.close(cause=ConnectionResetError("peer reset"))
    assert end == End(Outcome.TRUNCATED, "eof: ConnectionResetError: peer reset")


# --------------------------------------------------------------------------- parser surface


def test_feed_sse_and_counters() -> None:
    parser = StreamParser()
    parser.feed(b": keep-alive\n\n: ping\n\n" + frame(chunk(ch(content="a")), done=False))
    parser.feed_sse(ServerSentEvent(data=json.dumps(chunk(ch(content="b", finish="stop")))))
    parser.feed_sse(ServerSentEvent(data="[DONE]"))
    reply = parser.reply
    assert reply.text == "ab" and reply.outcome is Outcome.DONE
    assert reply.heartbeats == 2 and reply.events == 3 and reply.skipped_frames == 0


def test_feed_chunk_accepts_mappings_and_model_dump_objects() -> None:
    from fluxstream._wire import ChatCompletionChunk

    parser = StreamParser()
    parser.feed_chunk(chunk(ch(content="a")))
    parser.feed_chunk(ChatCompletionChunk.model_validate(chunk(ch(content="b", finish="stop"))))
    with pytest.raises(TypeError):
        parser.feed_chunk(42)
    assert parser.close() == [End(Outcome.FINISHED, "eof")]
    assert parser.reply.text == "ab"


def test_feed_completion() -> None:
    parser = StreamParser()
    body = {
        "id": "cmpl", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Sure.", "reasoning_content": "r",
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "f", "arguments": '{"a": 1}'}}]}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    }
    events = parser.feed_completion(body)
    assert not parser.finished and parser.done
    events += parser.close()
    assert isinstance(events[-1], End) and events[-1] == End(Outcome.DONE, "completion")
    reply = parser.reply
    assert reply.text == "Sure." and reply.choices[0].reasoning == "r"
    assert reply.choices[0].tool_calls[0].parse_arguments() == {"a": 1}
    assert reply.usage is not None and reply.usage.total_tokens == 3


def test_new_connection_keeps_the_reply_and_offsets() -> None:
    parser = StreamParser()
    parser.feed(b"id: 7\nretry: 1500\n" + frame(chunk(ch(content="ab")), done=False)[:-1])
    parser.feed(b"\n")
    parser.feed(b"data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"cut")
    parser.new_connection()  # the partial event of the old connection is gone
    assert parser.last_event_id == "7" and parser.reconnection_time == 1500
    events = parser.feed(frame(chunk(ch(content="cd", finish="stop"))))
    assert [(e.offset, e.text) for e in events if isinstance(e, TextDelta)] == [(2, "cd")]
    assert parser.reply.text == "abcd" and parser.reply.outcome is Outcome.DONE


def test_reset_starts_a_new_generation() -> None:
    parser = StreamParser(content_key="key-1")
    parser.feed(frame(chunk(ch(content="old")), done=False))
    assert parser.reset(2, "restart after drop") == [Reset("key-1", 2, "restart after drop")]
    events = parser.feed(frame(chunk(ch(content="new"))))
    assert [(e.offset, e.text) for e in events if isinstance(e, TextDelta)] == [(0, "new")]
    assert parser.reply.text == "new" and parser.reply.content_key == "key-1"


def test_unknown_format_is_rejected() -> None:
    with pytest.raises(ValueError, match="chat_completions"):
        StreamParser(format="smoke-signals")


def test_content_key_is_generated_when_missing() -> None:
    a, b = StreamParser(), StreamParser()
    assert a.content_key and a.content_key != b.content_key
    assert a.reply.content_key == a.content_key


def test_snapshots_are_cheap_and_stable() -> None:
    parser = StreamParser()
    parser.feed(frame(chunk(ch(0, content="a"), ch(1, content="b")), done=False))
    first = parser.reply
    again = parser.reply
    assert first == again and first.choices[0] is again.choices[0]  # nothing rebuilt
    parser.feed(frame(chunk(ch(1, content="c")), done=False))
    later = parser.reply
    assert later.choices[1].text == "bc" and first.choices[1].text == "b"  # old one unchanged


# --------------------------------------------------------------------------- events as data


ALL_EVENTS: list[Event] = [
    TextDelta("k", 0, 0, "hi"),
    ReasoningDelta("k", 1, 3, "hm"),
    RefusalDelta("k", 0, 0, "no"),
    ToolCallDelta("k", 0, 1, "id", "f", '{"a"', 0),
    ToolCallDone("k", 0, ToolCall(index=1, id="id", name="f", arguments="{}")),
    Finish("k", 0, "stop"),
    UsageUpdate(Usage(prompt_tokens=1, total_tokens=2, prompt_cache_hit_tokens=1)),
    ErrorEvent("boom", "500", "server_error", None, {"error": {"message": "boom"}}),
    SkippedFrame("invalid JSON", "{x"),
    Reset("k", 1, "restart"),
    End(Outcome.DONE, "sentinel"),
]


@pytest.mark.parametrize("event", ALL_EVENTS, ids=lambda e: e.type)
def test_events_round_trip_through_type_adapter(event: Event) -> None:
    plain = pydantic.TypeAdapter(Event)
    assert plain.validate_python(plain.dump_python(event)) == event
    tagged = pydantic.TypeAdapter(TypedEvent)
    dumped = tagged.dump_python(event)
    assert dumped["type"] == event.type
    assert tagged.validate_python(dumped) == event
    assert tagged.validate_json(tagged.dump_json(event)) == event


def test_events_are_frozen_and_slotted() -> None:
    ev = TextDelta("k", 0, 0, "x")
    with pytest.raises(AttributeError):
        ev.text = "y"  # type: ignore[misc]
    assert not hasattr(ev, "__dict__")


def test_reply_serialises() -> None:
    _, reply = run(frame(chunk(ch(content="a", finish="stop"))))
    data = reply.model_dump(mode="json")
    assert data["outcome"] == "done" and data["choices"][0]["text"] == "a"
    assert Reply.model_validate(data) == reply


# --------------------------------------------------------------------------- memory


def test_memory_grows_with_the_reply_not_with_the_number_of_chunks() -> None:
    one = frame(chunk(ch(content="x")), done=False)
    parser = StreamParser()
    parser.feed(one)  # warm up caches
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(20_000):
            parser.feed(one)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    # 20,000 characters of text; raw chunks (~100 bytes each) or one str object per delta
    # (~50 bytes each) would be megabytes.
    assert grown < 200_000, grown
    assert parser.reply.text == "x" * 20_001
