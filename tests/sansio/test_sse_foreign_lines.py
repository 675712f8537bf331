"""Lines outside any SSE field (no ``data``/``event``/``id``/``retry``, not a comment or blank)
are collected, when a format asks for them, in order and whatever the read boundaries: Gemini
sends an error after the stream began as a raw JSON object on lines of their own. Nothing else
changes: the events are exactly those of a decoder that ignores the lines, as the spec says."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fluxstream.sse import SSEDecoder

BODY = (
    b'data: {"a": 1}\r\n\r\n'
    b"id: 7\ndata: x\n\n"
    b"{\n"
    b'  "error": {\n'
    b'    "code": 499,\n'
    b'    "message": "The operation was cancelled."\n'
    b"  }\n"
    b"}\n"
    b": comment\n"
    b"event: e\ndata: y\n\n"
    b"garbage\r\n"
    b"data: z"
)
FOREIGN = [b"{", b'  "error": {', b'    "code": 499,',
           b'    "message": "The operation was cancelled."', b"  }", b"}", b"garbage"]


def _decode(pieces: list[bytes], *, collect: bool) -> tuple[list[object], list[bytes] | None]:
    decoder = SSEDecoder()
    if collect:
        decoder.foreign_lines = []
    events: list[object] = []
    for piece in pieces:
        events += decoder.feed(piece)
    events += decoder.close()
    return events, decoder.foreign_lines


def test_lines_outside_fields_are_collected_in_order() -> None:
    events, lines = _decode([BODY], collect=True)
    assert lines == FOREIGN
    assert events == _decode([BODY], collect=False)[0]
    assert [e.data for e in events] == ['{"a": 1}', "x", "y", "z"]  # type: ignore[attr-defined]


def test_a_decoder_that_was_not_asked_collects_nothing() -> None:
    assert _decode([BODY], collect=False)[1] is None


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_read_boundaries_change_nothing(data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(BODY)), max_size=30, unique=True)))
    pieces = [BODY[a:b] for a, b in zip([0, *cuts], [*cuts, len(BODY)], strict=True)]
    assert _decode(pieces, collect=True) == _decode([BODY], collect=True)
    bytewise = [BODY[i : i + 1] for i in range(len(BODY))]
    assert _decode(bytewise, collect=True) == _decode([BODY], collect=True)
