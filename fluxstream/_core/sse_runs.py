"""The SSE decoder's run shortcuts: a read of many blocks of one shape, cut with C-level splits.

:meth:`fluxstream.sse.SSEDecoder.feed` is a dispatch: it sends a read that starts at a block
boundary (nothing of an event interpreted yet, no lone CR left from the read before) and fits
within ``max_event_bytes`` to one of these when the read's first bytes say it is a run of the
shapes LLM servers write, and every other read to the WHATWG line loop (``_lines``). A run
costs a fixed number of C calls per read instead of a loop step per line. (The one-event
shortcuts and shortcut 2, a run of one-line ``data:`` events, are written out in the
dispatch: a call costs about as much as a short event.)

* :func:`id_run` (shortcut 4) is taken when the read starts with ``id: `` and its lines end in
  LF (``id: N\\ndata: X`` blocks, as servers that support ``Last-Event-ID`` resume write every
  event), for a read of 512 bytes or more, or one ended by a blank line that is not one
  event of a few lines;
* :func:`block_run` (shortcut 5) is taken when the read starts with ``event: `` (or with
  ``id: `` and names its event on the second line, as the relay writes) and its lines end in
  LF, for a read of 512 bytes or more, or one ended by a blank line after more than one
  block; and for a read whose lines end in CRLF (Gemini's ``data:`` blocks) that is not one
  event: blocks of ``event: E`` and/or ``id: N`` lines and one ``data: X`` line, cut by
  :func:`cut_run`.

Each falls back to the line loop, on the same bytes, for any block of another shape (a
comment, a ``retry``, two data lines, the spelling without a space, an ID with NUL, a lone
CR or LF, a CRLF among LF line ends): ``block_run`` refuses the whole read (``None``, nothing
changed) when its first run is refused, and after a first run sends the rest of the read
there; ``id_run`` sends each run of odd blocks there and comes back for the blocks after
it. An unfinished last block is kept unread (at most three lines: no comment or retry,
whose effects are due when their line ends), so that the next read starts at a block
boundary and comes here again; a block is re-read at most three times, so decoding stays
O(n).

Held equal to the general path (:class:`fluxstream.sse.LineDecoder`: every read through the
line loop) read for read, in events, state and where a limit fails, by
``tests/sansio/test_sse_runs.py::test_runs_equal_the_line_loop_read_for_read`` (and the
near misses there),
``tests/sansio/test_sse_fastpaths.py::test_shortcuts_equal_the_line_loop_on_the_same_reads``,
and on every registered format's recorded streams by
``tests/formats/test_fast_paths.py::test_fast_paths_equal_the_general_path``; that they are
taken, by ``tests/sansio/test_sse_runs.py::test_the_shortcuts_are_taken``.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice, repeat
from typing import Protocol

from .sse_event import ServerSentEvent
from .sse_event import new_event as _new_event

__all__ = ["Decoder", "block_run", "cut_run", "id_run", "second_line_names_event"]

# As in fluxstream.sse: buffered bytes are joined only through this global, so that the tests
# count the bytes copied (tests/sansio/test_sse_runs.py::test_bytes_copied_grow_linearly).
_join = b"".join


class Decoder(Protocol):
    """What a run reads and writes of :class:`fluxstream.sse.SSEDecoder`'s state machine."""

    #: The last event ID as of the last blank line, and the ID buffer (equal at a boundary).
    last_event_id: str
    _id: str
    #: Bytes consumed since the last event without dispatching one.
    _quiet: int
    #: The bytes kept unread (the start of a line, or a block's first whole lines).
    _pending: list[bytes]
    _pending_len: int

    @property
    def _quiet_limit(self) -> int: ...

    @property
    def _failed(self) -> object: ...

    def _lines(
        self, lines: list[bytes], rest: bytes = b"", *, held: bool = False, more: bool = False
    ) -> list[ServerSentEvent]: ...

    def _fail_quiet(self, size: int, *, lazy: bool = False) -> None: ...


def second_line_names_event(data: bytes) -> bool:
    """The read's second line is an ``event:`` line (``id: N\\nevent: E\\ndata: X``, as the
    relay writes its blocks): a run for :func:`block_run`, not :func:`id_run`."""
    second = data.find(b"\n") + 1
    return data[second : second + 6] == b"event:"


def cut_run(
    data: bytes, crlf: bool, *, uniform: bool
) -> tuple[Iterable[str], list[str], list[str] | None, bytes, bytes] | None:
    """Cut a read that starts at a block boundary with a ``data: ``, ``event: `` or ``id: ``
    line (that spelling) into the event names, data values and IDs of a run of complete
    blocks of one shape; ``None`` when a block of the run has another shape.

    The shape: the first line's field, then, unless it is ``data``, at most one ``event: ``
    or ``id: `` line and one ``data: `` line, a blank line; every line ended by LF (when
    ``crlf``: by CRLF). Like shortcut 2 (in ``SSEDecoder.feed``), the read is cut with
    C-level splits on long separators (the blank line and the next block's first field;
    then the data line, then the second field), which leave each value alone, prefix and
    terminators removed. A piece that holds a CR or LF means that some block has another
    shape (two data lines, a comment, a retry...), and one join and ``in`` per kind of piece
    test that for all pieces at once. Each piece is decoded on its own, as the line loop
    decodes its lines, by ``map`` (no loop step per block in Python). The values equal the
    line loop's: one leading space removed; an empty event name is ``message``; an ID with
    NUL (ignored by the spec) refuses the read.

    ``uniform``: ``event: NAME\\ndata: X`` blocks of the first block's name, as nearly every
    block of a Responses or Anthropic stream is: the separator between two values is then
    one constant, and one split leaves the values alone (no partition of each block). The
    run stops at the first block of another name.

    Returns the names, the data, the IDs (``None``: no ``id`` lines), and what follows the
    run: ``(first, tail)``, the unfinished last block as its first prefix and the rest; or
    ``(b"", rest)``, complete blocks of another name from a block boundary on (``rest``
    empty: the read ended with the run).
    """
    eol = b"\r\n" if crlf else b"\n"
    if data[:6] == b"data: ":
        first = b"data: "
    elif data[:7] == b"event: ":
        first, second = b"event: ", b"id: "
        if uniform:
            return _cut_named_run(data, eol)
    elif data[:4] == b"id: ":
        first, second = b"id: ", b"event: "
    else:
        return None
    pieces = data.split(eol + eol + first)
    pieces[0] = pieces[0][len(first) :]
    tail = pieces.pop()
    if tail[-2 * len(eol) :] == eol + eol:  # the read ends with a blank line
        pieces.append(tail[: -2 * len(eol)])
        tail = first = b""
    names: Iterable[bytes] = ()
    ids: Iterable[bytes] | None = None
    if data[:6] == b"data: " or not pieces:
        values = pieces
    else:
        parts = map(bytes.partition, pieces, repeat(eol + b"data: "))
        heads, seps, values_ = zip(*parts, strict=True)
        values = list(values_)
        if b"" in seps:
            return None  # a block without a data line after its first
        both = _join(heads)
        if 10 in both or (crlf and 13 in both):  # two lines before the data line
            a, seps, b = zip(*map(bytes.partition, heads, repeat(eol + second)), strict=True)
            if b"" in seps:
                return None
            both = _join(a) + _join(b)
            if 10 in both or (crlf and 13 in both):
                return None
            names, ids = (a, b) if data[:7] == b"event: " else (b, a)
        elif data[:7] == b"event: ":
            names = heads
        else:
            ids = heads
    both = _join(values)
    if 10 in both or (crlf and 13 in both):
        return None  # a block with more lines
    if ids is not None and 0 in _join(ids):
        return None  # an ID with NUL is ignored: the line loop
    return (
        _names(names) if names else repeat("message"),
        list(map(bytes.decode, values, repeat("utf-8"), repeat("replace"))),
        None if ids is None else list(map(bytes.decode, ids, repeat("utf-8"), repeat("replace"))),
        first,
        tail,
    )


def _cut_named_run(
    data: bytes, eol: bytes
) -> tuple[Iterable[str], list[str], None, bytes, bytes] | None:
    """:func:`cut_run` for a run of ``event: NAME\\ndata: X`` blocks of the first one's name."""
    end = data.find(eol)
    if end < 0 or data[end : end + len(eol) + 6] != eol + b"data: ":
        return None
    name = data[7:end]
    if 13 in name or 10 in name:  # a lone CR or LF before the first CRLF: another line
        return None
    values = data[end + len(eol) + 6 :].split(eol + eol + b"event: " + name + eol + b"data: ")
    last = values.pop()
    stop = last.find(eol + eol)
    if stop < 0:  # the read ends within the last block
        first, tail = b"event: ", name + eol + b"data: " + last
    else:
        values.append(last[:stop])
        first, tail = b"", last[stop + 2 * len(eol) :]
    both = _join(values)
    if 10 in both or 13 in both:
        return None  # a block with more lines, or of another name, in the run
    return (
        repeat(name.decode("utf-8", "replace") or "message"),
        list(map(bytes.decode, values, repeat("utf-8"), repeat("replace"))),
        None,
        first,
        tail,
    )


def _names(names: Iterable[bytes]) -> list[str]:
    decoded = list(map(bytes.decode, names, repeat("utf-8"), repeat("replace")))
    if "" in decoded:  # "event: " with an empty name: the default type
        decoded = [name or "message" for name in decoded]
    return decoded




def id_run(decoder: Decoder, data: bytes) -> list[ServerSentEvent]:
    """Shortcut 4: a read at a block boundary (LF line ends only, within the limit) that
    starts with ``id: ``, as servers that support ``Last-Event-ID`` resume write every
    event: ``id: N\\ndata: X\\n\\n``.

    Like shortcut 2, one C-level split on the long separator ``\\n\\nid: `` leaves each
    block as ``N\\ndata: X``, and one ``partition`` cuts it. A run of blocks of another
    shape (a ``retry`` line, as servers send with their first event; an ``event:`` line;
    an ID with NUL; blocks without an ``id:`` line) goes through the line loop on its own,
    and the blocks after it come back here, so one odd block does not send the rest of the
    read to the line loop. The unfinished last block (usually
    ``N\\ndata: <start of the data>``) is kept unread in ``_pending`` when it holds at
    most two complete lines, none of them a comment or a retry (their effects are due
    when their line is complete), so that the next read starts at the block boundary and
    comes here again; a block is re-read at most three times, so this stays O(n).
    """
    pieces = data.split(b"\n\nid: ")
    pieces[0] = pieces[0][4:]
    tail = pieces.pop()
    complete = tail[-2:] == b"\n\n"
    if complete:  # the read ends with a blank line
        pieces.append(tail[:-2])
    events: list[ServerSentEvent] = []
    append = events.append
    last_id = decoder.last_event_id  # at a block boundary: equals the ID buffer
    n = len(pieces)
    # Events from ``mark`` on were built here after the last run of blocks that went
    # through _lines: they reset the count of bytes without an event.
    mark = 0
    start = 0
    while start < n:
        base = len(events)
        for piece in islice(pieces, start, None):
            # The usual spelling first: its value needs no space removed.
            id_bytes, sep, value = piece.partition(b"\ndata: ")
            if not sep:
                id_bytes, sep, value = piece.partition(b"\ndata:")
            if not sep or 10 in value or 10 in id_bytes or 0 in id_bytes:
                break  # another shape (or an ID with NUL, which must be ignored)
            last_id = id_bytes.decode("utf-8", "replace")
            append(
                _new_event(
                    ServerSentEvent,
                    ("message", value.decode("utf-8", "replace"), last_id, None),
                )
            )
        else:
            break
        # Block k (each block before it made one event) and the blocks of other shapes
        # right after it go line by line.
        k = start + len(events) - base
        end = k + 1
        while end < n:
            id_bytes, sep, value = pieces[end].partition(b"\ndata:")
            if not sep or 10 in value or 10 in id_bytes or 0 in id_bytes:
                end += 1
            else:
                break
        decoder.last_event_id = decoder._id = last_id
        if len(events) > mark:
            decoder._quiet = 0
        if end == n and not complete:
            # The run reaches the unfinished last block: the rest of the read.
            lines = (b"id: " + b"\n\nid: ".join([*pieces[k:], tail])).split(b"\n")
            events += decoder._lines(lines, lines.pop(), held=bool(events))
            return events
        lines = (b"id: " + b"\n\nid: ".join(pieces[k:end]) + b"\n\n").split(b"\n")
        lines.pop()
        events += decoder._lines(lines, held=bool(events), more=True)
        if decoder._failed is not None:  # a limit crossed by that run: failed lazily
            return events
        last_id = decoder.last_event_id
        mark = len(events)
        start = end
    decoder.last_event_id = decoder._id = last_id
    if len(events) > mark:
        decoder._quiet = 0
    if not complete:
        lines = tail.split(b"\n")
        if len(lines) < 4:
            for line in lines[1:-1]:  # the first is the id line
                if not (line[:3] == b"id:" or line[:6] == b"event:" or line[:5] == b"data:"):
                    break
            else:
                decoder._pending = [b"id: ", tail]
                decoder._pending_len = 4 + len(tail)
                return _quiet_checked(decoder, events)
        lines[0] = b"id: " + lines[0]
        events += decoder._lines(lines, lines.pop(), held=bool(events))
        return events
    return _quiet_checked(decoder, events)


def block_run(decoder: Decoder, data: bytes, *, crlf: bool) -> list[ServerSentEvent] | None:
    """Shortcut 5: a read at a block boundary, within the limit, that starts with a
    ``data: ``, ``event: `` or ``id: `` line, as runs of blocks of one shape, all lines
    ended by LF, or all by CRLF (``crlf``), cut by :func:`cut_run`; ``None``, with
    nothing changed, when the first run is refused (the caller goes line by line). After
    a first run, what :func:`cut_run` refuses goes through the line loop.

    The unfinished last block starts at a block boundary too: with LF line ends, when it
    holds at most three complete lines, all ``data``, ``event`` or ``id`` lines (whose
    effects wait for the blank line: no comment, no retry), it is kept unread in
    ``_pending`` as :func:`id_run` keeps it, so that the next read starts at the block
    boundary and comes here again; a block is re-read at most three times, so this stays
    O(n). Otherwise (a CRLF-ended line among them: ``_lines`` splits kept lines at LF
    only) its complete lines go through the line loop.
    """
    events: list[ServerSentEvent] = []
    uniform = True
    while True:
        cut = cut_run(data, crlf, uniform=uniform)
        if cut is None:
            if uniform:  # blocks of several names: cut them one by one
                uniform = False
                continue
            if not events:
                return None
            lines = data.splitlines()  # the rest of the read, at a block boundary
            events += decoder._lines(lines, b"" if data[-1] == 10 else lines.pop(), held=True)
            return events
        names, values, ids, first, tail = cut
        last_id = decoder.last_event_id  # at a block boundary: equals the ID buffer
        if ids is not None:
            last_id = decoder.last_event_id = decoder._id = ids[-1]
        events += map(
            _new_event,
            repeat(ServerSentEvent),
            zip(names, values, repeat(last_id) if ids is None else ids, repeat(None)),
        )
        if values:
            decoder._quiet = 0
        if not first:  # complete blocks of other names follow: the next run
            if not tail:
                return events
            data = tail
            uniform = False
            continue
        break
    if 10 in tail or 13 in tail:
        lines = tail.split(b"\n")
        if (
            crlf
            or len(lines) > 4
            or not all(
                line[:6] == b"event:" or line[:3] == b"id:" or line[:5] == b"data:"
                for line in islice(lines, 1, len(lines) - 1)  # the first is a `first` line
            )
        ):
            lines = (first + tail).splitlines()
            rest = b"" if tail[-1] == 10 else lines.pop()  # no CR ends it (see feed)
            events += decoder._lines(lines, rest, held=bool(events))
            return events
    decoder._pending = [first, tail]
    decoder._pending_len = len(first) + len(tail)
    return events


def _quiet_checked(decoder: Decoder, events: list[ServerSentEvent]) -> list[ServerSentEvent]:
    """The end of a read whose runs of blocks went through the line loop with ``more``:
    check ``max_bytes_without_event`` as the loop checks it after a whole read."""
    if decoder._quiet > decoder._quiet_limit:
        decoder._fail_quiet(decoder._quiet, lazy=bool(events))
    return events

