"""One event full of tiny objects costs what it weighs, in every format.

Decoding JSON costs ~70 bytes per empty object or array (a 1 MiB event of ``{}`` takes ~24
MiB once decoded). Chat Completions refused such frames before decoding them; Responses,
Anthropic Messages and ``auto`` decoded them whole. The one guard: a frame over 64 KiB with
more objects and arrays than a real event of its size holds (outside strings) is skipped and
counted (strict: :class:`~fluxstream.errors.FrameDecodeError`) before it is decoded. Peak
memory is measured with tracemalloc.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from sse_frames import frame, frames

from fluxstream._events import SkippedFrame
from fluxstream._parser import StreamParser
from fluxstream.errors import FrameDecodeError

#: Each format's event, with a field full of tiny objects.
HOSTILE = {
    "chat_completions": {"choices": [{"index": 0, "delta": {"content": "x"}}]},
    "responses": {"type": "response.output_text.delta", "output_index": 0,
                  "content_index": 0, "delta": "x"},
    "anthropic_messages": {"type": "content_block_delta", "index": 0,
                           "delta": {"type": "text_delta", "text": "x"}},
}
OPENERS = {
    "chat_completions": b"",
    "responses": b'data: {"type":"response.created","response":{"id":"r"}}\n\n',
    "anthropic_messages": (b'data: {"type":"message_start","message":{"id":"m"}}\n\n'
                           b'data: {"type":"content_block_start","index":0,'
                           b'"content_block":{"type":"text","text":""}}\n\n'),
}
TINY = {"objects": "{}", "arrays": "[]", "nested": "[{}]"}


def hostile_event(fmt: str, tiny: str, count: int = 400_000) -> bytes:
    payload = json.dumps(HOSTILE[fmt])
    junk = "[" + ",".join([tiny] * count) + "]"
    return frame(payload[:-1] + ',"junk":' + junk + "}")


def peak_of(action: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        try:
            result: Any = action()
        except Exception as exc:
            result = exc
        return result, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("tiny", list(TINY.values()), ids=list(TINY))
@pytest.mark.parametrize("fmt", ["chat_completions", "responses", "anthropic_messages", "auto"])
def test_an_event_full_of_tiny_objects_costs_a_few_times_its_size(fmt: str, tiny: str) -> None:
    name = "responses" if fmt == "auto" else fmt
    parser = StreamParser(format=fmt)
    parser.feed(OPENERS[name])
    data = hostile_event(name, tiny)
    events, peak = peak_of(lambda: parser.feed(data))
    assert isinstance(events, list), events
    assert [type(e) for e in events] == [SkippedFrame]
    assert parser.reply.skipped_frames == 1 and parser.reply.text == ""
    assert peak < 4 * len(data), (peak, len(data))


@pytest.mark.parametrize("fmt", ["chat_completions", "responses", "anthropic_messages", "auto"])
def test_the_first_event_of_auto_is_guarded_too(fmt: str) -> None:
    name = "responses" if fmt == "auto" else fmt
    data = hostile_event(name, "{}")
    parser = StreamParser(format=fmt)
    events, peak = peak_of(lambda: parser.feed(data))
    assert isinstance(events, list) and [type(e) for e in events] == [SkippedFrame]
    assert peak < 4 * len(data), (peak, len(data))


@pytest.mark.parametrize("fmt", ["chat_completions", "responses", "anthropic_messages"])
def test_strict_mode_raises_the_typed_error(fmt: str) -> None:
    parser = StreamParser(format=fmt, strict=True)
    parser.feed(OPENERS[fmt])
    with pytest.raises(FrameDecodeError):
        parser.feed(hostile_event(fmt, "{}"))


def logprobs(count: int) -> list[dict[str, Any]]:
    """Per-token log probabilities with 20 alternatives each, as OpenAI sends them when
    asked (single-character tokens: the densest real shape)."""
    def entry(token: str) -> dict[str, Any]:
        return {"token": token, "logprob": -0.0123, "bytes": list(token.encode())}

    return [{**entry(t), "top_logprobs": [entry(t)] * 20} for t in ["a", ".", " "] * count]


def test_a_big_real_event_is_read() -> None:
    """The terminal event repeats the whole output: with logprobs it is many megabytes of
    small objects, and it is what ends the stream."""
    text = "a. " * 3000
    response = {"id": "r", "status": "completed", "output": [{
        "type": "message", "content": [{"type": "output_text", "text": text,
                                        "logprobs": logprobs(1000)}]}]}
    data = (b'data: {"type":"response.created","response":{"id":"r"}}\n\n'
            + frames({"type": "response.output_text.delta", "output_index": 0,
                      "content_index": 0, "delta": text},
                     {"type": "response.completed", "response": response}))
    assert len(data) > 1_000_000
    for fmt in ("responses", "auto"):
        parser = StreamParser(format=fmt, strict=True)
        parser.feed(data)
        parser.close()
        assert parser.reply.outcome.value == "done" and parser.reply.skipped_frames == 0


def test_braces_inside_strings_are_not_objects() -> None:
    """A tool call's final arguments are a JSON *string*: however many objects it spells,
    it decodes to one string."""
    args = json.dumps([{"k": i} for i in range(60_000)])
    events = [
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": args}},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
        {"type": "message_stop"},
    ]
    data = frames(*events)
    parser = StreamParser(format="anthropic_messages", strict=True)
    parser.feed(data)
    parser.close()
    assert parser.reply.choices[0].tool_calls[0].arguments == args


def crowded_unterminated(size: int) -> bytes:
    """Brackets enough to be checked, then one string that never ends, made of escaped
    quotes: every quote in it looks like the start of another string."""
    half = size // 3
    return b'data: {"junk":' + b"[" * half + b'"' + b'\\"' * half + b"\n\n"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", ["chat_completions", "responses", "anthropic_messages", "auto"])
def test_the_guard_reads_a_frame_of_escaped_quotes_in_linear_time(fmt: str) -> None:
    """The guard looked for strings with a search that started again at every quote: a
    string that never ends, made of escaped quotes, cost quadratic time (a 200 KB frame
    took minutes, a 16 MiB one days). Such a frame is not JSON: it is refused at once."""
    import time

    data = crowded_unterminated(1_000_000)
    parser = StreamParser(format=fmt)
    parser.feed(OPENERS["responses" if fmt == "auto" else fmt])
    started = time.perf_counter()
    events = parser.feed(data)
    elapsed = time.perf_counter() - started
    assert [type(e) for e in events] == [SkippedFrame]
    assert elapsed < 10, elapsed  # linear: milliseconds; quadratic: hours
