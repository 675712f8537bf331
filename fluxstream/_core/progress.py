"""The clocks of one stream, sans-IO: when it started, when content came, which deadline passed.

:class:`~fluxstream._io.reader.StreamReader` reports each read's events and the time, and
:class:`~fluxstream._io.channel.Channel` asks how long its next wait may last; this object
says which :class:`~fluxstream._timeouts.Deadline` has passed, how long the next read, the
next response head or a backoff may wait and for which deadline, and how long the stream may
still wait for the sentinel once every choice has finished (``finish_grace``). Every limit comes
from one :class:`~fluxstream._timeouts.Timeouts`. No event loop here: ``now`` is passed in
(``time.monotonic()`` seconds), so each rule is tested without sleeping.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from .._events import Event, Finish, ReasoningDelta, RefusalDelta, TextDelta, ToolCallDelta
from .._timeouts import DEFAULT_TIMEOUTS, Deadline, Timeouts

if TYPE_CHECKING:  # pragma: no cover
    from .._reply import Reply

__all__ = ["CONTENT_EVENTS", "DeadlinePassed", "Progress", "StreamStats", "Wait"]

#: Events that are progress: text, reasoning, refusal or tool-call arguments. Heartbeats,
#: skipped frames, usage chunks and role-only deltas are not.
CONTENT_EVENTS: frozenset[type] = frozenset(
    {TextDelta, ReasoningDelta, RefusalDelta, ToolCallDelta}
)


_is_content = CONTENT_EVENTS.__contains__
#: From this many events in a read, :meth:`Progress.read` counts them without a Python loop.
_FEW_EVENTS = 4


class Wait(NamedTuple):
    """How long a wait (a read, a response head) may last, and the deadline that passes
    when it runs out: the I/O layer reports that deadline, it never works out which."""

    seconds: float
    deadline: Deadline


class DeadlinePassed(Exception):
    """A deadline passed while no read was pending (before a retry is sent, or during its
    backoff): the reader ends the stream as if a read had run out of it."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        super().__init__(deadline.value)


@dataclass(frozen=True)
class StreamStats:
    """Counters of one stream; times in seconds (``None`` until they happen).

    ``attempts`` counts HTTP requests sent (retries and resumes included); ``resumes`` counts
    drops after content that were continued. ``content_events`` counts the content (text,
    reasoning, refusal, tool-call arguments) events read and ``time_to_last_token`` is when
    the last of them came, so :attr:`time_per_chunk` is the mean gap between content events
    after the first. ``observer_errors`` counts the exceptions the stream's observers raised
    (:mod:`fluxstream._observe`). ``error_type`` names what ended the stream badly: the typed
    error a failed stream raised (``APIStatusError``, ``StallTimeoutError``...) or the
    transport error that cut it (``None`` when it ended well or was cancelled).
    """

    bytes: int
    events: int
    skipped_frames: int
    heartbeats: int
    time_to_first_token: float | None
    duration: float | None
    attempts: int
    resumes: int
    #: The deadline that ended the stream (``None``: none did): the kind the timeout error
    #: carries, or ``FINISH_GRACE`` / ``STALL`` for a stream they ended ``finished``.
    deadline: Deadline | None = None
    content_events: int = 0
    time_to_last_token: float | None = None
    observer_errors: int = 0
    error_type: str | None = None

    @property
    def time_per_chunk(self) -> float | None:
        """Mean seconds between content events after the first (``None``: fewer than two)."""
        first, last = self.time_to_first_token, self.time_to_last_token
        if first is None or last is None or self.content_events < 2:
            return None
        return (last - first) / (self.content_events - 1)


#: How many more graces an event still arriving when ``finish_grace`` ends may take, in all.
MID_EVENT_GRACES = 10


class Progress:
    """Timestamps and timeouts of one logical stream (every attempt included).

    Only content is progress (:data:`CONTENT_EVENTS`): heartbeats, junk frames and a usage
    chunk repeated forever do not keep a stream alive. Before the first content the limit is
    ``first_token`` (from the request); after it, ``stall`` between content.
    They are apart because reading a long prompt is not a stall: llama.cpp sends pings for
    many seconds before its first token, and a ``stall`` limit sized for the gaps between
    tokens would end every such stream (as the AI SDK's ``firstChunkMs``/``chunkMs``).
    Once every choice has finished, the stream waits at most
    ``finish_grace`` in total (not per read: heartbeats do not extend it) for the sentinel;
    only an event the server is still sending when it runs out (the usage chunk or the
    sentinel itself, in small writes on a loaded machine) earns more time, one grace at a
    time and :data:`MID_EVENT_GRACES` graces at most (:meth:`linger_wait`).

    Cost per read: one look at each event's type, and the parser's "every choice finished"
    check only when a ``Finish`` arrives (or content after it), so it stays O(1) per read
    whatever the number of choices.
    """

    __slots__ = (
        "content_events", "finish_grace", "finished_at", "fired", "first_token",
        "first_token_timeout", "last_progress", "last_token", "linger_cap", "linger_until",
        "stall_timeout", "stall_waited", "started", "timeouts", "wait_started",
    )

    def __init__(self, timeouts: Timeouts = DEFAULT_TIMEOUTS) -> None:
        self.timeouts = timeouts
        # Copied out of ``timeouts``: read on every read of the stream.
        self.stall_timeout = timeouts.stall
        self.first_token_timeout = timeouts.first_token
        self.finish_grace = timeouts.finish_grace
        #: The deadline that ended the stream, once one did (see :meth:`passed`).
        self.fired: Deadline | None = None
        self.started: float | None = None
        self.first_token: float | None = None
        #: Content events read, and when the last one came (for ``time_per_chunk``).
        self.content_events = 0
        self.last_token: float | None = None
        self.finished_at: float | None = None
        self.last_progress = 0.0
        #: Every choice has finished but no sentinel yet: end ``finished`` at this time.
        self.linger_until: float | None = None
        #: The latest the grace can be extended to while an event is half-read.
        self.linger_cap: float | None = None
        #: Seconds spent waiting for bytes since the last content (see :meth:`stall_wait`).
        self.stall_waited = 0.0
        self.wait_started: float | None = None

    @property
    def lingering(self) -> bool:
        return self.linger_until is not None

    @property
    def deadline_free(self) -> bool:
        """No deadline applies to the next read (neither ``finish_grace`` running, nor the
        first token awaited under ``first_token_timeout``, nor content due under
        ``stall_timeout``): read without a cancel scope."""
        if self.linger_until is not None:
            return False
        if self.first_token is None:
            return self.first_token_timeout is None
        return self.stall_timeout is None

    def start(self, now: float) -> None:
        self.started = now
        self.last_progress = now

    def connected(self, now: float) -> None:
        """A response is usable: the stall clock starts again with each connection."""
        self.last_progress = now
        self.stall_waited = 0.0
        self.wait_started = None

    def read(
        self, events: list[Event], now: float, complete: Callable[[], bool]
    ) -> Deadline | None:
        """One read's events (``complete``: every choice has finished); a timeout that has
        passed, if any."""
        started = self.wait_started
        if started is not None:
            self.stall_waited += now - started
            self.wait_started = None
        if len(events) < _FEW_EVENTS:  # an event or two, as a token-paced server's reads
            content = 0
            finish = False
            for event in events:
                kind = type(event)
                if kind in CONTENT_EVENTS:
                    content += 1
                elif kind is Finish:
                    finish = True
        else:  # a read of many events: the same counts at C speed, not a step per event
            kinds = list(map(type, events))
            content = sum(map(_is_content, kinds))
            finish = Finish in kinds
        if content:
            self.content_events += content
            self.last_token = now
            self.last_progress = now
            self.stall_waited = 0.0
            if self.first_token is None:
                self.first_token = now
            if self.linger_until is not None and not complete():
                self.linger_until = None  # a choice began after the others finished
        if finish and self.finish_grace is not None and self.linger_until is None and complete():
            self.linger_until = now + self.finish_grace
        return self.overdue(now)

    def overdue(self, now: float) -> Deadline | None:
        """The deadline that has passed at ``now``, if any (none while lingering: the grace
        ends the stream ``finished``)."""
        if self.linger_until is not None:
            return None
        if self.first_token is None and self.first_token_timeout is not None:
            start = self.started if self.started is not None else now
            return Deadline.FIRST_TOKEN if now - start > self.first_token_timeout else None
        if (
            self.stall_timeout is not None
            and self.first_token is not None
            and now - self.last_progress > self.stall_timeout
        ):
            return Deadline.STALL
        return None

    def passed(self, deadline: Deadline) -> Deadline:
        """``deadline`` ended the stream: recorded for :meth:`stats` (the first one only)."""
        if self.fired is None:
            self.fired = deadline
        return deadline

    def read_wait(self, now: float, in_event: bool) -> Wait | None:
        """How long the next read may wait and for which deadline (``None``: no deadline
        applies, read without one): ``finish_grace`` while lingering (see
        :meth:`linger_wait`), else ``first_token`` until the first content, else ``stall``
        between content."""
        left = self.linger_wait(now, in_event)
        if left is not None:
            return Wait(left, Deadline.FINISH_GRACE)
        left = self.first_token_left(now)
        if left is not None:
            return Wait(left, Deadline.FIRST_TOKEN)
        left = self.stall_wait(now)
        if left is not None:
            return Wait(left, Deadline.STALL)
        return None

    def head_wait(self, now: float, saw_content: bool) -> Wait | None:
        """How long the next response head may wait and for which deadline (``None``: no
        limit): the read timeout (a head trickled a byte at a time resets the HTTP library's
        own with every byte), and ``first_token``, which bounds every head and, until the
        first content, counts from the request across the retries."""
        gap = self.timeouts.read_gap
        first = self.first_token_timeout
        if first is None:  # the usual case: the read timeout alone
            return None if gap is None else Wait(gap, Deadline.HEAD)
        waits = []
        if gap is not None:
            waits.append(Wait(gap, Deadline.HEAD))
        left = None if saw_content else self.first_token_left(now)
        waits.append(Wait(first if left is None else min(first, left), Deadline.FIRST_TOKEN))
        return min(waits, key=lambda wait: wait.seconds)

    def due_before_content(self, now: float, saw_content: bool) -> Deadline | None:
        """The deadline that has passed with no content yet (``first_token``): no request
        is worth sending, and a failed one is not retried."""
        if saw_content:
            return None
        left = self.first_token_left(now)
        return Deadline.FIRST_TOKEN if left is not None and left <= 0.0 else None

    def backoff(self, now: float, delay: float, saw_content: bool) -> float:
        """``delay`` before a retry, cut to when a deadline passes (``first_token`` before
        any content): fail then, not after a backoff past it."""
        left = None if saw_content else self.first_token_left(now)
        return delay if left is None or left >= delay else left

    def first_token_left(self, now: float) -> float | None:
        """Seconds left for the first content (``None``: no such limit, or it came)."""
        if self.first_token is not None or self.first_token_timeout is None:
            return None
        start = self.started if self.started is not None else now
        return max(0.0, self.first_token_timeout - (now - start))

    def stall_wait(self, now: float) -> float | None:
        """A read starts waiting at ``now``: how long it may wait for bytes under
        ``stall`` (``None``: no such limit, or no content yet: it counts from the
        first content on). Only time spent waiting on the network since the last content
        counts, never the caller's own time between reads (a slow consumer is no stall)."""
        if self.stall_timeout is None or self.first_token is None:
            return None
        self.wait_started = now
        return max(0.0, self.stall_timeout - self.stall_waited)

    def linger_wait(self, now: float, in_event: bool) -> float | None:
        """Seconds the next read may wait while lingering (``None``: not lingering).

        While part of an event has been read (``in_event``) the server is sending its last
        event (the usage chunk, the sentinel) slowly, in small writes or on a loaded machine:
        not a server that never sends the sentinel. Cutting it would end a whole reply
        ``truncated`` mid-event, so each read of it may wait one grace of silence, the grace
        starting again from there; bounded in all by :data:`MID_EVENT_GRACES` graces more, so
        bytes that never make an event (a trickle forever) still end the stream. The wait is
        decided before the read, never by cutting one short: a read cancelled in the middle
        of an HTTP library's body iterator cannot always be resumed."""
        until, grace = self.linger_until, self.finish_grace
        if until is None:
            return None
        if in_event and grace is not None:
            if self.linger_cap is None:
                self.linger_cap = until + MID_EVENT_GRACES * grace
            until = self.linger_until = max(until, min(now + grace, self.linger_cap))
        return max(0.0, until - now)

    def linger_left(self, now: float) -> float | None:
        """Seconds left of ``finish_grace`` (``None``: not lingering)."""
        if self.linger_until is None:
            return None
        return max(0.0, self.linger_until - now)

    def end(self, now: float) -> None:
        if self.finished_at is None:
            self.finished_at = now

    def stats(self, reply: Reply, attempts: int, resumes: int, now: float) -> StreamStats:
        start = self.started
        end = self.finished_at if self.finished_at is not None else now
        first, last = self.first_token, self.last_token
        return StreamStats(
            bytes=reply.bytes,
            events=reply.events,
            skipped_frames=reply.skipped_frames,
            heartbeats=reply.heartbeats,
            time_to_first_token=None if start is None or first is None else first - start,
            duration=None if start is None else end - start,
            attempts=attempts,
            resumes=resumes,
            deadline=self.fired,
            content_events=self.content_events,
            time_to_last_token=None if start is None or last is None else last - start,
        )
