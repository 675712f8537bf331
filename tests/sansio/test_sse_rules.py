"""Every rule of the SSE decoder, each by its own named test (no network).

The WHATWG rules (9.2.6 "Interpreting an event stream"), the UTF-8 decoding rules, and
fluxstream's own policies: end of stream, ``max_event_bytes``, dispatch as early as possible.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable, Iterable

import pytest

from fluxstream import sse
from fluxstream.errors import EventTooLargeError, FluxstreamError
from fluxstream.sse import (
    DEFAULT_MAX_EVENT_BYTES,
    ServerSentEvent,
    SSEDecoder,
    aiter_events,
    iter_events,
)

Splitter = Callable[[bytes], list[bytes]]


def whole(data: bytes) -> list[bytes]:
    return [data]


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def fixed(n: int) -> Splitter:
    def split(data: bytes) -> list[bytes]:
        return [data[i : i + n] for i in range(0, len(data), n)]

    split.__name__ = f"reads_of_{n}"
    return split


SPLITTERS = [whole, bytewise, fixed(2), fixed(3), fixed(7), fixed(64)]
split_ids = [s.__name__ for s in SPLITTERS]


def run(data: bytes | Iterable[bytes], **kwargs: int) -> tuple[list[ServerSentEvent], SSEDecoder]:
    decoder = SSEDecoder(**kwargs)
    events: list[ServerSentEvent] = []
    for read in [data] if isinstance(data, bytes) else data:
        events += decoder.feed(read)
    events += decoder.close()
    return events, decoder


def datas(data: bytes | Iterable[bytes]) -> list[str]:
    return [e.data for e in run(data)[0]]


def every_split(data: bytes) -> Iterable[list[bytes]]:
    """The stream as one read, and cut in two at every position."""
    yield [data]
    for i in range(len(data) + 1):
        yield [data[:i], data[i:]]


# --------------------------------------------------------------------------- UTF-8


def test_utf8_character_split_across_reads() -> None:
    text = "é東🚀 naïve"
    data = b"data: " + text.encode() + b"\n\n"
    for reads in every_split(data):
        assert datas(reads) == [text], reads
    assert datas(bytewise(data)) == [text]


def test_invalid_utf8_becomes_replacement_character_never_an_exception() -> None:
    cases = {
        b"data: \xff\xfe\n\n": "\ufffd\ufffd",
        b"data: a\xe6\x97\n\n": "a\ufffd",  # truncated sequence at the line end
        b"data: \xc3\n\n": "\ufffd",
        b"data: \xed\xa0\x80\n\n": "\ufffd\ufffd\ufffd",  # an encoded surrogate
        b"data: \xf0\x9f\x9a\n\n": "\ufffd",
    }
    for raw, expected in cases.items():
        for split in SPLITTERS:
            assert datas(split(raw)) == [expected], (raw, split.__name__)


def test_invalid_utf8_in_event_type_and_id() -> None:
    events, decoder = run(b"event: \xff\nid: \xfe1\ndata: x\n\n")
    assert events == [ServerSentEvent("\ufffd", "x", "\ufffd1", None)]
    assert decoder.last_event_id == "\ufffd1"


@pytest.mark.parametrize("split", SPLITTERS, ids=split_ids)
def test_utf8_decoding_equals_decoding_the_whole_line(split: Splitter) -> None:
    payload = bytes(range(0x20, 0x100)) + "日本語🚀".encode() + b"\xe6\x97"
    payload = payload.replace(b"\r", b"").replace(b"\n", b"")
    data = b"data: " + payload + b"\n\n"
    assert datas(split(data)) == [payload.decode("utf-8", "replace")]


# --------------------------------------------------------------------------- BOM


def test_leading_bom_is_stripped() -> None:
    assert datas(b"\xef\xbb\xbfdata: 1\n\n") == ["1"]


def test_bom_is_stripped_only_once() -> None:
    # The second BOM is content: the line is "\ufeffdata: 2", an unknown field.
    data = b"\xef\xbb\xbfdata: 1\n\n\xef\xbb\xbfdata: 2\n\ndata: 3\n\n"
    for split in SPLITTERS:
        assert datas(split(data)) == ["1", "3"], split.__name__


def test_bom_split_across_reads() -> None:
    data = b"\xef\xbb\xbfdata: 1\n\n"
    for reads in every_split(data):
        assert datas(reads) == ["1"], reads
    assert datas([b"\xef", b"\xbb", b"\xbf", b"data: 1\n\n"]) == ["1"]


def test_bom_after_empty_read() -> None:
    assert datas([b"", b"\xef\xbb\xbfdata: 1\n\n"]) == ["1"]
    assert datas([b"", b"\xef", b"", b"\xbb\xbf", b"", b"data: 1\n\n"]) == ["1"]


def test_bom_prefix_that_is_not_a_bom_is_content() -> None:
    # "\xef\xbb" then "x": not a BOM, so the three bytes are the start of the first line.
    events, decoder = run([b"\xef\xbb", b"x: 1\ndata: 2\n\n"])
    assert [e.data for e in events] == ["2"]
    events, decoder = run([b"\xef\xbb"])  # the stream ends inside what could be a BOM
    assert events == []
    assert decoder.ended_mid_line


# --------------------------------------------------------------------------- line endings


@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"], ids=["LF", "CR", "CRLF"])
@pytest.mark.parametrize("split", SPLITTERS, ids=split_ids)
def test_line_endings_lf_cr_crlf(eol: bytes, split: Splitter) -> None:
    data = eol.join([b"event: e", b"data: a", b"data: b", b"", b"data: c", b"", b""])
    events, _ = run(split(data))
    assert events == [ServerSentEvent("e", "a\nb"), ServerSentEvent("message", "c")]


def test_mixed_line_endings_in_one_stream() -> None:
    data = b"data: a\rdata: b\ndata: c\r\n\r\ndata: d\n\r"
    for split in SPLITTERS:
        assert datas(split(data)) == ["a\nb\nc", "d"], split.__name__


def test_crlf_split_between_reads_is_one_line_end() -> None:
    # A CR ends one read and an LF starts the next: one line end, not a blank line.
    assert datas([b"data: a\r", b"\ndata: b\r\n\r\n"]) == ["a\nb"]
    assert datas([b"data: a\r", b"\n", b"data: b\r", b"\n", b"\r", b"\n"]) == ["a\nb"]


def test_cr_ending_a_read_dispatches_at_once_and_swallows_the_lf() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\r") == []
    assert decoder.feed(b"\r") == [ServerSentEvent(data="x")]  # not held for the next read
    assert decoder.feed(b"\n") == []  # the LF of that CRLF
    assert decoder.feed(b"data: y\n\n") == [ServerSentEvent(data="y")]
    assert decoder.close() == []


@pytest.mark.parametrize(
    "blank", [b"data: x\r\r", b"data: x\n\n", b"data: x\r\n\r\n", b"data: x\r\n\r", b"data: x\n\r"]
)
def test_dispatch_as_soon_as_the_blank_line_is_complete(blank: bytes) -> None:
    decoder = SSEDecoder()
    assert decoder.feed(blank) == [ServerSentEvent(data="x")]
    assert not decoder.in_event


def test_lone_cr_then_lf_start_next_read_after_blank_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\r\r") == [ServerSentEvent(data="x")]
    # The second CR may be half of a CRLF: a leading LF is part of it, not a new blank line.
    assert decoder.feed(b"\ndata: y\n\n") == [ServerSentEvent(data="y")]


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u0085", "\u000b", "\u000c", "\u001c"])
def test_unicode_line_separators_are_not_line_ends(char: str) -> None:
    data = f"data: a{char}b\n\n".encode()
    for split in SPLITTERS:
        assert datas(split(data)) == [f"a{char}b"], split.__name__


# --------------------------------------------------------------------------- fields


def test_comments_are_ignored_and_counted() -> None:
    data = b": hello\n:\ndata: a\n: inside\n\n: ping\n\n:ping\r\n\r\n"
    for split in SPLITTERS:
        events, decoder = run(split(data))
        assert events == [ServerSentEvent(data="a")], split.__name__
        assert decoder.comments == 5


def test_comment_counter_is_updated_when_the_line_completes() -> None:
    decoder = SSEDecoder()
    decoder.feed(b": ping")
    assert decoder.comments == 0
    decoder.feed(b"\n")
    assert decoder.comments == 1


def test_field_without_colon() -> None:
    assert run(b"data\n\n")[0] == [ServerSentEvent(data="")]
    assert run(b"data\ndata\n\n")[0] == [ServerSentEvent(data="\n")]
    assert run(b"event: e\nevent\ndata: x\n\n")[0] == [ServerSentEvent("message", "x")]
    events, decoder = run(b"id: 1\ndata: a\n\nid\ndata: b\n\n")
    assert [e.id for e in events] == ["1", ""]
    assert decoder.last_event_id == ""


def test_only_one_leading_space_is_removed() -> None:
    assert datas(b"data:  two\n\n") == [" two"]
    assert datas(b"data:no space\n\n") == ["no space"]
    assert datas(b"data: trailing \n\n") == ["trailing "]
    assert datas(b"data:\tx\n\n") == ["\tx"]  # only a space is removed
    assert run(b"event:  e\ndata: x\n\n")[0][0].event == " e"


def test_data_lines_are_joined_with_lf() -> None:
    assert datas(b"data: a\ndata:\ndata: b\n\n") == ["a\n\nb"]
    assert datas(b"data:\n\n") == [""]
    assert datas(b"data: \ndata: \n\n") == ["\n"]


def test_unknown_fields_are_ignored() -> None:
    events, decoder = run(b"foo: bar\nDATA: up\nData: x\n data: y\ndata: z\n\n")
    assert events == [ServerSentEvent(data="z")]
    assert decoder.comments == 0


def test_id_with_nul_is_ignored() -> None:
    events, decoder = run(b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n")
    assert [e.id for e in events] == ["1", "1"]
    assert decoder.last_event_id == "1"


def test_id_persists_across_events_and_empty_id_resets() -> None:
    events, decoder = run(b"id: 7\ndata: a\n\ndata: b\n\nid:\ndata: c\n\n")
    assert [e.id for e in events] == ["7", "7", ""]
    assert decoder.last_event_id == ""


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        (b"1000", 1000),
        (b"0", 0),
        (b"007", 7),
        (b"10a", None),
        (b" 100", None),  # the second space stays: not all digits
        (b"-1", None),
        (b"+1", None),
        (b"1.5", None),
        (b"", None),
        ("١٢٣".encode(), None),  # Arabic-Indic digits are not ASCII digits
        ("\uff11\uff12".encode(), None),  # fullwidth digits neither
    ],
)
def test_retry_only_ascii_digits(value: bytes, valid: int | None) -> None:
    events, decoder = run(b"retry: " + value + b"\ndata: x\n\n")
    assert events[0].retry == valid
    assert decoder.reconnection_time == valid


def test_retry_is_per_event_and_reconnection_time_persists() -> None:
    events, decoder = run(b"retry: 5\ndata: a\n\ndata: b\n\nretry: 9\n\n")
    assert [e.retry for e in events] == [5, None]
    assert decoder.reconnection_time == 9


def test_retry_sets_reconnection_time_when_its_line_completes() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"retry: 300\n")
    assert decoder.reconnection_time == 300


def test_block_without_data_dispatches_nothing() -> None:
    events, decoder = run(b"retry: 10\n\nid: 5\n\nevent: e\n\nid: 6\nevent: f\nretry: 1\n\n")
    assert events == []
    assert decoder.last_event_id == "6"  # the id is still committed at the blank line
    assert decoder.reconnection_time == 1
    assert run(b"retry: 10\n\n")[1].reconnection_time == 10


def test_event_type_and_empty_event_type() -> None:
    events, _ = run(b"event: add\ndata: 1\n\nevent:\ndata: 2\n\ndata: 3\n\n")
    assert [e.event for e in events] == ["add", "message", "message"]


def test_blank_lines_alone_do_nothing() -> None:
    events, decoder = run(b"\n\n\r\n\r\r\n")
    assert events == []
    assert not decoder.ended_mid_event
    assert not decoder.ended_mid_line


def test_extra_blank_lines_between_events() -> None:
    data = b"data: a\n\n\n\n\ndata: b\n\n\n"
    for split in SPLITTERS:
        assert datas(split(data)) == ["a", "b"], split.__name__


# --------------------------------------------------------------------------- end of stream


def test_close_flushes_an_event_without_its_blank_line() -> None:
    events, decoder = run(b"data: a\n\ndata: [DONE]\n")
    assert [e.data for e in events] == ["a", "[DONE]"]
    assert decoder.ended_mid_event
    assert not decoder.ended_mid_line


def test_close_flushes_an_unterminated_line() -> None:
    events, decoder = run(b'data: {"a": 1}\n\ndata: {"b"')
    assert [e.data for e in events] == ['{"a": 1}', '{"b"']
    assert decoder.ended_mid_line
    assert decoder.ended_mid_event


def test_clean_end_sets_neither_flag() -> None:
    for data in [b"data: a\n\n", b"", b": ping\n\n", b"data: a\r\n\r\n", b"data: a\r\r"]:
        _, decoder = run(data)
        assert not decoder.ended_mid_line, data
        assert not decoder.ended_mid_event, data


def test_end_after_fields_without_data_is_mid_event() -> None:
    events, decoder = run(b"data: a\n\nid: 9\n")
    assert [e.data for e in events] == ["a"]
    assert decoder.ended_mid_event
    assert not decoder.ended_mid_line
    assert decoder.last_event_id == "9"  # committed by the flush


def test_end_inside_a_comment_is_mid_line_only() -> None:
    events, decoder = run(b"data: a\n\n: keep-al")
    assert [e.data for e in events] == ["a"]
    assert decoder.ended_mid_line
    assert not decoder.ended_mid_event


def test_end_after_a_complete_comment_is_neither() -> None:
    _, decoder = run(b"data: a\n\n: ping\n")
    assert not decoder.ended_mid_line
    assert not decoder.ended_mid_event
    assert decoder.comments == 1


def test_end_inside_a_field_name_is_mid_line_and_mid_event() -> None:
    events, decoder = run(b"data: a\n\nda")
    assert [e.data for e in events] == ["a"]
    assert decoder.ended_mid_line
    assert decoder.ended_mid_event


def test_close_twice_returns_nothing_more() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: a")
    assert decoder.close() == [ServerSentEvent(data="a")]
    assert decoder.close() == []


def test_in_event_and_bytes_fed() -> None:
    decoder = SSEDecoder()
    assert not decoder.in_event
    decoder.feed(b"data: a")
    assert decoder.in_event
    decoder.feed(b"\n")
    assert decoder.in_event
    decoder.feed(b"\n")
    assert not decoder.in_event
    decoder.feed(b": c\n")
    assert decoder.in_event  # a comment counts toward the event's size
    assert decoder.bytes_fed == 13
    assert "bytes_fed=13" in repr(decoder)


# --------------------------------------------------------------------------- max_event_bytes


def test_default_limit_is_16_mib() -> None:
    assert DEFAULT_MAX_EVENT_BYTES == 16 * 1024 * 1024
    assert SSEDecoder().max_event_bytes == 16 * 1024 * 1024


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError):
        SSEDecoder(max_event_bytes=0)


@pytest.mark.parametrize("split", SPLITTERS, ids=split_ids)
def test_one_huge_line_raises_naming_the_limit(split: Splitter) -> None:
    decoder = SSEDecoder(max_event_bytes=1000)
    data = b"data: " + b"x" * 5000 + b"\n\n"
    with pytest.raises(EventTooLargeError) as info:
        for read in split(data):
            decoder.feed(read)
    assert info.value.limit == 1000
    assert info.value.size > 1000
    assert "max_event_bytes=1000" in str(info.value)
    assert isinstance(info.value, FluxstreamError)


@pytest.mark.parametrize("split", SPLITTERS, ids=split_ids)
def test_many_lines_in_one_event_raise(split: Splitter) -> None:
    decoder = SSEDecoder(max_event_bytes=1000)
    data = b"data: 0123456789\n" * 100 + b"\n"
    with pytest.raises(EventTooLargeError) as info:
        for read in split(data):
            decoder.feed(read)
    assert info.value.limit == 1000


def test_unterminated_huge_line_raises_without_any_line_end() -> None:
    decoder = SSEDecoder(max_event_bytes=100)
    with pytest.raises(EventTooLargeError):
        for _ in range(1000):
            decoder.feed(b"x" * 10)


@pytest.mark.parametrize("split", [*SPLITTERS, fixed(9)], ids=[*split_ids, "reads_of_9"])
@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"], ids=["LF", "CR", "CRLF"])
def test_limit_boundary_is_independent_of_read_size(split: Splitter, eol: bytes) -> None:
    # An event's size: its lines plus one byte per terminator (the blank line adds nothing).
    line = b"data: " + b"y" * 50  # 56 bytes + 1 terminator = 57
    data = b"data: a" + eol + eol + line + eol + b": c" + eol + eol + b"data: b" + eol + eol
    size = len(line) + 1 + 3 + 1
    events, _ = run(split(data), max_event_bytes=size)
    assert [e.data for e in events] == ["a", "y" * 50, "b"]
    with pytest.raises(EventTooLargeError):
        run(split(data), max_event_bytes=size - 1)


def test_limit_applies_per_event_not_per_stream() -> None:
    events, _ = run([b"data: 0123456789\n\n"] * 1000, max_event_bytes=20)
    assert len(events) == 1000


def test_limit_counts_an_unterminated_line_at_close() -> None:
    decoder = SSEDecoder(max_event_bytes=10)
    decoder.feed(b"data: 1234")  # 10 bytes pending: fine so far
    with pytest.raises(EventTooLargeError):
        decoder.close()  # as a line it is 11 bytes with its terminator


def test_decoder_stays_failed() -> None:
    decoder = SSEDecoder(max_event_bytes=10)
    with pytest.raises(EventTooLargeError) as info:
        decoder.feed(b"data: 0123456789\n\n")
    for call in (lambda: decoder.feed(b"data: ok\n\n"), lambda: decoder.feed(b""), decoder.close):
        with pytest.raises(EventTooLargeError) as again:
            call()
        assert again.value is info.value
    assert decoder.in_event


# --------------------------------------------------------------------------- drivers


def test_aiter_events_over_an_async_iterator() -> None:
    async def reads() -> AsyncIterator[bytes]:
        for chunk in [b"id: 1\nda", b"ta: a\n", b"\nretry: 5\ndata: b"]:
            await asyncio.sleep(0)
            yield chunk

    async def main() -> tuple[list[ServerSentEvent], SSEDecoder]:
        decoder = SSEDecoder()
        return [e async for e in aiter_events(reads(), decoder=decoder)], decoder

    events, decoder = asyncio.run(main())
    assert events == [ServerSentEvent("message", "a", "1"), ServerSentEvent("message", "b", "1", 5)]
    assert decoder.last_event_id == "1"
    assert decoder.reconnection_time == 5
    assert decoder.ended_mid_line and decoder.ended_mid_event


def test_aiter_events_passes_max_event_bytes() -> None:
    async def reads() -> AsyncIterator[bytes]:
        yield b"data: " + b"x" * 100 + b"\n\n"

    async def main() -> None:
        async for _ in aiter_events(reads(), max_event_bytes=50):
            pass

    with pytest.raises(EventTooLargeError):
        asyncio.run(main())


def test_iter_events() -> None:
    assert list(iter_events([b"data: a\n", b"\ndata: b"])) == [
        ServerSentEvent(data="a"),
        ServerSentEvent(data="b"),
    ]


# --------------------------------------------------------------------------- the event type


def test_server_sent_event_is_immutable() -> None:
    event = ServerSentEvent("e", "d", "1", 5)
    with pytest.raises(AttributeError):
        event.data = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        event[0] = "x"  # type: ignore[index]
    assert hash(event) == hash(("e", "d", "1", 5))
    assert event == ("e", "d", "1", 5)
    assert ServerSentEvent() == ("message", "", "", None)
    assert not dataclasses.is_dataclass(event)


def test_events_built_on_the_fast_paths_are_real_server_sent_events() -> None:
    decoder = SSEDecoder()
    reads = [b"data: a\n\n", b"data: b\n\ndata: c\n\ndata: d", b"\n\n", b"event: e\ndata: f\n\n"]
    events = [e for read in reads for e in decoder.feed(read)]
    assert [e.data for e in events] == ["a", "b", "c", "d", "f"]
    for event in events:
        assert type(event) is ServerSentEvent
        assert event._fields == ("event", "data", "id", "retry")


# --------------------------------------------------------------------------- linear time


def test_linear_time_bytes_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    """Count work, not time: the decoder copies buffered bytes only through ``sse._join`` and
    ``sse._join_lines``; feeding an N-byte event in 64-byte reads must copy O(N) bytes (a
    quadratic decoder copies its growing buffer on every read: ~N^2/128 bytes)."""
    copied = 0

    def counting(join: Callable[[Iterable[bytes]], bytes]) -> Callable[[Iterable[bytes]], bytes]:
        def counted(parts: Iterable[bytes]) -> bytes:
            nonlocal copied
            out = join(parts)
            copied += len(out)
            return out

        return counted

    monkeypatch.setattr(sse, "_join", counting(sse._join))
    monkeypatch.setattr(sse, "_join_lines", counting(sse._join_lines))

    def bytes_copied(event: bytes) -> int:
        nonlocal copied
        copied = 0
        decoder = SSEDecoder()
        out = []
        for i in range(0, len(event), 64):
            out += decoder.feed(event[i : i + 64])
        out += decoder.close()
        assert len(out) == 1
        return copied

    for shape in (b"data: " + b"x" * 93 + b"\n", b"data: " + b"x" * 2000 + b"\n"):
        small = shape * (1024 * 1024 // len(shape)) + b"\n"
        large = shape * (4 * 1024 * 1024 // len(shape)) + b"\n"
        assert bytes_copied(large) <= 3 * len(large)
        assert bytes_copied(large) <= 4.5 * bytes_copied(small)
    one_line = b"data: " + b"z" * (4 * 1024 * 1024) + b"\n\n"
    assert bytes_copied(one_line) <= 3 * len(one_line)
