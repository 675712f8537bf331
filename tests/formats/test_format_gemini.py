"""Gemini streams: every recorded ``gem-*`` stream assembles exactly however it is read; each
``finishReason``'s unified stop and outcome; a cut stream is ``truncated``; the mapping rules
(candidates by index, thoughts, whole and streamed function calls, usage, errors inside and
outside ``data:`` lines, a blocked prompt) and hostile frames, skipped and counted."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from fixture_files import require
from format_corpus import MODES, check_events_rebuild_reply, reads, run
from gemini_corpus import as_corpus, check, gemini_expected, gemini_streams
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sse_frames import frames

from fluxstream._events import (
    ErrorEvent,
    Finish,
    Outcome,
    ReasoningBlock,
    SkippedFrame,
    TextDelta,
    ToolCallDelta,
)
from fluxstream._limits import StreamLimits
from fluxstream._parser import StreamParser, replay
from fluxstream.errors import FrameDecodeError, LimitExceededError, ResumeTokenError

FILES = gemini_streams()
IDS = [p.stem for p in FILES]

STOPS: dict[str, str | None] = {
    "gem-firebase-basic-reply-short": "stop",
    "gem-firebase-citations": "stop",
    "gem-firebase-code-execution": "stop",
    "gem-firebase-prompt-blocked": None,
    "gem-firebase-thought-function-call": "tool_calls",
    "gem-firebase-thought-summary": "stop",
    "gem-firebase-vertex-error-raw-json-midstream": "stop",
    "gem-firebase-vertex-safety-stop": "content_filter",
    "gem-firebase-vertex-utf8-finish-every-event": "stop",
    "gem-genai-event-loop-ok": "stop",
    "gem-genai-httpx2-no-finish": None,
    "gem-google-cookbook-stop-every-event": "stop",
    "gem-litellm-llamacpp-max-tokens": "length",
    "gem-vercel-vertex-partial-args": "tool_calls",
}
#: Parts each recording legitimately skips and counts (Google ran the code itself).
SKIPPED = {"gem-firebase-code-execution": 2}


def test_corpus_is_complete() -> None:
    assert sorted(STOPS) == IDS
    for path in FILES:
        record = gemini_expected(path)
        assert record["source"].strip() and record["licence"].strip()
    assert (require(FILES[0].parent / "README.md")).is_file()


@pytest.mark.parametrize("fmt", ["gemini", "auto"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_recorded_stream_assembles_exactly(path: Path, mode: str, fmt: str) -> None:
    body = require(path).read_bytes()
    reply = replay(reads(body, mode), format=fmt)
    check(reply, gemini_expected(path))
    assert reply.bytes == len(body)
    assert reply.skipped_frames == SKIPPED.get(path.stem, 0)
    assert [c.stop for c in reply.choices] == ([STOPS[path.stem]] if reply.choices else [])


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_events_rebuild_the_reply(path: Path) -> None:
    events, parser = run([require(path).read_bytes()], format="gemini")
    check_events_rebuild_reply(events, parser.reply)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_strict_mode_accepts_every_recorded_stream(path: Path) -> None:
    check(replay([require(path).read_bytes()], format="gemini", strict=True),
          gemini_expected(path))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_stream_cut_anywhere_before_its_last_event_is_truncated(data: st.DataObject) -> None:
    """A body cut before the event that finished its last candidate never ends ``done``: the
    part that arrived is kept and the reply says it is partial."""
    path = data.draw(st.sampled_from([p for p in FILES if "error" not in p.stem
                                      and "every-event" not in p.stem]), label="fixture")
    body = require(path).read_bytes()
    last = body.rstrip().rfind(b"\ndata:") + 1  # where the last event begins
    cut = data.draw(st.integers(1, max(1, last - 1)), label="cut")
    reply = replay([body[:cut]], format="gemini")
    assert reply.stream_end is Outcome.TRUNCATED or reply.outcome is Outcome.FAILED
    whole = as_corpus(replay([body], format="gemini"))
    for index, choice in as_corpus(reply)["choices"].items():
        assert whole["choices"][index]["text"].startswith(choice["text"])


def test_old_vertex_stop_on_every_event_cut_mid_event_is_truncated() -> None:
    body = require(FILES[IDS.index("gem-firebase-vertex-utf8-finish-every-event")]).read_bytes()
    reply = replay([body[:-20]], format="gemini")
    assert reply.stream_end is Outcome.TRUNCATED and reply.end_reason is not None


# --------------------------------------------------------------------------- mapping


#: Gemini's framing: ``data:`` lines ended by ``\r\n`` unless ``eol`` says otherwise.
frame = partial(frames, eol="\r\n")


def cand(*parts: dict[str, Any], finish: str | None = None, index: int | None = None,
         **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}, **extra}
    if finish is not None:
        out["finishReason"] = finish
    if index is not None:
        out["index"] = index
    return out


def resp(*candidates: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"candidates": list(candidates), **extra}


def go(*payloads: dict[str, Any] | str, **kwargs: Any):  # type: ignore[no-untyped-def]
    events, parser = run([frame(*payloads)], format="gemini", **kwargs)
    check_events_rebuild_reply(events, parser.reply)
    return events, parser.reply


@pytest.mark.parametrize(
    ("raw", "stop"),
    [("STOP", "stop"), ("MAX_TOKENS", "length"), ("SAFETY", "content_filter"),
     ("RECITATION", "content_filter"), ("BLOCKLIST", "content_filter"),
     ("PROHIBITED_CONTENT", "content_filter"), ("SPII", "content_filter"),
     ("MALFORMED_FUNCTION_CALL", "error"), ("OTHER", "other"),
     ("FINISH_REASON_UNSPECIFIED", "other"), ("SOMETHING_NEW", "other")],
)
def test_each_finish_reason_has_its_unified_stop_and_ends_done(raw: str, stop: str) -> None:
    events, reply = go(resp(cand({"text": "a"})), resp(cand({"text": "b"}, finish=raw)))
    c = reply.choices[0]
    assert (c.text, c.finish_reason, c.stop) == ("ab", raw, stop)
    assert next(e for e in events if isinstance(e, Finish)).stop == stop
    assert reply.outcome is Outcome.DONE and reply.end_reason == "eof after finishReason"


def test_stop_after_a_function_call_is_tool_calls() -> None:
    _, reply = go(resp(cand({"functionCall": {"name": "f", "args": {"x": 1}, "id": "c1"}},
                            finish="STOP")))
    c = reply.choices[0]
    assert (c.finish_reason, c.stop) == ("STOP", "tool_calls")
    (call,) = c.tool_calls
    assert (call.index, call.id, call.name, call.arguments) == (0, "c1", "f", '{"x":1}')


def test_no_finish_reason_is_truncated_and_an_empty_body_too() -> None:
    assert go(resp(cand({"text": "a"})))[1].outcome is Outcome.TRUNCATED
    assert replay([b""], format="gemini").outcome is Outcome.TRUNCATED
    assert go(resp(usageMetadata={"promptTokenCount": 1}))[1].outcome is Outcome.TRUNCATED


def test_a_transport_error_is_never_done() -> None:
    parser = StreamParser(format="gemini")
    parser.feed(frame(resp(cand({"text": "a"}, finish="STOP"))))
    parser.close(cause=ConnectionResetError("reset"))
    assert parser.reply.stream_end is Outcome.TRUNCATED


def test_candidates_keyed_by_index_not_position_and_all_must_finish() -> None:
    _, reply = go(
        resp(cand({"text": "one "}, index=1), cand({"text": "zero "})),
        resp(cand({"text": "0"}, finish="STOP", index=0)),
    )
    assert [(c.index, c.text, c.finish_reason) for c in reply.choices] == [
        (0, "zero 0", "STOP"), (1, "one ", None)]
    assert reply.outcome is Outcome.TRUNCATED
    _, reply = go(resp(cand({"text": "a"}, index=1, finish="MAX_TOKENS"),
                       cand({"text": "b"}, index=0, finish="STOP")))
    assert reply.outcome is Outcome.DONE
    assert [c.stop for c in reply.choices] == ["stop", "length"]


def test_thoughts_are_reasoning_and_signatures_are_kept_not_shown() -> None:
    _, reply = go(
        resp(cand({"text": "hmm", "thought": True})),
        resp(cand({"text": "Hi", "thoughtSignature": "SIG1"})),
        resp(cand({"text": "", "thoughtSignature": "SIG2"}, finish="STOP")),
    )
    c = reply.choices[0]
    assert (c.text, c.reasoning) == ("Hi", "hmm")
    assert c.reasoning_blocks == [
        {"type": "thought_signature", "thoughtSignature": "SIG1"},
        {"type": "thought_signature", "thoughtSignature": "SIG2"}]
    assert "SIG" not in c.text + (c.reasoning or "")


def test_function_calls_whole_with_and_without_id_and_args() -> None:
    _, reply = go(resp(cand({"functionCall": {"name": "now"}},
                            {"functionCall": {"name": "get", "args": {"city": "Zürich"},
                                              "id": "abc"}, "thoughtSignature": "S"},
                            finish="STOP")))
    calls = reply.choices[0].tool_calls
    assert [(t.index, t.id, t.name, t.parse_arguments()) for t in calls] == [
        (0, None, "now", {}), (1, "abc", "get", {"city": "Zürich"})]
    assert reply.choices[0].reasoning_blocks == [
        {"type": "thought_signature", "thoughtSignature": "S", "call": 1}]


def _streamed(*pieces: dict[str, Any], name: str = "f") -> list[dict[str, Any]]:
    out = [resp(cand({"functionCall": {"name": name, "willContinue": True}}))]
    out += [resp(cand({"functionCall": {"partialArgs": [p], "willContinue": True}}))
            for p in pieces]
    out.append(resp(cand({"functionCall": {}})))
    return out


def test_partial_args_stream_as_growing_json_text() -> None:
    payloads = _streamed(
        {"jsonPath": "$.city", "stringValue": "Zü", "willContinue": True},
        {"jsonPath": "$.city", "stringValue": "rich"},
        {"jsonPath": "$.days", "numberValue": 3},
        {"jsonPath": "$.opts.metric", "boolValue": True},
        {"jsonPath": "$.opts.tags[0]", "stringValue": "a\"b"},
        {"jsonPath": "$.opts.tags[1]", "nullValue": "NULL_VALUE"},
        {"jsonPath": "$['odd key']", "numberValue": 1.5},
    )
    events, reply = go(*payloads, resp(cand({"text": ""}, finish="STOP")))
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert not any(d.replace for d in deltas) and len(deltas) > 5
    (call,) = reply.choices[0].tool_calls
    assert call.parse_arguments() == {"city": "Zürich", "days": 3,
                                      "opts": {"metric": True, "tags": ['a"b', None]},
                                      "odd key": 1.5}
    # Partial arguments show while they arrive.
    parser = StreamParser(format="gemini")
    parser.feed(frame(*payloads[:2]))
    assert parser.partial_arguments(0, 0) == {"city": "Zü"}


def test_partial_args_out_of_order_are_replaced_whole_at_the_close() -> None:
    events, reply = go(*_streamed({"jsonPath": "$.a", "numberValue": 1},
                                  {"jsonPath": "$.b", "numberValue": 2},
                                  {"jsonPath": "$.a", "numberValue": 3}),
                       resp(cand({"text": ""}, finish="STOP")))
    assert any(isinstance(e, ToolCallDelta) and e.replace for e in events)
    assert reply.choices[0].tool_calls[0].parse_arguments() == {"a": 3, "b": 2}


def test_a_finish_closes_a_streamed_call_and_a_new_name_opens_another() -> None:
    _, reply = go(
        resp(cand({"functionCall": {"name": "f", "willContinue": True}})),
        resp(cand({"functionCall": {"partialArgs": [{"jsonPath": "$.x", "stringValue": "1",
                                                     "willContinue": True}],
                                    "willContinue": True}})),
        resp(cand({"functionCall": {"name": "g", "args": {}}}, finish="STOP")),
    )
    calls = reply.choices[0].tool_calls
    assert [(t.name, t.parse_arguments()) for t in calls] == [("f", {"x": "1"}), ("g", {})]


def test_usage_grows_keeps_its_names_and_fills_the_common_ones() -> None:
    first = {"promptTokenCount": 7, "totalTokenCount": 7}
    last = {"promptTokenCount": 7, "candidatesTokenCount": 10, "thoughtsTokenCount": 5,
            "cachedContentTokenCount": 2, "totalTokenCount": 22}
    _events, reply = go(resp(cand({"text": "a"}), usageMetadata=first),
                       resp(cand({"text": "b"}), usageMetadata=first),
                       resp(cand({"text": "c"}, finish="STOP"), usageMetadata=last))
    assert len(reply.usage_updates) == 2  # unchanged snapshots are not repeated
    usage = reply.usage
    assert usage is not None and usage.model_dump(exclude_unset=True) == last
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (7, 15, 22)
    assert usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 5
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 2


def test_model_version_and_response_id() -> None:
    _, reply = go(resp(cand({"text": "a"}, finish="STOP"), modelVersion="gemini-x",
                       responseId="r1"))
    assert (reply.model, reply.id) == ("gemini-x", "r1")


def test_prompt_blocked_is_an_error_not_an_empty_success() -> None:
    _events, reply = go({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT",
                                           "blockReasonMessage": "no"}})
    assert reply.choices == [] and reply.outcome is Outcome.FAILED
    assert reply.stream_end is Outcome.DONE
    assert reply.error is not None and reply.error.code == "PROHIBITED_CONTENT"
    assert reply.error.message == "prompt blocked: PROHIBITED_CONTENT (no)"


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_an_error_object_outside_data_lines_fails_the_stream(eol: str) -> None:
    error = {"error": {"code": 503, "message": "The model is overloaded.",
                       "status": "UNAVAILABLE"}}
    raw = json.dumps(error, indent=2).replace("\n", eol) + eol
    body = frame(resp(cand({"text": "a"})), eol=eol) + raw.encode()
    for mode in MODES:
        reply = replay(reads(body, mode), format="gemini")
        assert reply.outcome is Outcome.FAILED and reply.text == "a", mode
        assert reply.error is not None
        assert (reply.error.message, reply.error.code, reply.error.type) == (
            "The model is overloaded.", "503", "UNAVAILABLE")


def test_an_error_event_in_data_lines_and_a_whole_error_body() -> None:
    error = {"error": {"code": 429, "message": "Quota", "status": "RESOURCE_EXHAUSTED"}}
    _, reply = go(resp(cand({"text": "a"})), error)
    assert reply.outcome is Outcome.FAILED and reply.error is not None
    assert (reply.error.code, reply.error.type) == ("429", "RESOURCE_EXHAUSTED")
    parser = StreamParser(format="gemini")
    parser.feed_completion(error)
    parser.close()
    assert parser.reply.outcome is Outcome.FAILED


def test_a_whole_response_body() -> None:
    parser = StreamParser(format="gemini")
    parser.feed_completion(resp(cand({"text": "Hello"}, finish="STOP"),
                                usageMetadata={"promptTokenCount": 1}))
    parser.close()
    assert parser.reply.text == "Hello" and parser.reply.outcome is Outcome.DONE


def test_a_done_sentinel_a_proxy_appends_ends_the_stream() -> None:
    _, reply = go(resp(cand({"text": "a"}, finish="STOP")), "[DONE]")
    assert reply.outcome is Outcome.DONE and reply.end_reason == "sentinel"


def test_surrogate_halves_split_across_events_are_joined() -> None:
    body = (b'data: {"candidates":[{"content":{"parts":[{"text":"a\\ud83d"}]}}]}\n\n'
            b'data: {"candidates":[{"content":{"parts":[{"text":"\\ude00b"}]},'
            b'"finishReason":"STOP"}]}\n\n')
    for mode in MODES:
        reply = replay(reads(body, mode), format="gemini")
        assert reply.text == "a😀b" and reply.outcome is Outcome.DONE


def test_a_half_still_held_at_the_finish_is_replaced() -> None:
    body = (b'data: {"candidates":[{"content":{"parts":[{"text":"a\\ud83d"}]},'
            b'"finishReason":"STOP"}]}\n\n')
    reply = replay([body], format="gemini")
    assert reply.text == "a\ufffd"


# --------------------------------------------------------------------------- hostile input


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ("[1, 2]", "not a JSON object"),
        ("{not json", "invalid JSON"),
        ({"candidates": {"0": {}}}, "candidates is not a list"),
        ({"candidates": [7]}, "not an object"),
        ({"candidates": [{"index": -1}]}, "is not a count"),
        ({"candidates": [{"index": "0"}]}, "is not a count"),
        ({"candidates": [{"index": True}]}, "is not a count"),
        ({"candidates": [{"content": {"parts": "x"}}]}, "parts is not a list"),
        ({"candidates": [{"content": {"parts": ["x"]}}]}, "a part that is not an object"),
        ({"candidates": [{"content": {"parts": [{"hologram": {}}]}}]}, "unknown kind"),
        ({"candidates": [{"content": {"parts": [{"inlineData": {"data": "AA=="}}]}}]},
         "inlineData"),
        ({"candidates": [{"content": {"parts": [{"functionCall": []}]}}]}, "not an object"),
        ({"candidates": [{"content": {"parts": [{"functionCall": {}}]}}]}, "of no call"),
        ({"candidates": [{"content": {"parts": [{"thoughtSignature": 5}]}}]}, "not a string"),
        ({"usageMetadata": [1]}, "usageMetadata is not an object"),
        ({"usageMetadata": {"promptTokenCount": 1, "total_tokens": "x"}}, "wrong type"),
        ({"choices": [{"delta": {"content": "x"}}]}, "another format"),
    ],
)
def test_hostile_frames_are_skipped_typed_and_counted(payload: Any, reason: str) -> None:
    events, reply = go(payload, resp(cand({"text": "ok"}, finish="STOP")))
    skipped = [e for e in events if isinstance(e, SkippedFrame)]
    assert len(skipped) == 1 and reason in skipped[0].reason, skipped
    assert reply.skipped_frames == 1
    assert reply.text == "ok" and reply.outcome is Outcome.DONE


def test_strict_mode_raises_on_a_frame_that_is_not_an_object() -> None:
    with pytest.raises(FrameDecodeError):
        replay([frame("[1]")], format="gemini", strict=True)


def test_bad_partial_args_pieces_are_skipped_and_counted() -> None:
    _events, reply = go(*_streamed({"jsonPath": "id", "stringValue": "x"},
                                  {"jsonPath": "$.a", "stringValue": 5},
                                  {"jsonPath": "$.b", "numberValue": 1},
                                  {"jsonPath": "$.b[0]", "numberValue": 2},
                                  {"jsonPath": "$.c"}),
                       resp(cand({"text": ""}, finish="STOP")))
    assert reply.skipped_frames == 4
    assert reply.choices[0].tool_calls[0].parse_arguments() == {"b": 1}


def test_raw_lines_that_are_not_json_are_skipped_and_counted() -> None:
    body = frame(resp(cand({"text": "a"}, finish="STOP"))) + b"garbage\n{\"x\": [1}\n"
    reply = replay([body], format="gemini")
    assert reply.skipped_frames == 2 and reply.text == "a"
    assert reply.outcome is Outcome.DONE


def test_a_raw_object_cut_by_the_end_of_the_body_is_truncated() -> None:
    body = frame(resp(cand({"text": "a"}, finish="STOP"))) + b'{\n  "error": {\n'
    reply = replay([body], format="gemini")
    assert reply.stream_end is Outcome.TRUNCATED and reply.text == "a"


def test_a_big_frame_of_tiny_objects_is_refused_undecoded() -> None:
    payload = '{"candidates":[' + ",".join(["{}"] * 40_000) + "]}"
    _, reply = go(payload, resp(cand({"text": "ok"}, finish="STOP")))
    assert reply.skipped_frames == 1 and reply.text == "ok"


def test_limits_reach_the_format() -> None:
    limits = StreamLimits(max_choices=2, max_tool_calls=2)
    with pytest.raises(LimitExceededError):
        replay([frame(resp(*(cand({"text": "a"}, index=i) for i in range(3))))],
               format="gemini", limits=limits)
    calls = [{"functionCall": {"name": f"f{i}"}} for i in range(3)]
    with pytest.raises(LimitExceededError):
        replay([frame(resp(cand(*calls)))], format="gemini", limits=limits)


def test_error_events_are_typed() -> None:
    events, _ = go({"error": {"code": 500, "message": "boom", "status": "INTERNAL"}})
    (error,) = [e for e in events if isinstance(e, ErrorEvent)]
    assert (error.message, error.code, error.error_type) == ("boom", "500", "INTERNAL")


def test_text_deltas_carry_offsets_per_candidate() -> None:
    events, _ = go(resp(cand({"text": "ab"}), cand({"text": "x"}, index=1)),
                   resp(cand({"text": "c"}, finish="STOP"), cand({"text": "y"}, index=1,
                                                                  finish="STOP")))
    texts = [(e.choice, e.offset, e.text) for e in events if isinstance(e, TextDelta)]
    assert texts == [(0, 0, "ab"), (1, 0, "x"), (0, 2, "c"), (1, 1, "y")]
    assert not any(isinstance(e, ReasoningBlock) for e in events)


# --------------------------------------------------------------------------- resume


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_a_token_after_any_event_resumes_exactly(path: Path) -> None:
    """A token taken after any event (mid thought, mid streamed arguments, with surrogate
    halves held) and a parser made from it reading the rest give the reply read in one go."""
    from resume_tokens import content, frames, read, resumed

    pieces = frames(require(path).read_bytes())
    whole = content(read(pieces, "gemini"))
    for cut in range(1, len(pieces)):
        reply = resumed(pieces, cut, "gemini")
        assert reply is not None and content(reply) == whole, cut


def test_a_token_between_the_halves_of_an_emoji_and_mid_arguments() -> None:
    from resume_tokens import content, read, resumed

    pieces = [
        b'data: {"candidates":[{"content":{"parts":[{"text":"a\\ud83d"}]}}]}\n\n',
        *[frame(p, eol="\n") for p in _streamed(
            {"jsonPath": "$.s", "stringValue": "x", "willContinue": True},
            {"jsonPath": "$.s", "stringValue": "y"}, {"jsonPath": "$.n[0]", "numberValue": 2},
            {"jsonPath": "$.s", "stringValue": "z"})],
        b'data: {"candidates":[{"content":{"parts":[{"text":"\\ude00"}]},'
        b'"finishReason":"STOP"}]}\n\n',
    ]
    whole = read(pieces, "gemini")
    assert whole.text == "a😀" and whole.outcome is Outcome.DONE
    for cut in range(1, len(pieces)):
        reply = resumed(pieces, cut, "gemini")
        assert reply is not None and content(reply) == content(whole), cut


def test_a_damaged_wire_state_never_crashes() -> None:
    """A damaged state is a typed refusal of the token (``ResumeTokenError``); no state at
    all is a token of a stream that wrote none, and resumes."""
    from resume_tokens import frames, token

    pieces = frames(require(FILES[IDS.index("gem-vercel-vertex-partial-args")]).read_bytes())
    first = StreamParser(content_key="k", format="gemini")
    for piece in pieces[:4]:
        first.feed(piece)
    state = token(first)
    for wire in (5, {"candidates": {"0": {"open": 1, "pieces": {"stack": [[1]]}}}},
                 {"candidates": {"x": 1, "0": {"open": "1", "signatures": -1}},
                  "held": [[0, "text", 5], "x"], "usage": 3}):
        with pytest.raises(ResumeTokenError):
            StreamParser.from_token({**state, "wire": wire}, format="gemini")
    for wire in (None, state["wire"]):
        second = StreamParser.from_token({**state, "wire": wire}, format="gemini")
        for piece in pieces[4:]:
            second.feed(piece)
        second.close()
        assert second.reply.outcome is not None


def test_a_cut_stream_resumes_by_continuation_without_a_character_twice() -> None:
    """The continuation (the partial text sent back as a ``model`` turn) streams the rest; a
    provider that echoes the end of the prefix has the overlap cut."""
    first = StreamParser(content_key="k", format="gemini")
    first.feed(frame(resp(cand({"text": "Hello, wor"}))))
    first.close()
    assert first.reply.outcome is Outcome.TRUNCATED
    from resume_tokens import token

    second = StreamParser.from_token(token(first), format="gemini")
    assert second.continuable()
    prefix = second.begin_continuation()
    assert prefix == "Hello, wor"
    second.feed(frame(resp(cand({"text": "llo, world"})),
                      resp(cand({"text": "!"}, finish="STOP"))))
    second.close()
    assert second.reply.text == "Hello, world!" and second.reply.outcome is Outcome.DONE


# --------------------------------------------------------------------------- feed_many


def _sses(body: bytes) -> list[Any]:
    from fluxstream.sse import iter_events

    return list(iter_events([body]))


def _bench_like() -> list[bytes]:
    text = [resp(cand({"text": f"w{i} "}), usageMetadata={"promptTokenCount": 3,
                                                          "totalTokenCount": 3 + i},
                 modelVersion="m", responseId="r") for i in range(6)]
    tool = _streamed({"jsonPath": "$.p", "stringValue": "a", "willContinue": True},
                     *({"jsonPath": "$.p", "stringValue": f"\\n{i}\"", "willContinue": True}
                       for i in range(5)),
                     {"jsonPath": "$.p", "stringValue": ""},
                     {"jsonPath": "$.q", "stringValue": "x", "willContinue": True},
                     {"jsonPath": "$.q", "stringValue": "y", "willContinue": True})
    return [frame(*text, resp(cand({"text": "."}, finish="STOP"))),
            frame(*text[:2], *tool, resp(cand({"text": ""}, finish="STOP")))]


@pytest.mark.parametrize("body", [require(p).read_bytes() for p in FILES] + _bench_like(),
                         ids=[*IDS, "bench-text", "bench-tool"])
def test_feed_many_maps_exactly_what_feed_maps(body: bytes) -> None:
    """The in-line mapping of the usual events gives exactly the events, and the state, that
    feeding each event gives."""
    from fluxstream.formats.gemini import GeminiFormat

    sses = _sses(body)
    one, many = GeminiFormat("k"), GeminiFormat("k")
    single: list[Any] = []
    for sse in sses:
        single += one.feed(sse)
    batched: list[Any] = []
    many.feed_many(sses, batched)
    assert batched == single
    assert one.body_ended(True) == many.body_ended(True)
    assert one.resume_state() == many.resume_state()
    assert (one.done, one.skipped, one.id, one.model) == (
        many.done, many.skipped, many.id, many.model)


def test_nested_partial_args_in_the_shape_vertex_streams_them() -> None:
    """The shape of vercel/ai's ``google-vertex-stream-tool-call-arguments-nested`` recording
    (Vertex, gemini-3.1-pro): items of an array of objects, each string closed by an empty
    piece, ``{"functionCall": {"willContinue": true}}`` between the items, and the closing
    ``{"functionCall": {}}`` in the event that carries the finish reason."""
    def piece(path: str, value: str, more: bool = True) -> dict[str, Any]:
        p: dict[str, Any] = {"jsonPath": path, "stringValue": value}
        if more:
            p["willContinue"] = True
        return resp(cand({"functionCall": {"partialArgs": [p], "willContinue": True}}))

    go_on = resp(cand({"functionCall": {"willContinue": True}}))
    payloads: list[dict[str, Any]] = [resp(cand(
        {"functionCall": {"name": "cookRecipe", "willContinue": True}, "thoughtSignature": "S"}))]
    for i, (amount, name) in enumerate([("16 oz", "Noodles"), ("1 lb", "Beef"), ("1", "Egg")]):
        payloads += [piece(f"$.recipe.ingredients[{i}].amount", amount),
                     piece(f"$.recipe.ingredients[{i}].amount", "", False),
                     piece(f"$.recipe.ingredients[{i}].name", name),
                     piece(f"$.recipe.ingredients[{i}].name", "", False), go_on]
    payloads += [piece("$.recipe.name", "Lasagna"), piece("$.recipe.name", "", False),
                 piece("$.recipe.steps[0]", "Preheat to 375°F."),
                 piece("$.recipe.steps[0]", "", False),
                 piece("$.recipe.steps[1]", "Cook the noodles"), piece("$.recipe.steps[1]", "."),
                 piece("$.recipe.steps[1]", "", False),
                 resp(cand({"functionCall": {}}, finish="STOP"))]
    events, reply = go(*payloads)
    assert not any(isinstance(e, ToolCallDelta) and e.replace for e in events)
    (call,) = reply.choices[0].tool_calls
    assert call.name == "cookRecipe" and call.parse_arguments() == {"recipe": {
        "ingredients": [{"amount": "16 oz", "name": "Noodles"}, {"amount": "1 lb", "name": "Beef"},
                        {"amount": "1", "name": "Egg"}],
        "name": "Lasagna", "steps": ["Preheat to 375°F.", "Cook the noodles."]}}
    assert reply.choices[0].stop == "tool_calls" and reply.outcome is Outcome.DONE
