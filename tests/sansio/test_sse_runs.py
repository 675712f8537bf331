"""The decoder's run shortcuts (blocks of one shape cut by C-level splits), held to the line loop.

The shapes they take: ``event: E\\ndata: X`` (Responses, Anthropic Messages), with an ``id:``
line after the event line (``fluxstream serve``) or before it (the relay), and ``data: X``
blocks ended by CRLF (Gemini), many to a read, or one read per event. Streams made mostly of
those, mixed with every shape they must refuse (comments, ``retry``, two data lines, the
spelling without a space, an empty event name, an ID with NUL, unknown fields, extra blank
lines, blocks without data, lone CRs, CR/LF/CRLF mixed, a BOM, invalid UTF-8), cut into reads
anywhere, at block boundaries, or in long reads:

* read for read, the decoder equals the general line loop (``LineLoop``): the events (name,
  data, id, retry), ``last_event_id``, ``reconnection_time``, ``comments``, ``in_event``, the
  end-of-stream flags, and where ``max_event_bytes`` or ``max_bytes_without_event`` fails;
* the events equal those of one byte per read;
* the shortcuts are taken (typical streams reach the line loop only for their odd reads);
* buffered bytes are copied O(n) times, however the stream is cut.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sse_fastpaths import LineLoop, decode_until_limit
from test_sse_properties import decode

from fluxstream import sse
from fluxstream._core import sse_runs
from fluxstream.sse import ServerSentEvent, SSEDecoder

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Values: text, raw bytes (invalid UTF-8 included), and long values for reads past 512 bytes;
# never a CR or LF (a line end inside a value is another line: the odd shapes test that).
TEXT = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",))).map(
    str.encode
)
RAW = st.binary(max_size=12).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
VALUE = TEXT | RAW | st.integers(0, 900).map(lambda n: b'{"t":"' + b"x" * n + b'"}')
NAME = st.sampled_from([b"delta", b"response.output_text.delta", b"content_block_delta"]) | TEXT

RUN_SHAPES = ["event", "event", "event", "event_id", "id_event", "data", "data", "id_data"]
ODD_SHAPES = [
    "comment",
    "inner_comment",
    "retry",
    "two_data",
    "nospace",
    "empty_event",
    "nul_id",
    "unknown",
    "blank",
    "id_only",
    "event_only",
    "bare_data",
    "data_event",
    "two_events",
]


@st.composite
def run_streams(draw: st.DrawFn) -> bytes:
    """Mostly blocks of one shape (the shortcuts' runs), some of another, in one line-end
    style: LF, CRLF, or any of CR, LF and CRLF line by line."""
    style = draw(st.sampled_from(["lf", "lf", "crlf", "crlf", "mixed", "noisy_crlf"]))
    shape_of_run = draw(st.sampled_from(RUN_SHAPES))
    name = draw(NAME)
    out = [b"\xef\xbb\xbf"] if draw(st.integers(0, 7)) == 0 else []

    def eol() -> bytes:
        if style == "mixed":
            return draw(st.sampled_from([b"\r", b"\n", b"\r\n"]))
        if style == "noisy_crlf":  # CRLF with a lone CR or LF here and there: near misses
            return draw(st.sampled_from([b"\r", b"\n", *[b"\r\n"] * 8]))
        return b"\n" if style == "lf" else b"\r\n"

    for index in range(draw(st.integers(0, 14))):
        roll = draw(st.integers(0, 9))
        shape = shape_of_run if roll < 6 else draw(st.sampled_from(RUN_SHAPES + ODD_SHAPES))
        this_name = name if roll < 8 else draw(NAME)
        value = draw(VALUE)
        ident = str(index).encode() if draw(st.integers(0, 5)) else draw(TEXT)
        lines = {
            "event": [b"event: " + this_name, b"data: " + value],
            "event_id": [b"event: " + this_name, b"id: " + ident, b"data: " + value],
            "id_event": [b"id: " + ident, b"event: " + this_name, b"data: " + value],
            "data": [b"data: " + value],
            "id_data": [b"id: " + ident, b"data: " + value],
            "comment": [b": " + value],
            "inner_comment": [b"event: " + this_name, b": ping", b"data: " + value],
            "retry": [b"event: " + this_name, b"retry: 1500", b"data: " + value],
            "two_data": [b"event: " + this_name, b"data: " + value, b"data: two"],
            "nospace": [b"event:" + this_name, b"data:" + value],
            "empty_event": [b"event: ", b"data: " + value],
            "nul_id": [b"event: " + this_name, b"id: 1\x002", b"data: " + value],
            "unknown": [b"event: " + this_name, b"foo: bar", b"data: " + value],
            "blank": [],
            "id_only": [b"id: " + ident],
            "event_only": [b"event: " + this_name],
            "bare_data": [b"event: " + this_name, b"data"],
            "data_event": [b"data: " + value, b"event: " + this_name],
            "two_events": [b"event: x", b"event: " + this_name, b"data: " + value],
        }[shape]
        out += [line + eol() for line in lines]
        out.append(eol())
    return b"".join(out)


@st.composite
def reads_of(draw: st.DrawFn, raw: bytes) -> list[bytes]:
    """Cut anywhere, in fixed sizes (long reads for the run shortcuts), or at block ends."""
    how = draw(st.sampled_from(["any", "fixed", "blocks"]))
    if how == "fixed":
        size = draw(st.sampled_from([1, 7, 64, 300, 512, 700, 1500, 4096]))
        return [raw[i : i + size] for i in range(0, len(raw), size)]
    if how == "blocks":  # one or more whole blocks per read, as servers flush them
        blocks = [b for b in raw.replace(b"\r\n", b"\n").split(b"\n\n") if b]
        if raw.replace(b"\r\n", b"\n") != b"\n\n".join(blocks) + b"\n\n" or b"\r" in raw:
            how = "any"  # only for LF streams whose blocks are easy to find
        else:
            per_read = draw(st.integers(1, 4))
            return [
                b"".join(block + b"\n\n" for block in blocks[i : i + per_read])
                for i in range(0, len(blocks), per_read)
            ]
    n = len(raw)
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=min(16, n + 2))))
    return [raw[a:b] for a, b in itertools.pairwise([0, *cuts, n])]


def state(decoder: SSEDecoder) -> tuple[object, ...]:
    return (
        decoder.last_event_id,
        decoder.reconnection_time,
        decoder.comments,
        decoder.in_event,
        decoder.bytes_fed,
    )


def end_state(decoder: SSEDecoder) -> tuple[object, ...]:
    return (*state(decoder), decoder.ended_mid_line, decoder.ended_mid_event)


@SETTINGS
@given(st.data())
def test_runs_equal_the_line_loop_read_for_read(data: st.DataObject) -> None:
    raw = data.draw(run_streams())
    reads = data.draw(reads_of(raw))
    fast, slow = SSEDecoder(), LineLoop()
    for read in reads:
        assert fast.feed(read) == slow.feed(read)
        assert state(fast) == state(slow)
    assert fast.close() == slow.close()
    assert end_state(fast) == end_state(slow)


@SETTINGS
@given(st.data())
def test_runs_equal_one_byte_per_read(data: st.DataObject) -> None:
    raw = data.draw(run_streams())
    reads = data.draw(reads_of(raw))
    fast_events, fast = decode(reads)
    slow_events, slow = decode([raw[i : i + 1] for i in range(len(raw))])
    assert fast_events == slow_events
    assert end_state(fast)[:3] == end_state(slow)[:3]
    assert end_state(fast)[-2:] == end_state(slow)[-2:]


@SETTINGS
@given(st.data())
def test_runs_fail_limits_where_the_line_loop_does(data: st.DataObject) -> None:
    raw = data.draw(run_streams())
    reads = data.draw(reads_of(raw))
    quiet = data.draw(st.sampled_from([3, 12, 40, 200, 10**6]))
    limit = data.draw(st.sampled_from([16, 64, 600, 10**6]))
    fast = SSEDecoder(max_event_bytes=limit, max_bytes_without_event=quiet)
    slow = LineLoop(max_event_bytes=limit, max_bytes_without_event=quiet)
    assert decode_until_limit(fast, reads) == decode_until_limit(slow, reads)


@st.composite
def near_miss_runs(draw: st.DrawFn) -> bytes:
    """A run of one shape, CRLF or LF, with one block made odd: a line added after its data
    line (a second data line, a comment, an ``id``...) and one of its line ends swapped for
    a lone CR or LF."""
    eol = draw(st.sampled_from([b"\r\n", b"\n"]))
    shape = draw(st.sampled_from([[b"event: e"], [b"event: e", b"id: 1"], [b"id: 1", b"event: e"]]))
    if eol == b"\r\n" and draw(st.booleans()):
        shape = []
    count = draw(st.integers(2, 8))
    odd = draw(st.integers(0, count - 1))
    out = []
    for index in range(count):
        lines = [*shape, b"data: %d" % index]
        if index != odd:
            out.append(b"".join(line + eol for line in [*lines, b""]))
            continue
        extra = draw(st.sampled_from([b"", b"data: more", b": c", b"id: 2", b"event: f", b"x"]))
        if extra:
            lines.append(extra)
        lines.append(b"")
        ends = [eol] * len(lines)
        ends[draw(st.integers(0, len(lines) - 1))] = draw(st.sampled_from([b"\r", b"\n"]))
        out.append(b"".join(line + end for line, end in zip(lines, ends, strict=True)))
    return b"".join(out)


@SETTINGS
@given(st.data())
def test_near_miss_runs_equal_the_line_loop(data: st.DataObject) -> None:
    raw = data.draw(near_miss_runs())
    reads = data.draw(reads_of(raw))
    fast, slow = SSEDecoder(), LineLoop()
    for read in reads:
        assert fast.feed(read) == slow.feed(read)
        assert state(fast) == state(slow)
    assert fast.close() == slow.close()
    assert end_state(fast) == end_state(slow)


def near_misses() -> Iterable[bytes]:
    """Every near miss of a three-block run: each shape, each line end, a line added after
    the middle block's data line or not, and each of its line ends swapped (or none)."""
    shapes = [[], [b"event: e"], [b"event: e", b"id: 1"], [b"id: 1", b"event: e"]]
    extras = [b"", b"data: more", b": c", b"id: 2", b"event: f", b"x", b"retry: 5"]
    for eol, shape, extra in itertools.product([b"\r\n", b"\n"], shapes, extras):
        middle = [*shape, b"data: 1", *([extra] if extra else []), b""]
        for swapped, end in itertools.product(range(-1, len(middle)), [b"\r", b"\n"]):
            ends = [end if i == swapped else eol for i in range(len(middle))]
            outer = [blocks(*shape, b"data: %d" % i, eol=eol) for i in (0, 2)]
            odd = b"".join(line + e for line, e in zip(middle, ends, strict=True))
            yield outer[0] + odd + outer[1]


def test_every_near_miss_equals_the_line_loop_at_every_cut() -> None:
    for raw in near_misses():
        for cut in range(len(raw) + 1):
            fast, slow = SSEDecoder(), LineLoop()
            for read in (raw[:cut], raw[cut:]):
                assert fast.feed(read) == slow.feed(read), (raw, cut)
                assert state(fast) == state(slow), (raw, cut)
            assert fast.close() == slow.close(), (raw, cut)
            assert end_state(fast) == end_state(slow), (raw, cut)


# --------------------------------------------------------------------------- named cases


def blocks(*lines: bytes, eol: bytes = b"\n") -> bytes:
    return b"".join(line + eol for line in lines) + eol


@pytest.mark.parametrize(
    "raw",
    [
        blocks(b"event: a", b"data: 1") + blocks(b"event: b", b"data: 2"),
        blocks(b"event: ", b"data: x") * 3,  # an empty name is "message"
        blocks(b"event: a", b"data:  two spaces") * 3,  # one space removed
        blocks(b"event: a", b"id: 7", b"data: x") + blocks(b"event: a", b"id: 8", b"data: y"),
        blocks(b"id: 7", b"event: a", b"data: x") + blocks(b"id: ", b"event: a", b"data: y"),
        blocks(b"event: a", b"data: \xff\xe6\x97") * 3,  # invalid UTF-8: U+FFFD, per line
        blocks(b"event: \xe6\x97", b"data: x") * 3,
        blocks(b"data: a", eol=b"\r\n") * 3,
        blocks(b"event: a", b"data: x", eol=b"\r\n") * 3,
        blocks(b"data: a", eol=b"\r\n") + blocks(b"data: b", eol=b"\n"),  # mixed: the loop
        blocks(b"data: a", eol=b"\r\n") + b"data: b\r\r",
        blocks(b"data: a\rdata: b", eol=b"\r\n") * 2,  # a lone CR inside a block
        b"data: x\r\n\rdata: y\r\n\r\n",  # a blank line ended by a lone CR
        blocks(b"event: a", b"data: x", eol=b"\r\n") + b"event: a\r\ndata: y\rz\r\n\r\n",
        b"event: a\nid: 1\r\ndata: x\r\n\r\n" + blocks(b"event: a", b"data: y", eol=b"\r\n"),
        b"event: a\rid: 1\r\ndata: x\r\n\r\n" + blocks(b"event: a", b"data: y", eol=b"\r\n"),
        blocks(b"event: a", b"data: x") + blocks(b"event: a", b"data: x", b"data: y"),
        blocks(b"event: a", b"data: x") + b": ping\n\n" + blocks(b"event: a", b"data: y"),
        blocks(b"event: a", b"data: x") + blocks(b"event: a", b"id: 1\x00", b"data: y"),
        blocks(b"event: a", b"data: x") * 2 + b"event: a\nretry: 7\ndata: y",
        blocks(b"event: a", b"data: x") * 2 + b"event: a\n: c\ndata: y",
        blocks(b"event: a", b"data: x") * 2 + b"event: a\n\n\n",
    ],
)
def test_shapes_as_one_read_in_two_and_bytewise(raw: bytes) -> None:
    """Each stream after a first event (so the shortcuts' state is not the initial one), as
    one read, cut at every point into two reads, and one byte per read."""
    first = b"id: 1\ndata: first\n\n"
    whole = first + raw
    slow_events, slow = decode([whole[i : i + 1] for i in range(len(whole))])
    for cut in range(len(raw) + 1):
        reads = [first, raw[:cut], raw[cut:]]
        fast, line_loop = SSEDecoder(), LineLoop()
        for read in reads:
            assert fast.feed(read) == line_loop.feed(read), (cut, read)
            assert state(fast) == state(line_loop), (cut, read)
        assert fast.close() == line_loop.close()
        assert end_state(fast) == end_state(line_loop)
    assert decode([first, raw])[0] == slow_events
    assert slow.last_event_id == decode([first, raw])[1].last_event_id


def test_names_ids_and_values_come_out_right() -> None:
    raw = (
        blocks(b"event: delta", b'data: {"a": 1}')
        + blocks(b"event: ", b"data: e")
        + blocks(b"event: caf\xc3\xa9", b"data:  x")
    ) * 40
    events, decoder = decode([raw[i : i + 1024] for i in range(0, len(raw), 1024)])
    assert events[:3] == [
        ServerSentEvent("delta", '{"a": 1}', "", None),
        ServerSentEvent("message", "e", "", None),
        ServerSentEvent("café", " x", "", None),
    ]
    assert len(events) == 120 and decoder.last_event_id == ""
    raw = b"".join(blocks(b"id: %d" % i, b"event: e", b"data: %d" % i) for i in range(60))
    events, decoder = decode([raw[i : i + 700] for i in range(0, len(raw), 700)])
    assert [(e.id, e.data) for e in events] == [(str(i), str(i)) for i in range(60)]
    assert decoder.last_event_id == "59"


# --------------------------------------------------------------------------- taken


def typical_streams() -> dict[str, bytes]:
    value = b'{"type":"delta","delta":{"text":" caf\xc3\xa9 \xe2\x9c\x93 word"},"index":0}'
    return {
        "named": blocks(b"event: content_block_delta", b"data: " + value) * 400,
        "named_with_id": b"".join(
            blocks(b"event: delta", b"id: %d" % i, b"data: " + value) for i in range(400)
        ),
        "relay": b"".join(
            blocks(b"id: 0-%d" % i, b"event: text", b"data: " + value) for i in range(400)
        ),
        "crlf": blocks(b"data: " + value, eol=b"\r\n") * 400,
    }


@pytest.mark.parametrize("kind", ["named", "named_with_id", "relay", "crlf"])
@pytest.mark.parametrize("size", [0, 700, 4096])
def test_the_shortcuts_are_taken(monkeypatch: pytest.MonkeyPatch, kind: str, size: int) -> None:
    """Typical streams, one event per read (``size`` 0) or in long reads, reach the line loop
    for a few reads at most: a shortcut that refuses what it is for fails here."""
    raw = typical_streams()[kind]
    calls = 0
    general = SSEDecoder._lines

    def counted(self: SSEDecoder, *args: object, **kwargs: object) -> list[ServerSentEvent]:
        nonlocal calls
        calls += 1
        return general(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(SSEDecoder, "_lines", counted)
    if size:
        reads = [raw[i : i + size] for i in range(0, len(raw), size)]
    else:
        eol = b"\r\n\r\n" if kind == "crlf" else b"\n\n"
        reads = [block + eol for block in raw.split(eol) if block]
    events, _ = decode(reads)
    assert len(events) == 400
    monkeypatch.setattr(SSEDecoder, "_lines", general)
    assert events == decode([raw[i : i + 1] for i in range(len(raw))])[0]
    # A read that ends within a CRLF block's blank line, or a relay read kept for id_run:
    # rare; every one of them would be one per read if a shortcut refused its shape.
    assert calls <= len(reads) // 10 + 2, (calls, len(reads))


# --------------------------------------------------------------------------- linear


def count_copies(monkeypatch: pytest.MonkeyPatch) -> Callable[[Iterable[bytes]], int]:
    """Bytes copied through ``sse._join``, ``sse._join_lines`` and the run shortcuts'
    ``sse_runs._join`` while decoding ``reads``."""
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
    monkeypatch.setattr(sse_runs, "_join", counting(sse_runs._join))

    def run(reads: Iterable[bytes]) -> int:
        nonlocal copied
        copied = 0
        decode(list(reads))
        return copied

    return run


@pytest.mark.parametrize("size", [64, 700, 4096])
@pytest.mark.parametrize(
    "block",
    [
        blocks(b"event: delta", b"data: " + b"x" * 90),
        blocks(b"event: delta", b"data: " + b"x" * 5000),
        blocks(b"id: 1", b"event: delta", b"data: " + b"x" * 5000),
        blocks(b"event: delta", b"data: " + b"x" * 90, eol=b"\r\n"),
        blocks(b"data: " + b"x" * 5000, eol=b"\r\n"),
    ],
)
def test_bytes_copied_grow_linearly(
    monkeypatch: pytest.MonkeyPatch, size: int, block: bytes
) -> None:
    copies = count_copies(monkeypatch)
    small = block * (256 * 1024 // len(block) + 1)
    large = block * (1024 * 1024 // len(block) + 1)
    small_copied = copies(small[i : i + size] for i in range(0, len(small), size))
    large_copied = copies(large[i : i + size] for i in range(0, len(large), size))
    assert large_copied <= 6 * len(large)
    assert large_copied <= 4.5 * max(small_copied, len(small))


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
def test_one_huge_named_event_is_copied_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch, eol: bytes
) -> None:
    copies = count_copies(monkeypatch)
    raw = blocks(b"event: delta", b"id: 5", b"data: " + b"z" * (4 * 1024 * 1024), eol=eol)
    assert copies(raw[i : i + 4096] for i in range(0, len(raw), 4096)) <= 6 * len(raw)


@pytest.mark.parametrize("size", [700, 4096])
def test_a_block_of_many_lines_is_not_kept_unread_again_and_again(
    monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    """The run shortcut keeps an unfinished block's first lines unread only while they are
    few: a block of thousands of data lines goes to the line loop once, not re-read by every
    read that completes another line of it."""
    copies = count_copies(monkeypatch)

    def copied(lines: int) -> tuple[int, int]:
        raw = blocks(b"event: delta", *[b"data: " + b"y" * 100] * lines)
        return copies(raw[i : i + size] for i in range(0, len(raw), size)), len(raw)

    small, _ = copied(2000)
    large, length = copied(8000)
    assert large <= 6 * length
    assert large <= 4.5 * small
