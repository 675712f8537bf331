"""Property tests: how a stream is cut into reads never changes what the decoder produces.

* For any valid stream (events with arbitrary text, CR/LF/CRLF line ends, comments, ids, retry,
  an optional BOM) and any split into reads, the events equal the one-read result and the
  events a small reference model expects.
* Arbitrary bytes in any split never raise anything but ``EventTooLargeError`` (sometimes with
  a small limit), and raise it exactly when the one-read decode does.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluxstream.errors import EventTooLargeError
from fluxstream.sse import ServerSentEvent, SSEDecoder

SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Field values: any text without CR/LF (U+2028, U+0085, VT, FF... included), no surrogates.
VALUE = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)))
EOL = st.sampled_from(["\n", "\r", "\r\n"])


@dataclass
class Stream:
    raw: bytes
    events: list[ServerSentEvent]
    last_event_id: str
    reconnection_time: int | None
    comments: int


@st.composite
def valid_streams(draw: st.DrawFn) -> Stream:
    """A stream plus what it must decode to, built by a tiny reference model of the spec."""
    out: list[str] = ["\ufeff"] if draw(st.booleans()) else []
    events: list[ServerSentEvent] = []
    last_id = ""
    reconnection: int | None = None
    comments = 0
    prev_eol = ""

    def line(text: str) -> None:
        nonlocal prev_eol
        eol = draw(EOL)
        if prev_eol == "\r" and not text and eol == "\n":
            eol = "\r"  # CR then an empty line ended by LF would read as one CRLF
        out.append(text + eol)
        prev_eol = eol

    for _ in range(draw(st.integers(0, 6))):
        data: list[str] = []
        event_type = ""
        retry: int | None = None
        kinds = st.sampled_from(["data", "data", "data", "comment", "id", "event", "retry"])
        for kind in draw(st.lists(kinds, max_size=6)):
            if kind == "data":
                value = draw(VALUE)
                if draw(st.booleans()) or value.startswith(" "):
                    line("data: " + value)
                else:
                    line("data:" + value)
                data.append(value)
            elif kind == "comment":
                line(":" + draw(VALUE))
                comments += 1
            elif kind == "id":
                value = draw(VALUE.filter(lambda v: "\0" not in v))
                line("id: " + value)
                last_id = value
            elif kind == "event":
                event_type = draw(VALUE)
                line("event: " + event_type)
            else:
                retry = draw(st.integers(0, 10**9))
                line(f"retry: {retry}")
                reconnection = retry
        line("")  # the blank line: dispatch
        if data:
            events.append(ServerSentEvent(event_type or "message", "\n".join(data), last_id, retry))
    return Stream("".join(out).encode(), events, last_id, reconnection, comments)


@st.composite
def splits(draw: st.DrawFn, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=min(40, len(data) + 5))))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def decode(
    reads: list[bytes], limit: int | None = None
) -> tuple[list[ServerSentEvent], SSEDecoder]:
    decoder = SSEDecoder() if limit is None else SSEDecoder(max_event_bytes=limit)
    events: list[ServerSentEvent] = []
    for read in reads:
        events += decoder.feed(read)
    events += decoder.close()
    return events, decoder


@SETTINGS
@given(st.data())
def test_valid_stream_any_split_equals_one_read_and_expected(data: st.DataObject) -> None:
    stream = data.draw(valid_streams())
    reads = data.draw(splits(stream.raw))
    whole_events, whole = decode([stream.raw])
    split_events, split = decode(reads)
    assert whole_events == stream.events
    assert split_events == whole_events
    for decoder in (whole, split):
        assert decoder.last_event_id == stream.last_event_id
        assert decoder.reconnection_time == stream.reconnection_time
        assert decoder.comments == stream.comments
        assert not decoder.ended_mid_line
        assert not decoder.ended_mid_event


@SETTINGS
@given(st.data())
def test_valid_stream_one_byte_per_read(data: st.DataObject) -> None:
    stream = data.draw(valid_streams())
    events, _ = decode([stream.raw[i : i + 1] for i in range(len(stream.raw))])
    assert events == stream.events


@SETTINGS
@given(st.data())
def test_events_are_returned_by_the_read_that_completes_them(data: st.DataObject) -> None:
    """Dispatch is never held back: after each read, the events so far are exactly those of
    the bytes so far decoded as one read (whose last blank line ended them)."""
    stream = data.draw(valid_streams())
    reads = data.draw(splits(stream.raw))
    decoder = SSEDecoder()
    got: list[ServerSentEvent] = []
    fed = b""
    for read in reads:
        got += decoder.feed(read)
        fed += read
        reference = SSEDecoder()
        assert got == reference.feed(fed)


BINARY = st.binary(max_size=300) | st.lists(
    st.sampled_from(
        [
            b"data:",
            b"data: ",
            b"id:",
            b"event:",
            b"retry:",
            b":",
            b"x",
            b"1",
            b" ",
            b"\n",
            b"\r",
            b"\r\n",
            b"\n\n",
            b"\x00",
            b"\xff",
            b"\xef\xbb\xbf",
            b"\xe6\x97",
            b"\xa5",
        ]
    ),
    max_size=80,
).map(b"".join)


@SETTINGS
@given(st.data())
def test_arbitrary_bytes_never_raise_anything_but_event_too_large(data: st.DataObject) -> None:
    raw = data.draw(BINARY)
    reads = data.draw(splits(raw))
    limit = data.draw(st.sampled_from([None, None, 1, 8, 20, 64]))
    try:
        whole_events, _ = decode([raw], limit)
    except EventTooLargeError as error:
        assert error.limit == (limit or 16 * 1024 * 1024)
        whole_failed = True
    else:
        whole_failed = False
    try:
        split_events, _ = decode(reads, limit)
    except EventTooLargeError:
        assert whole_failed  # the limit does not depend on how the bytes were cut
    else:
        assert not whole_failed
        assert split_events == whole_events
