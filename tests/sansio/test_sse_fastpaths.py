"""The decoder's shortcuts for ``id:``/``event:``-prefixed blocks, held to the line loop.

Streams made mostly of the shapes the shortcuts take (``id: N\\ndata: X\\n\\n``,
``event: E\\ndata: X``, ``event: E\\nid: N\\ndata: X``, either spelling, heartbeats), mixed with
shapes they must refuse (an ID with NUL, ``retry`` (alone or after an ``id:`` line), a
comment inside a block, two data lines, an id-only block, unknown fields, CRLF), in any split
and with reads long enough (>= 512 bytes) for the run shortcut:

* the events, ``last_event_id``, ``reconnection_time``, ``comments`` and the end-of-stream flags
  equal those of one byte per read (which takes the line loop) and of a small reference model;
* after every read, the events and public state equal those of the bytes so far in one read;
* with a small ``max_event_bytes``, the split fails exactly when the one-byte decode does;
* read for read, the shortcuts equal the general line loop (``LineLoop``): events, state and
  where ``max_event_bytes`` or ``max_bytes_without_event`` fails.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sse_properties import Stream, decode  # one driver for every property test

from fluxstream.errors import EventTooLargeError, LimitExceededError
from fluxstream.sse import LineDecoder, ServerSentEvent, SSEDecoder

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TEXT = st.text(st.characters(blacklist_characters="\r\n\0", blacklist_categories=("Cs",)))
# Long values too, so that whole reads reach the run shortcut's 512-byte threshold.
VALUE = TEXT | st.integers(0, 700).map(lambda n: "x" * n)


@st.composite
def streams(draw: st.DrawFn) -> Stream:
    out: list[str] = []
    events: list[ServerSentEvent] = []
    last_id = ""
    reconnection: int | None = None
    comments = 0
    eol = "\r\n" if draw(st.integers(0, 9)) == 0 else "\n"

    def sp() -> str:
        return draw(st.sampled_from([": ", ":"]))

    for _ in range(draw(st.integers(0, 8))):
        shape = draw(
            st.sampled_from(
                [
                    "id",
                    "id",
                    "id",
                    "event",
                    "event_id",
                    "ping",
                    "data",
                    "nul_id",
                    "retry",
                    "two_data",
                    "id_only",
                    "unknown",
                    "id_event",
                    "empty_id",
                    "id_retry",
                    "id_comment",
                ]
            )
        )
        value = draw(VALUE)
        lines: list[str] = []
        event_type = ""
        data: list[str] | None = [value]
        retry: int | None = None
        if shape == "ping":
            lines = [":" + draw(TEXT)]
            comments += 1
            data = None
        else:
            if shape in ("event", "event_id", "id_event"):
                event_type = draw(TEXT.filter(lambda v: not v.startswith(" ")))
            if shape == "event_id":
                lines.append("event" + sp() + event_type)
            if shape in (
                "id", "event_id", "id_event", "id_only", "empty_id", "id_retry", "id_comment"
            ):
                new_id = (
                    ""
                    if shape == "empty_id"
                    else draw(TEXT.filter(lambda v: not v.startswith(" ")))
                )
                lines.append("id" + sp() + new_id)
                last_id = new_id
            if shape in ("event", "id_event"):
                lines.append("event" + sp() + event_type)
            if shape == "nul_id":
                lines.append("id: a\0b")  # ignored
            if shape == "id_comment":  # a comment inside a block: counted, nothing else
                lines.append(":" + draw(TEXT))
                comments += 1
            if shape in ("retry", "id_retry"):
                retry = draw(st.integers(0, 10**6))
                lines.append(f"retry: {retry}")
                reconnection = retry
            if shape == "unknown":
                lines.append("foo: bar")
            if shape == "id_only":
                data = None
            else:
                s = sp()
                lines.append("data" + s + value)
                if s == ":" and value.startswith(" "):
                    value = value[1:]  # "data: x" read as "data:" + " x": one space removed
                data = [value]
                if shape == "two_data":
                    lines.append("data: second")
                    data = [value, "second"]
        out.append("".join(line + eol for line in lines) + eol)
        if data is not None:
            events.append(ServerSentEvent(event_type or "message", "\n".join(data), last_id, retry))
    return Stream("".join(out).encode(), events, last_id, reconnection, comments)


@st.composite
def splits(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """Cuts of any size, often long reads (the run shortcut wants at least 512 bytes)."""
    n = len(data)
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=min(12, n + 2))))
    bounds = [0, *cuts, n]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def state(decoder: SSEDecoder) -> tuple[object, ...]:
    return (
        decoder.last_event_id,
        decoder.reconnection_time,
        decoder.comments,
        decoder.ended_mid_line,
        decoder.ended_mid_event,
        decoder.in_event,
        decoder.bytes_fed,
    )


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


@SETTINGS
@given(st.data())
def test_any_split_equals_model_and_line_loop(data: st.DataObject) -> None:
    stream = data.draw(streams())
    reads = data.draw(splits(stream.raw))
    split_events, split = decode(reads)
    whole_events, whole = decode([stream.raw])
    slow_events, slow = decode(bytewise(stream.raw))
    assert whole_events == stream.events
    assert split_events == stream.events
    assert slow_events == stream.events
    assert state(split) == state(whole) == state(slow)
    assert split.last_event_id == stream.last_event_id
    assert split.reconnection_time == stream.reconnection_time
    assert split.comments == stream.comments


@SETTINGS
@given(st.data())
def test_cut_streams_report_the_same_end(data: st.DataObject) -> None:
    """A stream cut anywhere: events, flags and state equal the one-byte decode's."""
    stream = data.draw(streams())
    cut = data.draw(st.integers(0, len(stream.raw)))
    raw = stream.raw[:cut]
    reads = data.draw(splits(raw))
    split_events, split = decode(reads)
    slow_events, slow = decode(bytewise(raw))
    assert split_events == slow_events
    assert state(split) == state(slow)


@SETTINGS
@given(st.data())
def test_state_after_every_read_equals_the_bytes_so_far_in_one_read(data: st.DataObject) -> None:
    stream = data.draw(streams())
    reads = data.draw(splits(stream.raw))
    decoder = SSEDecoder()
    got: list[ServerSentEvent] = []
    fed = b""
    for read in reads:
        got += decoder.feed(read)
        fed += read
        reference = SSEDecoder()
        assert got == reference.feed(fed)
        assert decoder.last_event_id == reference.last_event_id
        assert decoder.comments == reference.comments
        assert decoder.reconnection_time == reference.reconnection_time
        assert decoder.in_event == reference.in_event


@SETTINGS
@given(st.data())
def test_limit_does_not_depend_on_the_split(data: st.DataObject) -> None:
    stream = data.draw(streams())
    reads = data.draw(splits(stream.raw))
    limit = data.draw(st.sampled_from([8, 20, 64, 300, 600, 1000]))
    try:
        slow_events, _ = decode(bytewise(stream.raw), limit)
    except EventTooLargeError:
        with pytest.raises(EventTooLargeError):
            decode(reads, limit)
    else:
        assert decode(reads, limit)[0] == slow_events


#: The decoder without its shortcuts: every read goes through the general line loop
#: (``_lines``, the WHATWG state machine), the reference for the shortcuts on the *same* reads
#: (one byte per read takes the loop too, but its limits are checked at other moments: a
#: read's bytes without an event are counted when the read ends).
LineLoop = LineDecoder


def decode_until_limit(
    decoder: SSEDecoder, reads: list[bytes]
) -> tuple[list[ServerSentEvent], str | None, tuple[object, ...]]:
    """Events up to where a limit fails (and which one), and the state at that point."""
    events: list[ServerSentEvent] = []
    failed = None
    try:
        for read in reads:
            events += decoder.feed(read)
        events += decoder.close()
    except LimitExceededError as exc:
        failed = exc.name
    except EventTooLargeError:
        failed = "max_event_bytes"
    return events, failed, (decoder.last_event_id, decoder.reconnection_time, decoder.comments)


@SETTINGS
@given(st.data())
def test_shortcuts_equal_the_line_loop_on_the_same_reads(data: st.DataObject) -> None:
    """Fast paths against the general loop, read for read: events, state and where a limit
    fails (``max_bytes_without_event`` counts the blocks without data since the last event,
    whichever path built that event)."""
    stream = data.draw(streams())
    reads = data.draw(splits(stream.raw))
    quiet = data.draw(st.sampled_from([5, 12, 30, 64, 200, 10**6]))
    limit = data.draw(st.sampled_from([20, 64, 600, 10**6]))
    fast = SSEDecoder(max_event_bytes=limit, max_bytes_without_event=quiet)
    slow = LineLoop(max_event_bytes=limit, max_bytes_without_event=quiet)
    assert decode_until_limit(fast, reads) == decode_until_limit(slow, reads)


@pytest.mark.parametrize(
    "raw",
    [
        b"id: 2\ndata: a\n\n" + b"id: 3\n\n" * 3,  # shortcut 4, then id-only blocks
        b"data: a\n\ndata: b\n\n" + b": ping\n\n" * 3,  # shortcut 2, then heartbeats
    ],
)
def test_events_before_a_crossed_limit_are_delivered(raw: bytes) -> None:
    """Blocks without an event after the events of the same read cross
    ``max_bytes_without_event``: the events come out, and the *next* call raises (they were
    lost: the line loop raised while the shortcut held them)."""
    decoder = SSEDecoder(max_bytes_without_event=10)
    reference = LineLoop(max_bytes_without_event=10)
    expected = reference.feed(raw)
    assert expected and expected == decoder.feed(raw)
    with pytest.raises(LimitExceededError):
        decoder.feed(b"data: later\n\n")


@pytest.mark.parametrize(
    "reads",
    [
        [b"id: 1\n\n", b"id: 2\ndata: a\n\nid: 3\n\n", b"id: 5\ndata: b\n\n"],
        [b"id: 1\n\n", b"id: 2\ndata: a\n\nid: 3\n\nid: 4\ndata: b\n\n"],
    ],
)
def test_bytes_without_event_count_from_the_last_event(reads: list[bytes]) -> None:
    """An event built by the ``id:`` run shortcut resets the count of bytes without an
    event, as one built by the line loop does (the count went on from before it)."""
    fast = SSEDecoder(max_bytes_without_event=10)
    slow = LineLoop(max_bytes_without_event=10)
    assert decode_until_limit(fast, reads) == decode_until_limit(slow, reads)
    assert decode_until_limit(SSEDecoder(max_bytes_without_event=10), reads)[1] is None


def test_id_run_resumes_after_a_block_of_another_shape() -> None:
    """A server's first block carries ``retry`` (``fluxstream serve`` does): the blocks after
    it in the same long read are still decoded (and equal the line loop's)."""
    blocks = [b"id: 1\nretry: 50\ndata: first\n\n"]
    blocks += [b"id: %d\ndata: {\"n\": %d}\n\n" % (i, i) for i in range(2, 60)]
    blocks.insert(30, b"id: 30b\nevent: odd\ndata: x\n\n: ping\n\n")
    raw = b"".join(blocks)
    fast_events, fast = decode([raw])
    slow_events, slow = decode(bytewise(raw))
    assert fast_events == slow_events
    assert len(fast_events) == 60
    assert fast_events[0].retry == 50 and fast_events[30].event == "odd"
    assert fast.comments == 1 and fast.last_event_id == "59"
    assert state(fast) == state(slow)


# --------------------------------------------------------------------------- named cases

LONG = "y" * 600


@pytest.mark.parametrize(
    "raw",
    [
        b"id: 7\ndata: hi\n\n",
        b"id:7\ndata:hi\n\n",
        b"event: delta\ndata: hi\n\n",
        b"event:delta\nid:7\ndata: hi\n\n",
        b"event: delta\nid: 7\ndata: hi\n\n",
        b"id: 7\nevent: delta\ndata: hi\n\n",
        b"id: a\0b\ndata: hi\n\n",
        b"id: 7\nretry: 5\ndata: hi\n\n",
        b"id: 7\n\n",
        b"id: 7\ndata: a\ndata: b\n\n",
        b"event: \ndata: x\n\n",
        b"id: \ndata: x\n\n",
        b"id:  7\ndata:  x\n\n",
        b"event: e\n: c\ndata: x\n\n",
    ],
)
def test_one_event_per_read_shapes(raw: bytes) -> None:
    """Each as one read (the one-event shortcut) after a first event, and byte by byte."""
    first = b"id: 1\ndata: first\n\n"
    fast_events, fast = decode([first, raw])
    slow_events, slow = decode(bytewise(first + raw))
    assert fast_events == slow_events
    assert state(fast)[:5] == state(slow)[:5]


def test_run_of_id_events_in_long_reads() -> None:
    raw = b"".join(f"id: {i}\ndata: {LONG if i % 3 == 0 else i}\n\n".encode() for i in range(50))
    for size in (512, 700, 1024, 4096, len(raw)):
        reads = [raw[i : i + size] for i in range(0, len(raw), size)]
        events, decoder = decode(reads)
        assert [e.id for e in events] == [str(i) for i in range(50)]
        assert events == decode(bytewise(raw))[0]
        assert decoder.last_event_id == "49"
        assert not decoder.ended_mid_event and not decoder.ended_mid_line


def test_block_kept_unread_still_ends_the_stream_right() -> None:
    """The run shortcut keeps an unfinished block's first lines unread: close() must still
    see them as complete lines (mid-event, not mid-line) and apply them."""
    read = b"id: 1\ndata: " + LONG.encode() + b"\n\nid: 2\n"
    events, decoder = decode([read])
    assert [e.id for e in events] == ["1"]
    assert decoder.last_event_id == "2"
    assert decoder.ended_mid_event and not decoder.ended_mid_line
    events, decoder = decode([read + b"data: cut"])
    assert [(e.id, e.data) for e in events] == [("1", LONG), ("2", "cut")]
    assert decoder.ended_mid_event and decoder.ended_mid_line


def test_block_kept_unread_then_a_cr_read() -> None:
    read = b"id: 1\ndata: " + LONG.encode() + b"\n\nid: 2\ndata: a"
    assert decode([read, b"b\r\r"])[0] == decode(bytewise(read + b"b\r\r"))[0]
    assert [e.data for e in decode([read, b"b\r\r"])[0]] == [LONG, "ab"]


def test_comment_completing_in_a_long_read_is_counted_at_once() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"id: 1\ndata: " + LONG.encode() + b"\n\nid: 2\n: ping\n")
    assert decoder.comments == 1


@pytest.mark.parametrize(
    "raw",
    [
        b"id: \n\nid: \ndata: \n\n",  # found by the read-for-read property
        b"id: 1\n\n: c\n\nid: 2\ndata: x\n\n" + b"id: 3\ndata: y\n\n" * 40,
        b"id: 1\n\nid: 2\ndata: x\n\nid: 3\ndata: z",  # the unfinished block is kept unread
    ],
)
def test_bytes_without_event_are_checked_when_the_read_is_done(raw: bytes) -> None:
    """Blocks without data before an event of the same read do not fail the stream, however
    the ``id:`` run splits the read (the loop counts them when the whole read is done, and
    the event resets the count); the same blocks alone do."""
    for quiet in (5, 8, 12):
        fast = SSEDecoder(max_bytes_without_event=quiet)
        slow = LineLoop(max_bytes_without_event=quiet)
        assert decode_until_limit(fast, [raw]) == decode_until_limit(slow, [raw])
        assert decode_until_limit(SSEDecoder(max_bytes_without_event=quiet), [raw])[1] is None
    alone = b"id: 1\n\n: c\n\n"
    assert decode_until_limit(SSEDecoder(max_bytes_without_event=5), [alone])[1] is not None
