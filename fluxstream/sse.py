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
  events, often behind an ``id:`` or ``event:`` line, ended by LF or CRLF (Gemini).
  :class:`LineDecoder` is the state machine, every read through one line loop;
  :class:`SSEDecoder` adds a dispatch to shortcuts for those shapes (:meth:`SSEDecoder.feed`).
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

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator

from ._core.sse_event import ServerSentEvent
from ._core.sse_event import new_event as _new_event
from ._core.sse_runs import block_run, id_run, second_line_names_event
from .errors import EventTooLargeError, FluxstreamError, LimitExceededError

__all__ = ["DEFAULT_MAX_BYTES_WITHOUT_EVENT", "DEFAULT_MAX_EVENT_BYTES", "MAX_RETRY_MS",
           "SSEDecoder", "ServerSentEvent", "aiter_events", "iter_events"]

DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_BYTES_WITHOUT_EVENT = 1024 * 1024
#: The largest ``retry`` value kept (milliseconds); larger ones are clamped to it.
MAX_RETRY_MS = 2**31 - 1
# Reads larger than this are decoded in slices of this size (see the module docstring).
_SLICE = 256 * 1024
_BOM = b"\xef\xbb\xbf"


# Buffered bytes are copied only by these two joins (a module global costs no more than
# ``b"".join``), which lets the tests count the bytes copied and hold the decoder to O(n).
_join = b"".join
_join_lines = b"\n".join


class LineDecoder:
    """The WHATWG state machine of :class:`SSEDecoder`, which every read goes through here:
    its state, its limits, the end of the stream and the line loop (:meth:`_lines`).

    :class:`SSEDecoder` is this class plus a dispatch to the shortcuts for the shapes LLM
    servers send; this class alone is the general path those are held equal to (the
    tests' reference, not exported). The parameters are :class:`SSEDecoder`'s.
    """

    __slots__ = ("_bom_pending", "_data", "_event_size", "_event_type", "_failed", "_fields", "_id",
                 "_limit", "_pending", "_pending_len", "_quiet", "_quiet_limit", "_retry",
                 "_skip_lf", "_slow", "bytes_fed", "comments", "ended_mid_event", "ended_mid_line",
                 "foreign_lines", "last_event_id", "reconnection_time")

    def __init__(self, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
                 max_bytes_without_event: int = DEFAULT_MAX_BYTES_WITHOUT_EVENT) -> None:
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
        # boundary, the run shortcuts (_core/sse_runs.py) may also keep up to three whole
        # LF-ended lines of the next block here, unread: _lines and close() split them off.
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
        return (f"<SSEDecoder bytes_fed={self.bytes_fed} pending_line={self._pending_len}B "
                f"last_event_id={self.last_event_id!r}>")

    @property
    def max_event_bytes(self) -> int:
        return self._limit

    @property
    def in_event(self) -> bool:
        """True while bytes of an event (or of an unterminated line) are buffered."""
        return bool(self._pending_len or self._event_size)

    # ------------------------------------------------------------------ feeding

    def feed(self, data: bytes) -> list[ServerSentEvent]:
        """Decode one read, line by line; return the events completed by it, in order."""
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
        if 13 in data:  # CR: lines may end in CR, LF or CRLF (see SSEDecoder.feed)
            last = data[-1]
            if last == 13:
                self._skip_lf = self._slow = True
            lines = data.splitlines()
            return self._lines(lines, b"" if last == 13 or last == 10 else lines.pop())
        if 10 not in data:  # no line end: the read only extends the current line
            self._pending.append(data)
            self._pending_len += len(data)
            if self._event_size + self._pending_len > self._limit:
                self._fail(self._event_size + self._pending_len)
            return []
        lines = data.split(b"\n")
        return self._lines(lines, lines.pop())

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
            if 10 in line:  # whole lines kept unread by a run shortcut (_core/sse_runs.py)
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


class SSEDecoder(LineDecoder):
    """Incremental ``text/event-stream`` decoder: :meth:`feed` bytes, get events.

    :param max_event_bytes: the most bytes one event (all its lines, comments included, counted
        with one byte per line terminator) or one unterminated line may take. Default 16 MiB.
    :param max_bytes_without_event: the most bytes (counted the same way) consumed between two
        dispatched events, or before the first; past it
        :class:`~fluxstream.errors.LimitExceededError` is raised. Default 1 MiB.
    """

    __slots__ = ()

    # ------------------------------------------------------------------ feeding
    #
    # Speed notes (measured on CPython 3.11; see benchmarks/README.md):
    # * ``13 in data`` / ``10 in data`` test for an int, a bare memchr; ``b"\r" in data`` runs the
    #   generic substring search and costs about eight times more on short reads.
    # * ``bytes.splitlines()`` splits at exactly CR, LF and CRLF (unlike ``str.splitlines``) in
    #   one pass; normalising with ``replace(b"\r\n", b"\n")`` first costs twice as much.
    # * Most reads of real streams hold whole one-line ``data:`` events, with or without an
    #   ``id:``/``event:`` line first: shortcuts build those without the per-line loop (here,
    #   and the run decoders of _core/sse_runs.py). Everything else goes through _lines.
    # * A slice (``data[:6]``) allocates: about as costly as decoding a short line; the
    #   one-event shortcuts test ints and ``find`` results before taking any.
    # * A Python call costs about as much as building a short event: the one-event shortcuts
    #   and shortcut 2 are written out here, not called (shortcut 2 as a function cost 1.7 %
    #   more per event in 1024-byte reads); the run decoders are called once per long read.

    def feed(self, data: bytes) -> list[ServerSentEvent]:
        """Decode one read; return the events completed by it, in order.

        A read at a block boundary (nothing of an event interpreted, no CR of the last read
        pending), within ``max_event_bytes``, that is one event (shortcuts 1, 1b, 3, 3a, 6) or
        a run of one-line ``data:`` events (2) is built here; longer runs of blocks go to
        :mod:`fluxstream._core.sse_runs` (4, 5). Anything else, and whatever a shortcut
        refuses, takes :class:`LineDecoder`'s line loop. Held equal to it, read for read, by
        ``tests/sansio/test_sse_fastpaths.py::test_shortcuts_equal_the_line_loop_on_the_same_reads``
        and, on every format's recordings, ``tests/formats/test_fast_paths.py``.
        """
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
                    run = block_run(self, data, crlf=True)
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
                        data[:4] == b"id: " and second_line_names_event(data)
                    ):
                        run = block_run(self, data, crlf=False)
                        if run is not None:
                            return run
                    if data[:4] == b"id: ":
                        return id_run(self, data)
            elif len(data) <= self._limit:
                split5: list[bytes] | None = None  # data.split(b"\n", 5), once, when needed
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
                    split5 = data.split(b"\n", 5)
                    if len(split5) > 5:  # five lines or more (see below)
                        run = block_run(self, data, crlf=False)
                        if run is not None:
                            return run
                # Shortcut 3: the read is exactly one event of one or two id/event lines and
                # one data line ("id: 17\ndata: ...\n\n", "event: delta\ndata: ...\n\n",
                # "event: delta\nid: 17\ndata: ...\n\n"), as servers that support
                # Last-Event-ID resume or name their events flush them. Within the limit, so
                # it cannot be too large; another shape goes on to the line loop below.
                # The pieces split(b"\n") gives, when few: six at most (a count of the read's
                # lines scanned every byte of it, and a read of many events is long).
                if split5 is None:
                    split5 = data.split(b"\n", 5)
                n = len(split5)
                few: list[bytes] | None = split5 if 3 < n < 6 else None
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
                    if few is None and second_line_names_event(data):
                        run = block_run(self, data, crlf=False)
                        if run is not None:
                            return run
                    return id_run(self, data)
                if few is None:
                    few = data.split(b"\n")
                return self._lines(few, few.pop())
        lines = data.split(b"\n")
        return self._lines(lines, lines.pop())


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
