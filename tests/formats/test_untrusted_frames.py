"""Issue 10, sans-IO items: surrogate halves split across frames (1), ``[DONE]`` without a
finish reason (2), untyped exceptions from server-controlled input (5), every usage object
kept (10). Each test failed on the code before its fix."""

from __future__ import annotations

import json
import warnings
from functools import partial
from typing import Any

import pytest
from sse_frames import frames

from fluxstream._events import (
    End,
    Event,
    Finish,
    Outcome,
    ReasoningDelta,
    RefusalDelta,
    SkippedFrame,
    TextDelta,
    ToolCallDelta,
)
from fluxstream._parser import StreamParser
from fluxstream._reply import Reply, ToolCall
from fluxstream.errors import ArgumentsError, FrameDecodeError
from fluxstream.sse import SSEDecoder

#: Raw JSON texts (written by hand, so that escapes stay exactly as a server sent them) as
#: SSE events, ``[DONE]`` last unless ``done=False``.
sse = partial(frames, done=True)


def content(text_json: str, *, index: int = 0, finish: str | None = None,
            field: str = "content") -> str:
    """A chunk whose delta field is the raw JSON string literal ``text_json``."""
    reason = json.dumps(finish)
    return (f'{{"choices":[{{"index":{index},"delta":{{"{field}":{text_json}}},'
            f'"finish_reason":{reason}}}]}}')


def run(data: bytes, **kwargs: Any) -> tuple[list[Event], Reply]:
    parser = StreamParser(**kwargs)
    events = parser.feed(data) + parser.close()
    return events, parser.reply


def has_surrogate(text: str) -> bool:
    return any("\ud800" <= c <= "\udfff" for c in text)


# ---------------------------------------------------------------------------- item 1


def test_surrogate_pair_split_across_frames_is_joined() -> None:
    data = sse(content('"a\\ud83d"'), content('"\\ude42b"', finish="stop"))
    events, reply = run(data)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert [(d.offset, d.text) for d in deltas] == [(0, "a"), (1, "\U0001f642b")]
    assert reply.text == "a\U0001f642b"
    assert reply.outcome is Outcome.DONE and reply.skipped_frames == 0
    assert reply.choices[0].finish_reason == "stop"
    json.loads(reply.model_dump_json())  # serialisable: no lone surrogate anywhere


def test_halves_alone_in_their_frames_make_one_code_point() -> None:
    data = sse(content('"\\ud83d"'), content('"\\ude42"'), content('"!"', finish="stop"))
    events, reply = run(data)
    deltas = [(e.offset, e.text) for e in events if isinstance(e, TextDelta)]
    assert deltas == [(0, "\U0001f642"), (1, "!")]
    assert reply.text == "\U0001f642!"


def test_a_pair_in_one_frame_still_takes_the_fast_path() -> None:
    _, reply = run(sse(content('"\\ud83d\\ude42"', finish="stop")))
    assert reply.text == "\U0001f642"


@pytest.mark.parametrize(
    ("frames", "expected"),
    [
        # a high half followed by text that is not a low half
        ([content('"\\ud83d"'), content('"x"', finish="stop")], "\ufffdx"),
        # a lone low half
        ([content('"a\\ude42b"', finish="stop")], "a\ufffdb"),
        # a high half and then the finish: replaced before the Finish
        ([content('"a\\ud83d"'), content('""', finish="stop")], "a\ufffd"),
        # a high half in the middle of a string
        ([content('"a\\ud83db"', finish="stop")], "a\ufffdb"),
    ],
)
def test_lone_surrogates_never_reach_text(frames: list[str], expected: str) -> None:
    events, reply = run(sse(*frames))
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert "".join(texts) == expected == reply.text
    assert not any(has_surrogate(t) for t in texts)
    offsets = [e.offset for e in events if isinstance(e, TextDelta)]
    assert offsets == [sum(len(t) for t in texts[:k]) for k in range(len(texts))]
    assert reply.skipped_frames == 0
    finish = [k for k, e in enumerate(events) if isinstance(e, Finish)]
    last_text = max(k for k, e in enumerate(events) if isinstance(e, TextDelta))
    assert finish and last_text < finish[0]


def test_held_high_half_at_the_sentinel_becomes_replacement_character() -> None:
    _, reply = run(sse(content('"a\\ud83d"'), content('"b"', index=1, finish="stop")))
    assert reply.choices[0].text == "a\ufffd"


def test_held_high_half_at_a_cut_end_is_dropped() -> None:
    _, reply = run(sse(content('"a\\ud83d"'), done=False))
    assert reply.text == "a" and reply.outcome is Outcome.TRUNCATED


@pytest.mark.parametrize(
    ("field", "cls"),
    [("reasoning_content", ReasoningDelta), ("refusal", RefusalDelta)],
)
def test_other_channels_join_halves(field: str, cls: type) -> None:
    data = sse(content('"a\\ud83d"', field=field), content('"\\ude42"', field=field,
                                                           finish="stop"))
    events, reply = run(data)
    deltas = [(e.offset, e.text) for e in events if isinstance(e, cls)]
    assert deltas == [(0, "a"), (1, "\U0001f642")]
    choice = reply.choices[0]
    assert (choice.reasoning if field != "refusal" else choice.refusal) == "a\U0001f642"


def test_tool_arguments_join_halves() -> None:
    first = ('{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":'
             '{"name":"f","arguments":"{\\"x\\":\\"\\ud83d"}}]}}]}')
    second = ('{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":'
              '{"arguments":"\\ude42\\"}"}}]},"finish_reason":"tool_calls"}]}')
    events, reply = run(sse(first, second))
    deltas = [(e.offset, e.arguments) for e in events if isinstance(e, ToolCallDelta)]
    assert deltas == [(0, '{"x":"'), (6, '\U0001f642"}')]
    assert reply.choices[0].tool_calls[0].parse_arguments() == {"x": "\U0001f642"}


def test_decoded_chunks_with_lone_surrogates_are_joined() -> None:
    """openai-python decodes with ``json.loads``, which keeps lone surrogates."""
    parser = StreamParser()
    parser.feed_chunk(json.loads(content('"a\\ud83d"')))
    parser.feed_chunk(json.loads(content('"\\ude42"', finish="stop")))
    parser.close()
    assert parser.reply.text == "a\U0001f642"


def test_invalid_json_with_escapes_is_still_skipped() -> None:
    _, reply = run(sse('{"choices": [\\ud83d]}', content('"ok"', finish="stop")))
    assert reply.text == "ok" and reply.skipped_frames == 1


def test_nan_is_still_rejected_by_the_fallback() -> None:
    """The fallback decoder exists for lone surrogates only: it must not accept what the fast
    one rightly rejects (NaN is not JSON)."""
    _, reply = run(sse('{"choices": [], "usage": {"prompt_tokens": NaN}, "x": "\\ud83d"}',
                       content('"ok"', finish="stop")))
    assert reply.skipped_frames == 1 and reply.usage is None


# ---------------------------------------------------------------------------- item 2


def test_sentinel_without_any_finish_reason_is_truncated() -> None:
    events, reply = run(sse(content('"partial"')))
    assert reply.outcome is Outcome.TRUNCATED
    assert reply.end_reason == "sentinel without a finish reason"
    assert events[-1] == End(Outcome.TRUNCATED, "sentinel without a finish reason")
    assert reply.text == "partial"


def test_sentinel_with_some_choices_finished_stays_done() -> None:
    data = sse(content('"a"', index=0, finish="stop"), content('"b"', index=1))
    _, reply = run(data)
    assert reply.outcome is Outcome.DONE
    assert [c.finish_reason for c in reply.choices] == ["stop", None]


def test_opt_out_for_servers_that_never_send_finish_reasons() -> None:
    _, reply = run(sse(content('"all"')), require_finish_reason=False)
    assert reply.outcome is Outcome.DONE and reply.end_reason == "sentinel"


def test_error_payload_without_finish_still_fails() -> None:
    _, reply = run(sse(content('"a"'), '{"error": {"message": "boom"}}'))
    assert reply.outcome is Outcome.FAILED


def test_complete_body_without_finish_reason_is_still_done() -> None:
    parser = StreamParser()
    parser.feed_completion({"choices": [{"index": 0, "message": {"content": "x"}}]})
    parser.close()
    assert parser.reply.outcome is Outcome.DONE


def test_client_passes_the_opt_out_to_its_parser() -> None:
    pytest.importorskip("httpx")
    from fluxstream._client import AsyncClient

    client = AsyncClient("http://127.0.0.1:9/v1", api_key="k", require_finish_reason=False)
    stream = client.chat.stream(model="m", messages=[])
    assert stream._parser.require_finish_reason is False
    default = AsyncClient("http://127.0.0.1:9/v1", api_key="k").chat.stream(model="m",
                                                                            messages=[])
    assert default._parser.require_finish_reason is True


# ---------------------------------------------------------------------------- item 5


@pytest.mark.parametrize("choices", ["5", "true", '"abc"', '{"index": 0}'])
def test_choices_that_are_not_a_list_are_a_skipped_frame(choices: str) -> None:
    data = sse(f'{{"choices": {choices}}}', content('"ok"', finish="stop"))
    events, reply = run(data)
    assert reply.skipped_frames == 1 and reply.text == "ok"
    assert reply.outcome is Outcome.DONE
    assert any(isinstance(e, SkippedFrame) and "choices" in e.reason for e in events)


def test_choices_not_a_list_in_strict_mode_is_a_typed_error() -> None:
    with pytest.raises(FrameDecodeError):
        run(sse('{"choices": 5}'), strict=True)


@pytest.mark.parametrize(
    "usage",
    [
        {"cls": 1},
        {"cls": 1, "prompt_tokens": "x"},
        {"self": 2, "prompt_tokens": [1]},
        {"prompt_tokens": "x", "completion_tokens": 1.5, "prompt_tokens_details": 7},
        {"completion_tokens_details": {"reasoning_tokens": "many"}, "total_tokens": 3},
    ],
)
def test_odd_usage_is_kept_without_crash_or_warnings(usage: dict[str, Any]) -> None:
    data = sse(content('"a"', finish="stop")[:-1] + f', "usage": {json.dumps(usage)}}}')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, reply = run(data)
        assert reply.usage is not None and reply.outcome is Outcome.DONE
        dumped = reply.model_dump()
        reply.model_dump_json()
    again = Reply.model_validate(dumped)  # what a resume token does
    assert again.usage == reply.usage
    if "total_tokens" in usage:
        assert reply.usage.total_tokens == usage["total_tokens"]


def test_valid_usage_fields_survive_an_invalid_neighbour() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": "x", "cached": 1}
    data = sse(content('"a"', finish="stop")[:-1] + f', "usage": {json.dumps(usage)}}}')
    _, reply = run(data)
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == 3 and reply.usage.completion_tokens is None
    assert reply.usage.model_extra == {"cached": 1}


@pytest.mark.parametrize("digits", [30, 4299, 5000, 100_000])
def test_huge_retry_is_clamped_not_an_exception(digits: int) -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b"retry: " + b"9" * digits + b"\ndata: x\n\n")
    assert events[0].data == "x"
    assert decoder.reconnection_time is not None
    assert decoder.reconnection_time <= 2**31 - 1
    assert float(decoder.reconnection_time) / 1000 < 1e7


@pytest.mark.parametrize("digits", [5000, 100_000])
def test_huge_numeric_id_is_not_an_exception_on_resume(digits: int) -> None:
    parser = StreamParser()
    parser.feed(b"id: " + b"9" * digits + b"\n" + sse(content('"a"'), done=False))
    parser.new_connection(resume_after=parser.last_event_id)
    events = parser.feed(b"id: " + b"9" * digits + b"1\n" + sse(content('"b"', finish="stop")))
    assert parser.reply.text == "ab" and isinstance(events[-1], End)


def test_parse_arguments_on_deep_nesting_is_a_typed_error() -> None:
    call = ToolCall(index=0, name="f", arguments="[" * 100_000 + "]" * 100_000)
    with pytest.raises(ArgumentsError):
        call.parse_arguments()


def test_parse_arguments_with_model_on_deep_nesting_is_a_typed_error() -> None:
    import pydantic

    class Args(pydantic.BaseModel):
        x: Any = None

    call = ToolCall(index=0, name="f", arguments='{"x":' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ArgumentsError):
        call.parse_arguments(Args)


def test_partial_arguments_on_deep_nesting_does_not_raise() -> None:
    call = ToolCall(index=0, name="f", arguments="[" * 100_000)
    value = call.partial_arguments()
    assert value is None or isinstance(value, list)


# ---------------------------------------------------------------------------- item 10


def test_every_usage_object_is_kept_in_order() -> None:
    """llama.cpp with n=2 sends one usage per choice: the caller can tell them apart."""
    first = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    second = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
    data = sse(
        content('"a"', index=0, finish="stop"),
        json.dumps({"choices": [], "usage": first}),
        content('"b"', index=1, finish="stop"),
        json.dumps({"choices": [], "usage": second}),
    )
    _, reply = run(data)
    assert [u.completion_tokens for u in reply.usage_updates] == [3, 7]
    assert reply.usage == reply.usage_updates[-1]  # the last one wins
    again = Reply.model_validate(reply.model_dump())
    assert again.usage_updates == reply.usage_updates


def test_usage_updates_empty_without_usage() -> None:
    _, reply = run(sse(content('"a"', finish="stop")))
    assert reply.usage_updates == [] and reply.usage is None


def test_lone_surrogates_elsewhere_in_a_chunk_still_serialise() -> None:
    """A finish reason, usage counters and error payloads with lone halves: the reply must
    still serialise (``model_dump_json`` refuses lone surrogates)."""
    data = sse(
        '{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"st\\ud83dop"}],'
        '"usage":{"prompt_tokens":1,"note":"\\ude42"}}',
        '{"error":{"message":"bad \\ud83d","code":"x\\ude42"}}',
    )
    _, reply = run(data)
    dumped = json.loads(reply.model_dump_json())
    assert dumped["choices"][0]["finish_reason"] == "st\ufffdop"
    assert dumped["usage"]["note"] == "\ufffd" and dumped["usage"]["prompt_tokens"] == 1
    assert reply.error is not None and reply.error.message == "bad \ufffd"
    assert reply.error.code == "x\ufffd"
    assert reply.outcome is Outcome.FAILED
