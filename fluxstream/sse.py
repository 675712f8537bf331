"""A sans-IO decoder for ``text/event-stream`` that follows the WHATWG rules exactly.

Feed it bytes as they arrive; it returns the events whose blank line is complete::

    decoder = SSEDecoder()
    for read in reads:
        for event in decoder.feed(read):
            ...
    for event in decoder.close():   # end of stream
        ...

Why it looks the way it does
----------------------------
* **Bytes, not text.** The line terminators CR and LF are single bytes that never occur inside a
  UTF-8 multi-byte sequence, so lines are found on the raw bytes and each *complete* line is
  decoded on its own. That gives incremental UTF-8 decoding across reads for free (a character
  split between two reads is simply part of a line that is not complete yet) and it equals
  decoding the whole stream at once, invalid bytes included: they become U+FFFD because an
  invalid sequence cannot extend past a line end. Only CR, LF and CRLF end lines; U+2028, U+0085
  and friends are ordinary characters.
* **Linear time, bounded memory.** An incomplete line is kept as a list of the reads that make it
  up and joined once, when its terminator arrives, so a multi-megabyte event delivered in 64-byte
  reads costs O(n), not O(n^2). Every event (all of its lines) and every unterminated line is
  capped by ``max_event_bytes``; past it :class:`~fluxstream.errors.EventTooLargeError` is raised
  instead of growing without bound. Bytes consumed without dispatching any event (blank lines,
  comments, fields without data) are capped by ``max_bytes_without_event``: gzip turns a
  gigabyte of blank lines into a megabyte, and without the cap such a stream spins forever
  without ever reaching ``max_event_bytes``. A read larger than ``_SLICE`` is decoded in
  slices of that size, so the lists of lines a single huge read (decompressed output) splits
  into stay bounded too.
* **Hostile numbers.** ``retry`` values are clamped to ``MAX_RETRY_MS`` (about 24.8 days, the
  largest browser timer) instead of building an int of thousands of digits, which raises
  past 4,300 digits and overflows a float long before.
* **Dispatch as soon as possible.** An event is returned by the very ``feed`` call that completes
  its blank line, including a blank line ended by a lone CR at the end of a read (the LF that may
  start the next read is then swallowed as the second half of a CRLF).
* **Fast where streams are alike.** Most reads of LLM streams carry whole one-line ``data:``
  events, often behind an ``id:`` (servers that support ``Last-Event-ID`` resume) or ``event:``
  line (Responses, Anthropic Messages), ended by LF or by CRLF (Gemini); :meth:`SSEDecoder.feed`
  builds those straight from the read with C-level splits (a run of blocks of one shape costs
  a fixed number of C calls per read, see :func:`_cut_run`), and sends everything else
  through one general line loop. The tests hold both paths to the same results for every way
  of cutting a stream into reads.
* **End of stream.** The spec discards an event that is not followed by a blank line. Our policy:
  :meth:`SSEDecoder.close` acts as if one final blank line had arrived, so a trailing
  ``data: [DONE]`` without its terminator still counts. Because that event might be cut short,
  the decoder records how the stream ended: :attr:`SSEDecoder.ended_mid_line` (the last line had
  no terminator) and :attr:`SSEDecoder.ended_mid_event` (fields had arrived since the last blank
  line). The layers above use them to call a stream truncated.

This module does no I/O and does not import asyncio; :func:`aiter_events` is a thin driver over
any async iterator of bytes and works under asyncio and trio alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from itertools import islice, repeat
from typing import NamedTuple

from .errors import EventTooLargeError, FluxstreamError, LimitExceededError

__all__ = [
    "DEFAULT_MAX_BYTES_WITHOUT_EVENT",
    "DEFAULT_MAX_EVENT_BYTES",
    "MAX_RETRY_MS",
    "SSEDecoder",
    "ServerSentEvent",
    "aiter_events",
    "iter_events",
]

DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_BYTES_WITHOUT_EVENT = 1024 * 1024
#: The largest ``retry`` value kept (milliseconds); larger ones are clamped to it.
MAX_RETRY_MS = 2**31 - 1
# Reads larger than this are decoded in slices of this size (see the module docstring).
_SLICE = 256 * 1024
_BOM = b"\xef\xbb\xbf"


class ServerSentEvent(NamedTuple):
    """One dispatched event. Immutable (a named tuple: cheap to create, compare and hash).

    ``id`` is the last event ID in force when the event was dispatched: like the browser's
    ``lastEventId`` it persists across events until the server sets another. ``retry`` is the
    valid ``retry`` value (milliseconds) given in the same block, else ``None``.
    """

    event: str = "message"
    data: str = ""
    id: str = ""
    retry: int | None = None


# ``ServerSentEvent(...)`` runs the NamedTuple's generated Python ``__new__``; ``tuple.__new__``
# builds the identical object at well under half the cost. Used once per event on hot paths.
_new_event: Callable[[type[ServerSentEvent], tuple[str, str, str, int | None]], ServerSentEvent]
_new_event = tuple.__new__

# Buffered bytes are copied only by these two joins (a module global costs no more than
# ``b"".join``), which lets the tests count the bytes copied and hold the decoder to O(n).
_join = b"".join
_join_lines = b"\n".join


class SSEDecoder:
    """Incremental ``text/event-stream`` decoder: :meth:`feed` bytes, get events.

    :param max_event_bytes: the most bytes one event (all its lines, comments included, counted
        with one byte per line terminator) or one unterminated line may take. Default 16 MiB.
    :param max_bytes_without_event: the most bytes (counted the same way) consumed between two
        dispatched events, or before the first; past it
        :class:`~fluxstream.errors.LimitExceededError` is raised. Default 1 MiB.
    """

    __slots__ = (
        "_bom_pending",
        "_data",
        "_event_size",
        "_event_type",
        "_failed",
        "_fields",
        "_id",
        "_limit",
        "_pending",
        "_pending_len",
        "_quiet",
        "_quiet_limit",
        "_retry",
        "_skip_lf",
        "_slow",
        "bytes_fed",
        "comments",
        "ended_mid_event",
        "ended_mid_line",
        "foreign_lines",
        "last_event_id",
        "reconnection_time",
    )

    def __init__(
        self,
        *,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_bytes_without_event: int = DEFAULT_MAX_BYTES_WITHOUT_EVENT,
    ) -> None:
        if max_event_bytes < 1:
            raise ValueError("max_event_bytes must be a positive number of bytes")
        if max_bytes_without_event < 1:
            raise ValueError("max_bytes_without_event must be a positive number of bytes")
        self._limit = max_event_bytes
        self._quiet_limit = max_bytes_without_event
        # Bytes of the blocks completed without dispatching an event since the last event.
        # Reset by every dispatch (the shortcuts in feed dispatch at least one event each).
        self._quiet = 0
        # Bytes of the current, unterminated line, as the reads that carried them. At a block
        # boundary, shortcut 4 (_id_run) may also keep up to two whole LF-ended lines of the
        # next block here, unread: _lines and close() split them off.
        self._pending: list[bytes] = []
        self._pending_len = 0
        # None once the stream start has been checked for a BOM; else the bytes seen so far.
        self._bom_pending: bytes | None = b""
        # The previous read ended in CR: an LF at the start of the next read completes a CRLF.
        self._skip_lf = False
        self._failed: FluxstreamError | None = None
        # One flag for the three rare states above (BOM undecided, CR ended the last read,
        # failed), so that the common feed pays a single attribute test for all of them.
        self._slow = True
        # The block being built (the spec's "buffers").
        self._data: list[bytes] = []
        self._event_type = b""
        self._id = ""  # the last event ID buffer
        self._retry: int | None = None
        self._event_size = 0
        self._fields = False  # a field other than data arrived since the last blank line
        #: The last event ID as of the last blank line (the spec's ``lastEventId``).
        self.last_event_id = ""
        #: The reconnection time in milliseconds set by the last valid ``retry`` field, if any.
        self.reconnection_time: int | None = None
        #: Comment lines (``:``-prefixed): heartbeats, keep-alives, processing notices.
        self.comments = 0
        #: Bytes passed to :meth:`feed` so far.
        self.bytes_fed = 0
        #: Set by :meth:`close`: the stream's last line had no terminator.
        self.ended_mid_line = False
        #: Set by :meth:`close`: fields (any line but comments and blank lines) had arrived
        #: after the last blank line, so an event was cut short.
        self.ended_mid_event = False
        #: ``None``, or a list that collects every line that is no field this decoder knows
        #: (no ``data``, ``event``, ``id``, ``retry``, not a comment or blank): the spec
        #: ignores them, but Gemini sends an error after the stream began as a raw JSON object
        #: on lines of their own, and a format that reads them sets this list and takes them.
        self.foreign_lines: list[bytes] | None = None

    def __repr__(self) -> str:
        return (
            f"<SSEDecoder bytes_fed={self.bytes_fed} pending_line={self._pending_len}B "
            f"last_event_id={self.last_event_id!r}>"
        )

    @property
    def max_event_bytes(self) -> int:
        return self._limit

    @property
    def in_event(self) -> bool:
        """True while bytes of an event (or of an unterminated line) are buffered."""
        return bool(self._pending_len or self._event_size)

    # ------------------------------------------------------------------ feeding
    #
    # Speed notes (measured on CPython 3.11; see benchmarks/README.md):
    # * ``13 in data`` / ``10 in data`` test for an int, a bare memchr; ``b"\r" in data`` runs the
    #   generic substring search and costs about eight times more on short reads.
    # * ``bytes.splitlines()`` splits at exactly CR, LF and CRLF (unlike ``str.splitlines``) in
    #   one pass; normalising with ``replace(b"\r\n", b"\n")`` first costs twice as much.
    # * Most reads of real streams hold whole one-line ``data:`` events, with or without an
    #   ``id:``/``event:`` line first: shortcuts build those without the per-line loop (see
    #   feed, _id_run and _run). Everything else goes through _lines.
    # * A slice (``data[:6]``) allocates: about as costly as decoding a short line; the
    #   one-event shortcuts test ints and ``find`` results before taking any.

    def feed(self, data: bytes) -> list[ServerSentEvent]:
        """Decode one read; return the events completed by it, in order."""
        if len(data) > _SLICE:
            return self._feed_slices(data)
        if self._slow:
            data = self._prelude(data)
            if not data:
                return []
        elif data:
            self.bytes_fed += len(data)
        else:
            return []
        if 13 in data:  # CR: lines may end in CR, LF or CRLF
            last = data[-1]
            if last != 13 and not self._event_size:
                # At a block boundary, no CR left hanging at the end: perhaps CRLF-framed
                # blocks, as Gemini writes them (shortcuts 6 and 5).
                if self._pending:  # the first line begun: read it with the rest (see below)
                    self._pending.append(data)
                    data = _join(self._pending)
                    self._pending = []
                    self._pending_len = 0
                if len(data) <= self._limit:
                    if (
                        last == 10
                        and data.find(13) == len(data) - 4
                        and data.find(10) == len(data) - 3
                        and data[-2] == 13
                        and data.startswith(b"data: ")
                    ):
                        # Shortcut 6: exactly one "data: X\r\n\r\n" event: its first CR and
                        # its first LF are those of its two terminators (no slice is taken
                        # before the event is known: one costs as much as a short decode).
                        self._quiet = 0
                        return [
                            _new_event(
                                ServerSentEvent,
                                (
                                    "message",
                                    data[6:-4].decode("utf-8", "replace"),
                                    self.last_event_id,
                                    None,
                                ),
                            )
                        ]
                    run = self._run(data, crlf=True)
                    if run is not None:
                        return run
            if last == 13:
                # This CR may be the first half of a CRLF: it ended a line already, so an LF
                # opening the next read must be dropped (see _prelude).
                self._skip_lf = self._slow = True
            lines = data.splitlines()
            return self._lines(lines, b"" if last == 13 or last == 10 else lines.pop())
        if 10 not in data:
            # No line end: the read only extends the current line. Every 1-byte read but one
            # per line lands here, so this path is kept minimal.
            self._pending.append(data)
            self._pending_len += len(data)
            if self._event_size + self._pending_len > self._limit:
                self._fail(self._event_size + self._pending_len)
            return []
        if not self._event_size:
            # At a block boundary (nothing of an event interpreted yet).
            if self._pending:
                # Only the event's first line was begun: put its bytes back in front of the read
                # and go on as if all had come at once. That copies the read once more, and a
                # long line's pieces are still joined only once, so it stays O(n).
                self._pending.append(data)
                data = _join(self._pending)
                self._pending = []
                self._pending_len = 0
            elif data[0] == 10 and not data.strip(b"\n"):
                # Only blank lines, at a block boundary: nothing to dispatch or reset, so they
                # are counted at C speed instead of one loop step each (a gzip bomb of blank
                # lines reaches max_bytes_without_event ~100x sooner).
                self._quiet += len(data)
                if self._quiet > self._quiet_limit:
                    self._fail_quiet(self._quiet)
                return []
            if data[-1] == 10 and data.find(b"\n") == len(data) - 2 and data[:5] == b"data:":
                # Shortcut 1: the read is exactly one event of one data line ("one event per
                # read", as servers flush). Its size is the line plus one terminator.
                if len(data) - 1 > self._limit:
                    self._fail(len(data) - 1)
                value = data[6:-2] if data[5] == 32 else data[5:-2]
                self._quiet = 0
                return [
                    _new_event(
                        ServerSentEvent,
                        ("message", value.decode("utf-8", "replace"), self.last_event_id, None),
                    )
                ]
            if data[:4] == b"id: " and data[-1] == 10 and len(data) <= self._limit:
                # Shortcut 1b: the read is exactly "id: N\ndata: X\n\n", the one event per
                # read of servers that support Last-Event-ID resume: its second LF is the one
                # before the last, and the second line starts with "data: ". Within the limit.
                end = data.find(b"\n")
                if (
                    data.find(b"\n", end + 1) == len(data) - 2
                    and data[end + 1 : end + 7] == b"data: "
                    and 0 not in data[4:end]  # an ID with NUL is ignored: the line loop
                ):
                    self.last_event_id = self._id = id_ = data[4:end].decode("utf-8", "replace")
                    self._quiet = 0
                    return [
                        _new_event(
                            ServerSentEvent,
                            ("message", data[end + 7 : -2].decode("utf-8", "replace"), id_, None),
                        )
                    ]
            if data[:6] == b"data: " and len(data) <= self._limit:
                # Shortcut 2: the read as a run of one-line "data: " events. No event in it can
                # be too large (the whole read is within the limit). One C-level split on the
                # separator between two such events, "\n\ndata: ", leaves each event's value
                # alone, prefix and blank line removed; a piece with an LF in it means that
                # some block has another shape, and then the read goes line by line below.
                pieces = data.split(b"\n\ndata: ")
                if len(pieces) > 1:
                    tail = pieces.pop()
                    pieces[0] = pieces[0][6:]
                    last_id = self.last_event_id  # at a block boundary: equals the ID buffer
                    events: list[ServerSentEvent] = []
                    append = events.append
                    for value in pieces:
                        if 10 in value:
                            break
                        append(
                            _new_event(
                                ServerSentEvent,
                                ("message", value.decode("utf-8", "replace"), last_id, None),
                            )
                        )
                    else:
                        self._quiet = 0
                        if 10 not in tail:  # the start of the next event's data line: usual
                            self._pending = [b"data: ", tail]
                            self._pending_len = 6 + len(tail)
                        else:  # e.g. the read ended with its last event's blank line
                            lines = (b"data: " + tail).split(b"\n")
                            events += self._lines(lines, lines.pop(), held=True)
                        return events
            elif data[-2:] != b"\n\n":
                # Shortcut 4 only for reads long enough to hold whole blocks: in short reads
                # (64 bytes) the line loop is cheaper than keeping a block's first lines unread
                # and reading them again (measured: 1.0 vs 0.85 us per 64-byte read).
                if 512 <= len(data) <= self._limit:
                    if data[:7] == b"event: " or (
                        data[:4] == b"id: " and _second_line_names_event(data)
                    ):
                        run = self._run(data, crlf=False)
                        if run is not None:
                            return run
                    if data[:4] == b"id: ":
                        return self._id_run(data)
            elif len(data) <= self._limit:
                if data[:7] == b"event: ":
                    # Shortcut 3a: exactly "event: NAME\ndata: X\n\n", the one event per read
                    # of the APIs that name their events (Responses, Anthropic Messages).
                    end = data.find(b"\n")
                    if (
                        data.find(b"\n", end + 1) == len(data) - 2
                        and data[end + 1 : end + 7] == b"data: "
                    ):
                        self._quiet = 0
                        return [
                            _new_event(
                                ServerSentEvent,
                                (
                                    data[7:end].decode("utf-8", "replace")
                                    if end > 7
                                    else "message",
                                    data[end + 7 : -2].decode("utf-8", "replace"),
                                    self.last_event_id,
                                    None,
                                ),
                            )
                        ]
                    if data.count(10) > 4:
                        run = self._run(data, crlf=False)
                        if run is not None:
                            return run
                # Shortcut 3: the read is exactly one event of one or two id/event lines and
                # one data line ("id: 17\ndata: ...\n\n", "event: delta\ndata: ...\n\n",
                # "event: delta\nid: 17\ndata: ...\n\n"), as servers that support
                # Last-Event-ID resume or name their events flush them. Within the limit, so
                # it cannot be too large; another shape goes on to the line loop below.
                n = data.count(10) + 1  # the pieces split(b"\n") gives: split only if few
                few: list[bytes] | None = data.split(b"\n") if 3 < n < 6 else None
                if few is not None and not few[-2] and few[-3][:5] == b"data:":
                    id_ = self.last_event_id  # at a block boundary: equals the ID buffer
                    event_type = b""
                    for line in few[: n - 3]:
                        if line[:3] == b"id:":
                            value = line[4:] if line[3:4] == b" " else line[3:]
                            if 0 not in value:  # an ID with NUL is ignored
                                id_ = value.decode("utf-8", "replace")
                        elif line[:6] == b"event:":
                            event_type = line[7:] if line[6:7] == b" " else line[6:]
                        else:
                            break
                    else:
                        self.last_event_id = self._id = id_
                        self._quiet = 0
                        value = few[-3]
                        return [
                            _new_event(
                                ServerSentEvent,
                                (
                                    event_type.decode("utf-8", "replace")
                                    if event_type
                                    else "message",
                                    (value[6:] if value[5:6] == b" " else value[5:]).decode(
                                        "utf-8", "replace"
                                    ),
                                    id_,
                                    None,
                                ),
                            )
                        ]
                elif data[:4] == b"id: ":
                    if few is None and _second_line_names_event(data):
                        run = self._run(data, crlf=False)
                        if run is not None:
                            return run
                    return self._id_run(data)
                if few is None:
                    few = data.split(b"\n")
                return self._lines(few, few.pop())
        lines = data.split(b"\n")
        return self._lines(lines, lines.pop())

    def _id_run(self, data: bytes) -> list[ServerSentEvent]:
        """Shortcut 4: a read at a block boundary (LF line ends only, within the limit) that
        starts with ``id: ``, as servers that support ``Last-Event-ID`` resume write every
        event: ``id: N\\ndata: X\\n\\n``.

        Like shortcut 2, one C-level split on the long separator ``\\n\\nid: `` leaves each
        block as ``N\\ndata: X``, and one ``partition`` cuts it. A run of blocks of another
        shape (a ``retry`` line, as servers send with their first event; an ``event:`` line;
        an ID with NUL; blocks without an ``id:`` line) goes through :meth:`_lines` on its
        own, and the blocks after it come back here, so one odd block does not send the rest
        of the read to the line loop. The unfinished last block (usually
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
        last_id = self.last_event_id  # at a block boundary: equals the ID buffer
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
            self.last_event_id = self._id = last_id
            if len(events) > mark:
                self._quiet = 0
            if end == n and not complete:
                # The run reaches the unfinished last block: the rest of the read.
                lines = (b"id: " + b"\n\nid: ".join([*pieces[k:], tail])).split(b"\n")
                events += self._lines(lines, lines.pop(), held=bool(events))
                return events
            lines = (b"id: " + b"\n\nid: ".join(pieces[k:end]) + b"\n\n").split(b"\n")
            lines.pop()
            events += self._lines(lines, held=bool(events), more=True)
            if self._failed is not None:  # a limit crossed by that run: failed lazily
                return events
            last_id = self.last_event_id
            mark = len(events)
            start = end
        self.last_event_id = self._id = last_id
        if len(events) > mark:
            self._quiet = 0
        if not complete:
            lines = tail.split(b"\n")
            if len(lines) < 4:
                for line in lines[1:-1]:  # the first is the id line
                    if not (line[:3] == b"id:" or line[:6] == b"event:" or line[:5] == b"data:"):
                        break
                else:
                    self._pending = [b"id: ", tail]
                    self._pending_len = 4 + len(tail)
                    return self._quiet_checked(events)
            lines[0] = b"id: " + lines[0]
            events += self._lines(lines, lines.pop(), held=bool(events))
            return events
        return self._quiet_checked(events)

    def _run(self, data: bytes, *, crlf: bool) -> list[ServerSentEvent] | None:
        """Shortcut 5: a read at a block boundary, within the limit, that starts with a
        ``data: ``, ``event: `` or ``id: `` line, as runs of blocks of one shape, all lines
        ended by LF, or all by CRLF (``crlf``), cut by :func:`_cut_run`; ``None``, with
        nothing changed, when the first run is refused (the caller goes line by line). After
        a first run, what :func:`_cut_run` refuses goes through the line loop.

        The unfinished last block starts at a block boundary too: with LF line ends, when it
        holds at most three complete lines, all ``data``, ``event`` or ``id`` lines (whose
        effects wait for the blank line: no comment, no retry), it is kept unread in
        ``_pending`` as :meth:`_id_run` keeps it, so that the next read starts at the block
        boundary and comes here again; a block is re-read at most three times, so this stays
        O(n). Otherwise (a CRLF-ended line among them: ``_lines`` splits kept lines at LF
        only) its complete lines go through the line loop.
        """
        events: list[ServerSentEvent] = []
        uniform = True
        while True:
            cut = _cut_run(data, crlf, uniform=uniform)
            if cut is None:
                if uniform:  # blocks of several names: cut them one by one
                    uniform = False
                    continue
                if not events:
                    return None
                lines = data.splitlines()  # the rest of the read, at a block boundary
                events += self._lines(lines, b"" if data[-1] == 10 else lines.pop(), held=True)
                return events
            names, values, ids, first, tail = cut
            last_id = self.last_event_id  # at a block boundary: equals the ID buffer
            if ids is not None:
                last_id = self.last_event_id = self._id = ids[-1]
            events += map(
                _new_event,
                repeat(ServerSentEvent),
                zip(names, values, repeat(last_id) if ids is None else ids, repeat(None)),
            )
            if values:
                self._quiet = 0
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
                events += self._lines(lines, rest, held=bool(events))
                return events
        self._pending = [first, tail]
        self._pending_len = len(first) + len(tail)
        return events

    def _quiet_checked(self, events: list[ServerSentEvent]) -> list[ServerSentEvent]:
        """The end of a read whose runs of blocks went through :meth:`_lines` with ``more``:
        check ``max_bytes_without_event`` as the loop checks it after a whole read."""
        if self._quiet > self._quiet_limit:
            self._fail_quiet(self._quiet, lazy=bool(events))
        return events

    def close(self) -> list[ServerSentEvent]:
        """End of stream: flush what is pending as if a final blank line had arrived.

        Sets :attr:`ended_mid_line` and :attr:`ended_mid_event` so callers can tell a clean end
        from a cut one. Calling it again returns ``[]``.
        """
        if self._failed is not None:
            raise self._failed
        if self._bom_pending:  # fewer than three bytes, all a BOM prefix: they are content
            self._pending.append(self._bom_pending)
            self._pending_len += len(self._bom_pending)
        self._bom_pending = None
        events: list[ServerSentEvent] = []
        if self._pending_len:
            # Usually the start of one line; after shortcut 4, also whole lines before it.
            lines = _join(self._pending).split(b"\n")
            self._pending = []
            self._pending_len = 0
            if lines[-1]:
                self.ended_mid_line = True
            else:
                lines.pop()
            events = self._lines(lines)
        if self._data or self._fields:
            self.ended_mid_event = True
        if self._event_size:
            events += self._lines([b""])
        return events

    def _prelude(self, data: bytes) -> bytes:
        """The start of :meth:`feed` in the rare states that ``_slow`` flags."""
        if self._failed is not None:
            raise self._failed
        if not data:
            return data
        self.bytes_fed += len(data)
        if self._bom_pending is not None:
            data = self._strip_bom(data)
        if self._skip_lf and data:
            self._skip_lf = False
            if data[0] == 10:  # the LF of a CRLF whose CR ended the previous read
                data = data[1:]
        self._slow = self._bom_pending is not None
        return data

    def _strip_bom(self, data: bytes) -> bytes:
        head = self._bom_pending + data if self._bom_pending else data
        if len(head) < 3 and _BOM.startswith(head):
            self._bom_pending = head  # could still become a BOM: wait for more bytes
            return b""
        self._bom_pending = None
        return head[3:] if head.startswith(_BOM) else head

    def _feed_slices(self, data: bytes) -> list[ServerSentEvent]:
        """A huge read, in ``_SLICE``-sized pieces (each copied once: still linear)."""
        events: list[ServerSentEvent] = []
        for start in range(0, len(data), _SLICE):
            try:
                events += self.feed(data[start : start + _SLICE])
            except FluxstreamError:
                if events:  # delivered first; the decoder stays failed, so the next call raises
                    return events
                raise
        return events

    # A limit crossed after events were dispatched by the same call fails "lazily": the
    # events are returned, and the decoder is failed, so that the next feed or close raises.
    # Events that completed before the limit was crossed are never lost.

    def _fail_quiet(self, size: int, *, lazy: bool = False) -> None:
        self._failed = LimitExceededError("max_bytes_without_event", self._quiet_limit, size)
        self._slow = True
        self._pending = []
        self._data = []
        if not lazy:
            raise self._failed

    def _fail(self, size: int, *, lazy: bool = False) -> None:
        self._failed = EventTooLargeError(self._limit, size)
        self._slow = True
        self._pending = []
        self._data = []
        self._event_size = size  # the failed event stays "in progress": in_event is True
        if not lazy:
            raise self._failed

    # ------------------------------------------------------------------ interpreting lines

    def _lines(
        self, lines: list[bytes], rest: bytes = b"", *, held: bool = False, more: bool = False
    ) -> list[ServerSentEvent]:
        """Interpret the complete ``lines`` of a read (terminators removed; the first one
        continues the pending line; blank lines dispatch), then keep ``rest``, the start of an
        unterminated line. ``held``: the caller holds events of the same read already, so a
        limit crossed here fails lazily even if these lines dispatch nothing. ``more``: more
        of the same read follows (the caller checks ``max_bytes_without_event`` once the read
        is done, as the loop does for a whole read: an event later in it resets the count).

        The general path and the hot loop for every shape of stream but the shortcuts in
        :meth:`feed`: the block's state lives in locals and is written back once at the end.
        """
        if self._pending:
            # The reads of a long line are joined once, here, when its end arrives: O(n).
            self._pending.append(lines[0])
            line = _join(self._pending)
            self._pending = []
            self._pending_len = 0
            if 10 in line:  # whole lines kept unread by shortcut 4 (see _id_run)
                lines[0:1] = line.split(b"\n")
            else:
                lines[0] = line
        events: list[ServerSentEvent] = []
        data = self._data
        event_type = self._event_type
        id_ = self._id
        retry = self._retry
        fields = self._fields
        size = self._event_size
        last_id = self.last_event_id
        limit = self._limit
        comments = 0
        quiet = self._quiet
        for line in lines:
            if not line:
                # Blank line: dispatch. The last event ID is committed even without data.
                last_id = id_
                if data:
                    quiet = 0
                    events.append(
                        _new_event(
                            ServerSentEvent,
                            (
                                event_type.decode("utf-8", "replace") if event_type else "message",
                                (data[0] if len(data) == 1 else _join_lines(data)).decode(
                                    "utf-8", "replace"
                                ),
                                id_,
                                retry,
                            ),
                        )
                    )
                    data = []
                else:
                    quiet += size + 1
                event_type = b""
                retry = None
                fields = False
                size = 0
                continue
            size += len(line) + 1
            if size > limit:
                self.comments += comments
                self.last_event_id = last_id
                self._fail(size, lazy=held or bool(events))
                return events
            if line[:5] == b"data:":
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif line[0] == 58:  # b":" - a comment
                comments += 1
            else:
                fields = True
                # The usual spellings of event and id first, without partition().
                if line[:7] == b"event: ":
                    event_type = line[7:]
                    continue
                if line[:4] == b"id: ":
                    value = line[4:]
                    if 0 not in value:  # an ID with NUL is ignored
                        id_ = value.decode("utf-8", "replace")
                    continue
                name, _, value = line.partition(b":")  # no colon: the value is empty
                if value[:1] == b" ":
                    value = value[1:]
                if name == b"event":
                    event_type = value
                elif name == b"id":
                    if 0 not in value:  # an ID with NUL is ignored
                        id_ = value.decode("utf-8", "replace")
                elif name == b"retry":
                    if value.isdigit():  # bytes.isdigit(): ASCII digits only; b"" is False
                        # Clamped: thousands of digits must not reach int() (see above).
                        # Leading zeros do not count ("0001000" is one second).
                        value = value.lstrip(b"0") or b"0"
                        retry = self.reconnection_time = (
                            min(int(value), MAX_RETRY_MS) if len(value) <= 10 else MAX_RETRY_MS
                        )
                elif name == b"data":  # "data" without a colon: an empty data line
                    data.append(value)
                elif self.foreign_lines is not None:
                    self.foreign_lines.append(line)
                # Any other field name is ignored, as the spec says.
        self._data = data
        self._event_type = event_type
        self._id = id_
        self._retry = retry
        self._fields = fields
        self._event_size = size
        self.last_event_id = last_id
        if comments:
            self.comments += comments
        self._quiet = quiet
        if quiet > self._quiet_limit and not more:
            self._fail_quiet(quiet, lazy=held or bool(events))
            return events
        if rest:
            self._pending = [rest]
            self._pending_len = len(rest)
            if size + len(rest) > limit:
                self._fail(size + len(rest), lazy=held or bool(events))
        return events


def _second_line_names_event(data: bytes) -> bool:
    """The read's second line is an ``event:`` line (``id: N\\nevent: E\\ndata: X``, as the
    relay writes its blocks): a run for :meth:`SSEDecoder._run`, not :meth:`SSEDecoder._id_run`."""
    second = data.find(b"\n") + 1
    return data[second : second + 6] == b"event:"


def _cut_run(
    data: bytes, crlf: bool, *, uniform: bool
) -> tuple[Iterable[str], list[str], list[str] | None, bytes, bytes] | None:
    """Cut a read that starts at a block boundary with a ``data: ``, ``event: `` or ``id: ``
    line (that spelling) into the event names, data values and IDs of a run of complete
    blocks of one shape; ``None`` when a block of the run has another shape.

    The shape: the first line's field, then, unless it is ``data``, at most one ``event: ``
    or ``id: `` line and one ``data: `` line, a blank line; every line ended by LF (when
    ``crlf``: by CRLF). Like shortcut 2, the read is cut with C-level splits on long
    separators (the blank line and the next block's first field; then the data line, then
    the second field), which leave each value alone, prefix and terminators removed. A piece
    that holds a CR or LF means that some block has another shape (two data lines, a
    comment, a retry...), and one join and ``in`` per kind of piece test that for all pieces
    at once. Each piece is decoded on its own, as the line loop decodes its lines, by
    ``map`` (no loop step per block in Python). The values equal the line loop's: one
    leading space removed; an empty event name is ``message``; an ID with NUL (ignored by
    the spec) refuses the read.

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
    """:func:`_cut_run` for a run of ``event: NAME\\ndata: X`` blocks of the first one's name."""
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


def iter_events(
    reads: Iterable[bytes], *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
) -> Iterator[ServerSentEvent]:
    """Decode an iterable of byte reads (a file, a recorded fixture) into events."""
    decoder = SSEDecoder(max_event_bytes=max_event_bytes)
    for read in reads:
        yield from decoder.feed(read)
    yield from decoder.close()


async def aiter_events(
    reads: AsyncIterable[bytes],
    *,
    decoder: SSEDecoder | None = None,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> AsyncIterator[ServerSentEvent]:
    """Decode any async iterator of bytes (``response.aiter_bytes()``, a socket) into events.

    Pass your own ``decoder`` to inspect ``last_event_id``, ``reconnection_time`` and how the
    stream ended once iteration is over.
    """
    if decoder is None:
        decoder = SSEDecoder(max_event_bytes=max_event_bytes)
    async for read in reads:
        for event in decoder.feed(read):
            yield event
    for event in decoder.close():
        yield event
