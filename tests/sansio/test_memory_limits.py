"""Issue 10, item 8: memory bombs. Limits with sane defaults and typed errors keep memory within
a small multiple of the configured numbers; peak memory is measured with tracemalloc at a
scaled-down size. Each test failed on the code before the fix."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from sse_frames import frame as event

from fluxstream._events import End, Outcome, SkippedFrame, TextDelta, ToolCallDelta
from fluxstream._limits import DEFAULT_STREAM_LIMITS, StreamLimits
from fluxstream._parser import StreamParser
from fluxstream.errors import EventTooLargeError, LimitExceededError
from fluxstream.sse import SSEDecoder

MiB = 1024 * 1024


def peak_of(action: Callable[[], Any]) -> tuple[Any, int]:
    """(what ``action`` returned or raised, its peak traced memory in bytes)."""
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


def test_defaults_are_documented_values() -> None:
    assert StreamLimits(
        max_choices=128, max_tool_calls=128, max_reply_chars=32 * MiB,
        max_bytes_without_event=1 * MiB,
    ) == DEFAULT_STREAM_LIMITS
    with pytest.raises(ValueError):
        StreamLimits(max_choices=0)


def test_one_event_of_a_hundred_thousand_choices() -> None:
    """Scaled down from the issue (990,000 choices in 15.9 MiB took 1.6 GiB): the frame is
    refused before it is decoded, so the peak is a few times the event."""
    data = event({"choices": [{"index": i} for i in range(100_000)]})
    parser = StreamParser()
    events, peak = peak_of(lambda: parser.feed(data))
    assert isinstance(events, list) and isinstance(events[0], SkippedFrame)
    assert parser.reply.choices == [] and parser.reply.skipped_frames == 1
    assert peak < 4 * len(data), peak


def test_choices_past_the_limit_are_a_typed_error() -> None:
    data = event({"choices": [{"index": i} for i in range(5_000)]})
    parser = StreamParser()
    error, peak = peak_of(lambda: parser.feed(data))
    assert isinstance(error, LimitExceededError) and error.name == "max_choices"
    assert error.limit == 128
    # Decoding the frame is the cost; no per-choice state past the limit is kept.
    assert peak < 16 * len(data), peak
    assert len(parser._assembler._choices) == 0


def test_choices_limit_is_configurable_and_spans_events() -> None:
    parser = StreamParser(limits=StreamLimits(max_choices=3))
    parser.feed(event({"choices": [{"index": 0, "delta": {"content": "a"}}, {"index": 1}]}))
    parser.feed(event({"choices": [{"index": 2}]}))
    with pytest.raises(LimitExceededError):
        parser.feed(event({"choices": [{"index": 3}]}))
    assert [c.index for c in parser.reply.choices] == [0, 1, 2]
    assert parser.reply.text == "a"


def test_tool_calls_in_one_event() -> None:
    """Scaled down from the issue (150k tool calls in one event took 220 MB)."""
    calls = [{"index": i, "function": {"arguments": ""}} for i in range(20_000)]
    data = event({"choices": [{"index": 0, "delta": {"tool_calls": calls}}]})
    parser = StreamParser()
    error, peak = peak_of(lambda: parser.feed(data))
    assert isinstance(error, LimitExceededError) and error.name == "max_tool_calls"
    assert peak < 12 * len(data), peak


def test_tool_calls_limit_without_indexes() -> None:
    calls = [{"id": f"call_{i}", "function": {"name": "f", "arguments": "{}"}} for i in range(5)]
    parser = StreamParser(limits=StreamLimits(max_tool_calls=4))
    with pytest.raises(LimitExceededError, match="max_tool_calls"):
        parser.feed(event({"choices": [{"index": 0, "delta": {"tool_calls": calls}}]}))


def test_assembler_enforces_limits_for_any_format() -> None:
    from fluxstream._assembly import ReplyAssembler

    asm = ReplyAssembler("k", limits=StreamLimits(max_tool_calls=2, max_choices=2))
    asm.feed([ToolCallDelta("k", 0, n, None, None, "", 0) for n in range(2)])
    with pytest.raises(LimitExceededError, match="max_tool_calls"):
        asm.feed([ToolCallDelta("k", 0, 2, None, None, "", 0)])
    asm.feed([TextDelta("k", 1, 0, "x")])
    with pytest.raises(LimitExceededError, match="max_choices"):
        asm.feed([TextDelta("k", 2, 0, "x")])


def test_total_reply_size_is_capped() -> None:
    parser = StreamParser(limits=StreamLimits(max_reply_chars=10_000))
    delta = {"choices": [{"index": 0, "delta": {"content": "x" * 1000}}]}
    tool = {"choices": [{"index": 1, "delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": "y" * 1000}}]}}]}
    for _ in range(5):
        parser.feed(event(delta))
        parser.feed(event(tool))
    with pytest.raises(LimitExceededError) as info:
        parser.feed(event(delta))
    assert info.value.name == "max_reply_chars" and info.value.size == 11_000


def test_reply_size_default_bounds_memory() -> None:
    """Many mid-sized deltas: memory follows the limit, then the typed error."""
    limits = StreamLimits(max_reply_chars=2 * MiB)
    parser = StreamParser(limits=limits)
    delta = event({"choices": [{"index": 0, "delta": {"content": "z" * 4096}}]})

    def flood() -> None:
        for _ in range(10_000):
            parser.feed(delta)

    error, peak = peak_of(flood)
    assert isinstance(error, LimitExceededError) and error.name == "max_reply_chars"
    assert peak < 4 * limits.max_reply_chars, peak


@pytest.mark.parametrize("filler", [b"\n", b"\r\n", b": ping\n\n", b"event: x\n\n"])
def test_bytes_without_an_event_are_capped(filler: bytes) -> None:
    """gzip turns a gigabyte of blank lines into a megabyte: no event is ever dispatched, so
    ``max_event_bytes`` never trips. The decoder now stops after the configured bytes."""
    decoder = SSEDecoder(max_bytes_without_event=1 * MiB)
    read = filler * (64 * 1024 // len(filler))
    with pytest.raises(LimitExceededError) as info:
        for _ in range(64):  # 4 MiB
            decoder.feed(read)
    assert info.value.name == "max_bytes_without_event"
    assert 1 * MiB < info.value.size <= 1 * MiB + len(read)
    with pytest.raises(LimitExceededError):  # the decoder stays failed
        decoder.feed(b"data: x\n\n")


def test_one_huge_read_of_blank_lines_stays_small() -> None:
    """A decompressed read can be tens of MiB: it is decoded in slices, so the list of lines
    it splits into stays bounded, and the limit trips early."""
    read = b"\n" * (8 * MiB)
    decoder = SSEDecoder(max_bytes_without_event=1 * MiB)
    error, peak = peak_of(lambda: decoder.feed(read))
    assert isinstance(error, LimitExceededError)
    assert peak < 4 * MiB, peak


def test_events_reset_the_count() -> None:
    decoder = SSEDecoder(max_bytes_without_event=1000)
    for _ in range(100):
        assert decoder.feed(b": ping\n\n" * 50) == []
        assert [e.data for e in decoder.feed(b"data: x\n\n")] == ["x"]
        assert decoder.feed(b"id: 5\ndata: y\n\n" + b"\n" * 500)[0].data == "y"


def test_parser_passes_the_limit_to_its_decoders() -> None:
    parser = StreamParser(limits=StreamLimits(max_bytes_without_event=100))
    with pytest.raises(LimitExceededError):
        parser.feed(b"\n" * 101)
    parser = StreamParser(limits=StreamLimits(max_bytes_without_event=100))
    parser.feed(b"\n" * 90)
    parser.new_connection()
    parser.feed(b"\n" * 90)  # a fresh decoder counts from zero


def test_event_size_limit_still_applies() -> None:
    with pytest.raises(EventTooLargeError):
        SSEDecoder(max_event_bytes=1000).feed(b"data: " + b"x" * 2000 + b"\n\n")


def test_limit_error_on_the_live_parser_keeps_the_reply() -> None:
    parser = StreamParser(limits=StreamLimits(max_choices=1))
    parser.feed(event({"choices": [{"index": 0, "delta": {"content": "kept"}}]}))
    with pytest.raises(LimitExceededError):
        parser.feed(event({"choices": [{"index": 1, "delta": {"content": "x"}}]}))
    assert parser.fail("limit") and parser.reply.outcome is Outcome.FAILED
    assert parser.reply.text == "kept"


@pytest.mark.parametrize(
    ("options", "tail", "error"),
    [
        ({"max_bytes_without_event": 100}, b": c\n\n" * 50, LimitExceededError),
        ({"max_event_bytes": 20}, b"data: " + b"x" * 50 + b"\n\n", EventTooLargeError),
        ({"max_event_bytes": 20}, b"data: " + b"x" * 50, EventTooLargeError),
    ],
)
def test_events_before_a_limit_in_the_same_read_are_delivered(
    options: dict[str, int], tail: bytes, error: type[Exception]
) -> None:
    """The limit is crossed by the same read that completed an event: the event is returned
    first; the decoder is failed, so the next feed (or close) raises."""
    decoder = SSEDecoder(**options)
    events = decoder.feed(b"data: a\n\n" + tail)
    assert [e.data for e in events] == ["a"]
    with pytest.raises(error):
        decoder.feed(b"data: b\n\n")
    with pytest.raises(error):
        decoder.close()


def test_events_before_a_limit_in_a_huge_read_are_delivered() -> None:
    """A huge read is decoded in slices: events of the slices before the one that crosses the
    limit are returned."""
    decoder = SSEDecoder(max_bytes_without_event=1 * MiB)
    events = decoder.feed(b"data: a\n\n" + b"\r\n" * (4 * MiB))
    assert [e.data for e in events] == ["a"]
    with pytest.raises(LimitExceededError):
        decoder.close()


def test_parser_close_after_a_lazy_decoder_failure_ends_failed() -> None:
    """The last read completed an event and then crossed a limit: the event is kept and the
    parser's close ends the stream ``failed`` (it never raises at the end of the bytes)."""
    parser = StreamParser(max_event_bytes=80)
    first = event({"choices": [{"index": 0, "delta": {"content": "ok"}}]})
    assert [e.text for e in parser.feed(first + b"data: " + b"x" * 100)] == ["ok"]
    events = parser.close()
    assert isinstance(events[-1], End) and events[-1].outcome is Outcome.FAILED
    assert "EventTooLargeError" in (parser.reply.end_reason or "")
    assert parser.reply.text == "ok"
