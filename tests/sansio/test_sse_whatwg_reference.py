"""The decoder against an independent, literal reading of the WHATWG event-stream rules.

The other property tests hold the shortcuts to the decoder's own line loop; this one holds
the whole decoder to a reference written straight from the spec, with nothing shared: the
stream decoded as text at once (UTF-8, errors replaced), one leading BOM dropped, lines split
at CRLF, CR or LF, then the spec's field rules (comment, ``data``, ``event``, ``id`` without
NUL, ``retry`` of ASCII digits, a field without colon has an empty value, one space after
the colon removed, unknown fields ignored), dispatch on a blank line (the last event ID is
committed even without data), and fluxstream's end-of-stream policy (``close()`` acts as a
final blank line). Streams are drawn from a hostile alphabet (partial BOMs, NUL, invalid and
split UTF-8, lone CRs, CRLFs cut between reads, fields without colon, retry forms, the shapes
the shortcuts take, values long enough for the run shortcut) and cut into reads anywhere.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluxstream.sse import MAX_RETRY_MS, ServerSentEvent, SSEDecoder

TOKENS = [
    b"data", b"data:", b"data: ", b"id", b"id:", b"id: ", b"event", b"event:", b"event: ",
    b"retry:", b"retry: ", b"retry", b":", b" ", b"\r", b"\n", b"\r\n", b"\n\n", b"\r\n\r\n",
    b"\0", b"\xef\xbb\xbf", b"\xef", b"\xbb", b"1", b"23", b"0", b"00000000000", b"x",
    b"\xc3\xa9", b"\xe2\x82", b"\xff", b"\xd9\xa3", b"data: [DONE]\n\n", b"id: 7\ndata: q\n\n",
    b"event: e\ndata: v\n\n", b": ping\n\n", b"data: hello\n\ndata: world\n\n", b"id: 9\n",
    b"retry: 12\n", b"x" * 600,
]


class Expected(NamedTuple):
    events: list[ServerSentEvent]
    last_event_id: str
    reconnection_time: int | None
    comments: int
    ended_mid_line: bool
    ended_mid_event: bool


def reference(raw: bytes) -> Expected:
    text = raw.decode("utf-8", "replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    lines: list[str] = []
    start = i = 0
    while i < len(text):
        if text[i] == "\r":
            lines.append(text[start:i])
            if text[i + 1 : i + 2] == "\n":
                i += 1
            start = i + 1
        elif text[i] == "\n":
            lines.append(text[start:i])
            start = i + 1
        i += 1
    rest = text[start:]
    if rest:
        lines.append(rest)
    mid_event = False
    for line in lines:
        if not line:
            mid_event = False
        elif not line.startswith(":"):
            mid_event = True
    lines.append("")  # close(): a final blank line
    events: list[ServerSentEvent] = []
    data: str | None = None
    event_type = id_buffer = last_id = ""
    retry: int | None = None
    reconnection: int | None = None
    comments = 0
    for line in lines:
        if not line:
            last_id = id_buffer
            if data is not None:
                events.append(ServerSentEvent(event_type or "message", data, id_buffer, retry))
            data, event_type, retry = None, "", None
            continue
        if line.startswith(":"):
            comments += 1
            continue
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            event_type = value
        elif name == "data":
            data = value if data is None else data + "\n" + value
        elif name == "id":
            if "\0" not in value:
                id_buffer = value
        elif name == "retry" and value and all("0" <= c <= "9" for c in value):
            retry = reconnection = min(int(value), MAX_RETRY_MS)
    return Expected(events, last_id, reconnection, comments, bool(rest), mid_event)


@st.composite
def cut(draw: st.DrawFn, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_stream_in_any_reads_equals_the_spec(data: st.DataObject) -> None:
    raw = b"".join(data.draw(st.lists(st.sampled_from(TOKENS), max_size=100)))
    decoder = SSEDecoder(max_bytes_without_event=1 << 40)
    events: list[ServerSentEvent] = []
    for read in data.draw(cut(raw)):
        events += decoder.feed(read)
    events += decoder.close()
    assert Expected(
        events,
        decoder.last_event_id,
        decoder.reconnection_time,
        decoder.comments,
        decoder.ended_mid_line,
        decoder.ended_mid_event,
    ) == reference(raw)
