"""``ReplyLog``: the interface every reply log implements, and the logic they all share.

A backend (memory, Redis) supplies a handful of small atomic primitives -- create, append
under a lease, read after an entry, end a reply nobody owns, take a lease over, signal a
cancel -- and this base class builds the public behaviour from them once: recording a
stream (:meth:`ReplyLog.record`), following a reply (:meth:`ReplyLog.follow`), stopping it
from anywhere (:meth:`ReplyLog.cancel`). So the two implementations cannot drift apart, and
one test suite runs against both.

The lease is what makes producer death visible: the producer refreshes it while it streams
(every write refreshes it too); when it lapses with no terminal entry, the producer is gone.
Every write is fenced by it -- a write from a producer that lost its lease is refused -- so a
reply taken over by another worker never forks.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from .._events import End, Outcome
from ..errors import RelayKeyError, RelayPositionError, RelayUnavailableError, show_key
from .access import LogAccess
from .codec import Entry, Position, RelayEvent, end_record, parse_position, relayed
from .producer import RecordedStream, Recorder
from .writer import Write, Writer, current_loop

if TYPE_CHECKING:  # pragma: no cover
    from .._stream import ReplyStream

__all__ = ["LogState", "ReplyLog", "Write"]

logger = logging.getLogger("fluxstream.relay")

#: Seconds at most between a waiting follower's own reads of its reply (a quarter lease when
#: that is less): how soon it sees a producer's death, or an entry whose wake-up was missed.
_FOLLOW_POLL = 1.0
#: The reason of the ``truncated`` end recorded when a producer's lease lapsed.
PRODUCER_LOST = "producer lost"
#: The reason of the ``cancelled`` end recorded by :meth:`ReplyLog.cancel`.
CANCELLED_BY_RELAY = "cancelled by the relay"


@dataclass(frozen=True)
class LogState:
    """What a backend knows about one reply, read in one round trip."""

    exists: bool
    #: Number of the last entry (0: none yet).
    last: int
    ended: bool
    lease_alive: bool
    #: A stop was asked (:meth:`ReplyLog.cancel`): a reply with no live producer then ends
    #: ``cancelled``, and nobody takes it over.
    cancelled: bool = False


class Tail(Protocol):
    """A backend's view of one reply's newest entries that a follower reads and waits on
    without a round trip or a coroutine of its own (see :meth:`ReplyLog._tail`): once woken,
    a follower takes every entry known at once and yields them without awaiting per item.
    What :meth:`ReplyLog._read` would give, only cheaper; ``None`` from either callable
    sends the follower to :meth:`ReplyLog._read`."""

    def known(self, after: int) -> list[Entry] | None:
        """The entries above ``after`` if they are known without I/O (at least one)."""

    def next(
        self, after: int, wait: float
    ) -> list[Entry] | Awaitable[list[Entry] | bool] | None:
        """What :meth:`known` gives, or else something to await until an entry above
        ``after`` is known (``True``, or the entries newly known: the follower takes them
        as they are when the first follows ``after``) or ``wait`` seconds passed
        (``False``), or ``None``: the follower must read."""

    def unwait(self, waiter: Any) -> None:
        """``waiter`` ended without being woken (its time, a cancel): forget it."""


class ReplyLog(ABC):
    """A store of relayed replies, one per content key (see :mod:`fluxstream.relay`).

    :param lease: seconds a producer's lease lasts without a refresh; a producer refreshes it
        three times per lease, so followers learn of its death at most ``lease`` (plus one
        poll) after it.
    :param frame: seconds per coalesced write (one write per frame at most; the first event
        of a reply, and the end, are written at once).
    :param token_interval: how often (seconds) a producer stores the stream's resume token
        for a takeover; a takeover that starts from an older token trims what is stored.
    :param write_spacing: seconds from the start of one batch write (a round trip) before
        the next may start: under load what becomes due meanwhile waits (at most this long)
        and shares the next one; after a quiet spell a write goes at once. A backend whose
        batch write costs a round trip sets it (0: each write goes as soon as it is due).
    """

    def __init__(
        self,
        *,
        lease: float = 5.0,
        frame: float = 0.016,
        token_interval: float = 1.0,
        write_spacing: float = 0.0,
    ) -> None:
        if lease <= 0 or frame < 0 or token_interval <= 0:
            raise ValueError("lease and token_interval must be positive, frame not negative")
        if not 0 <= write_spacing < math.inf:  # NaN fails both comparisons
            raise ValueError(f"write_spacing must be finite and not negative: {write_spacing!r}")
        self.lease = lease
        self.frame = frame
        self.token_interval = token_interval
        self.write_spacing = write_spacing
        #: The writer of the streams this log records (see :mod:`fluxstream.relay.writer`).
        self._writer: Writer | None = None

    # ------------------------------------------------------------------ backend primitives

    @abstractmethod
    async def _create(self, key: str, owner: str, base: dict[str, Any]) -> None:
        """Create the reply with ``owner`` holding the lease; :class:`RelayKeyError` if the key
        already holds a reply."""

    @abstractmethod
    async def _append(
        self, key: str, owner: str, entry: Entry, *, token: dict[str, Any] | None, final: bool
    ) -> bool:
        """Append ``entry`` if ``owner`` holds the lease (refreshing it; ``final`` ends the
        reply and drops the lease). Returns whether a cancel was requested.
        :class:`~fluxstream.errors.RelayLeaseLostError` if the lease is not ``owner``'s."""

    async def _write_many(self, writes: list[Write]) -> list[bool | Exception]:
        """Do ``writes`` in order (the writes of every stream a process records, once per
        frame): for each, whether a cancel was requested, or the error it met. A backend
        that can send them in one round trip overrides this."""
        results: list[bool | Exception] = []
        for write in writes:
            try:
                if write.release:
                    await self._release(write.key, write.owner)
                    results.append(False)
                elif write.entry is None:
                    results.append(await self._refresh(write.key, write.owner))
                else:
                    results.append(await self._append(
                        write.key, write.owner, write.entry, token=write.token, final=write.final
                    ))
            except Exception as exc:
                results.append(exc)
        return results

    @abstractmethod
    async def _refresh(self, key: str, owner: str) -> bool:
        """Refresh ``owner``'s lease; returns whether a cancel was requested."""

    @abstractmethod
    async def _release(self, key: str, owner: str) -> None:
        """Drop ``owner``'s lease without ending the reply (another worker may take over)."""

    @abstractmethod
    async def _read(self, key: str, after: int, wait: float) -> list[Entry]:
        """Entries numbered above ``after``, waiting up to ``wait`` seconds for one."""

    def _tail(self, key: str) -> Tail | None:
        """The :class:`Tail` of ``key`` for the running event loop, if the backend has one
        (``None``: a follower reads with :meth:`_read` alone)."""
        return None

    @abstractmethod
    async def _state(self, key: str) -> LogState:
        """The reply's :class:`LogState`."""

    @abstractmethod
    async def _meta(self, key: str) -> dict[str, Any]:
        """``{"base": ..., "token": ...}``: the resume-token base and the latest token."""

    @abstractmethod
    async def _end_unowned(self, key: str, entry_events: list[Any], end: dict[str, Any]) -> bool:
        """Append a terminal entry if nobody holds the lease and the reply has not ended."""

    @abstractmethod
    async def _acquire(self, key: str, owner: str) -> int | None:
        """Take the lease of an unended, uncancelled reply whose lease lapsed: the last entry
        number, or ``None`` if it is held, the reply ended or a stop was asked."""

    @abstractmethod
    async def _request_cancel(self, key: str) -> None:
        """Mark the reply cancelled and tell its producer, wherever it runs."""

    @abstractmethod
    async def _watch_cancel(
        self, key: str, callback: Callable[[], None]
    ) -> Callable[[], None]:
        """Call ``callback`` (synchronously, once) when a cancel of ``key`` is requested;
        returns a function that stops watching."""

    async def aclose(self) -> None:  # noqa: B027 - optional for a backend
        """Release the backend's resources (connections, listener tasks)."""

    # ------------------------------------------------------------------ producing

    def record(
        self, stream: ReplyStream, *, key: str | None = None, only_consumer: bool = False
    ) -> RecordedStream:
        """Record every event ``stream`` delivers under ``key`` (default: the stream's content
        key). The result is the same stream (a :class:`~fluxstream._stream.ReplyStream`, now a
        :class:`~fluxstream.relay.RecordedStream`): use it exactly as before::

            async with log.record(client.chat.stream(...)) as stream:
                async for event in stream: ...

        Writes happen in a background task (the consumer never waits for the log), at most
        one per :attr:`frame`; the lease is refreshed, a cancel from any worker calls
        ``stream.cancel()``, and the outcome is recorded when the stream ends. A failing log
        is reported (``recorded.log_error``, a warning) and never breaks the stream.

        A producer that lost its lease -- another worker took the reply over, or its
        followers ended it ``producer lost`` after a pause longer than the lease -- stops
        recording (``log_error`` is :class:`~fluxstream.errors.RelayLeaseLostError`).

        :param only_consumer: nobody reads the stream but to record it (a task that drains
            it; :func:`~fluxstream.relay.produce` says so itself): a lost lease then cancels
            the upstream too (outcome ``cancelled``, the response closed), since whoever
            holds the reply now generates the rest. By default the caller reads the stream
            and it goes on to the caller, who shows the reply itself.
        """
        return RecordedStream.adopt(
            stream, Recorder(stream, self._access(), key=key, only_consumer=only_consumer)
        )

    def _access(self) -> LogAccess:
        """What the recorder and a takeover may do to this log (see
        :mod:`fluxstream.relay.access`)."""
        return LogAccess(
            frame=self.frame, lease=self.lease, token_interval=self.token_interval,
            new_owner=self._new_owner, create=self._create, watch_cancel=self._watch_cancel,
            writer=self._current_writer, acquire=self._acquire, release=self._release,
            meta=self._meta, read=self._read,
        )

    def _current_writer(self) -> Writer:
        """This log's writer for the running event loop (a new one if the loop changed)."""
        loop = current_loop()
        writer = self._writer
        if writer is None or writer.loop is not loop:
            writer = self._writer = Writer(
                self._write_many, self.lease, loop, self.write_spacing
            )
        return writer

    # ------------------------------------------------------------------ following

    async def follow(
        self,
        key: str,
        *,
        after: str | Position | None = None,
        last_event_id: str | None = None,
        takeover: Any = None,
    ) -> AsyncIterator[RelayEvent]:
        """The reply's events after ``after`` (or ``last_event_id``, e.g. a reconnecting
        ``EventSource``'s header), then the live ones, ending with its ``End``.

        :param takeover: an :class:`~fluxstream.AsyncClient`; if the producer dies, this
            follower resumes the upstream from the stored resume token and goes on recording
            under the same key (other followers simply keep following). Without it, the
            reply ends ``truncated`` with reason ``producer lost``. A reply stopped by
            :meth:`cancel` is never taken over: with no producer left it ends ``cancelled``.
        :raises RelayKeyError: nothing is stored under ``key`` (or it expired meanwhile).
        :raises RelayPositionError: the position is malformed or past the end.
        :raises RelayUnavailableError: the backend failed, or lost entries this follower
            had read (a Redis failover before they reached the replica).
        """
        position = parse_position(after if after is not None else last_event_id)
        await self._stored(key, position)
        poll = min(_FOLLOW_POLL, self.lease / 4)
        start = position.entry
        cursor = max(0, start - 1)
        took_over: Callable[[], None] | None = None
        finished = False
        tail = self._tail(key)
        try:
            while True:
                # Everything already known at once, with one wait when nothing is: a
                # follower's wake-up costs one future, not a read coroutine per delta.
                step = tail.next(cursor, poll) if tail is not None else None
                if step is None:
                    entries = await self._read(key, cursor, poll)
                elif isinstance(step, list):
                    entries = step
                else:
                    assert tail is not None
                    try:
                        woken = await step
                    except BaseException:
                        tail.unwait(step)
                        raise
                    if type(woken) is list and woken[0].number == cursor + 1:
                        entries = woken  # what the tail found, all of it after the cursor
                    else:
                        if woken:
                            known = tail.known(cursor)
                        else:
                            tail.unwait(step)
                            known = None
                        entries = known if known is not None else await self._read(key, cursor, 0)
                for entry in entries:
                    number = entry.number
                    # The events after ``position``: all of a later entry, the rest of its
                    # own (compared as numbers once per entry, not as positions per event).
                    # The items are the entry's own, shared with every other follower
                    # (kept with it once made: no call per entry and follower then).
                    if number > start:
                        for item in getattr(entry, "_memo", None) or relayed(entry):
                            yield item
                    elif number == start:
                        if position.index >= len(entry.events):
                            message = f"position {position} is past the end of {show_key(key)}"
                            raise RelayPositionError(message)
                        for item in relayed(entry)[position.index + 1:]:
                            yield item
                    cursor = number
                    if entry.end is not None:
                        finished = True
                        return
                if entries:
                    continue
                state = await self._state(key)
                if not state.exists:
                    message = f"the reply under key {show_key(key)} expired while followed"
                    raise RelayKeyError(message)
                if state.last < cursor:
                    # Entries this follower read are gone (a Redis failover before they
                    # reached the replica, a restart): what comes next could repeat or skip
                    # them, and the end may never pass the cursor.
                    raise RelayUnavailableError(
                        f"entries {state.last + 1}..{cursor} of {show_key(key)} were lost"
                    )
                if state.ended or state.lease_alive or state.last > cursor:
                    continue
                if state.cancelled:  # stopped while no producer runs (a taker released it)
                    await self._end_unowned(
                        key, [End(Outcome.CANCELLED, CANCELLED_BY_RELAY)],
                        end_record(Outcome.CANCELLED, CANCELLED_BY_RELAY, None, None),
                    )
                    continue
                if takeover is not None and took_over is None:
                    from .takeover import take_over

                    took_over = await take_over(self._access(), key, takeover)
                    if took_over is not None:
                        continue
                await self._end_unowned(
                    key, [End(Outcome.TRUNCATED, PRODUCER_LOST)], end_record(
                        Outcome.TRUNCATED, PRODUCER_LOST, None, None
                    )
                )
        finally:
            if took_over is not None and not finished:
                took_over()

    async def check_follow(
        self, key: str, *, after: str | Position | None = None, last_event_id: str | None = None
    ) -> bool:
        """Check ``key`` and the position as :meth:`follow` does, at once: whether anything
        may come after it (``False``: the reply ended exactly there). :meth:`follow` checks
        only when it is first iterated, and then waits for the producer; a web response
        answers a bad ``Last-Event-ID`` with a status, which it can send only before its
        head, and must not wait for a slow model to learn that the id was bad.

        :raises RelayKeyError: nothing is stored under ``key``.
        :raises RelayPositionError: the position is malformed or past the end.
        """
        position = parse_position(after if after is not None else last_event_id)
        await self._stored(key, position)
        if position.entry == 0:
            return True
        for entry in await self._read(key, position.entry - 1, 0):
            if entry.number == position.entry:
                if position.index >= len(entry.events):
                    raise RelayPositionError(
                        f"position {position} is past the end of {show_key(key)}"
                    )
                return entry.end is None or position.index < len(entry.events) - 1
        raise RelayUnavailableError(f"entry {position.entry} of {show_key(key)} was lost")

    async def _stored(self, key: str, position: Position) -> LogState:
        """The reply's state, checked: it exists and ``position`` is not past its last entry."""
        state = await self._state(key)
        if not state.exists:
            raise RelayKeyError(f"no reply is stored under key {show_key(key)}")
        if position.entry > state.last:
            raise RelayPositionError(f"position {position} is past the end of {show_key(key)}")
        return state

    # ------------------------------------------------------------------ stopping

    async def cancel(self, key: str, *, wait: float = 2.0) -> Outcome | None:
        """Stop the reply from any worker: its producer cancels the upstream (the model stops
        generating) and records ``cancelled``, which ends every follower. The stored events
        stay: the reply can still be followed from the start. With no live producer, the end
        is recorded here. Returns the recorded outcome (``None`` if none within ``wait``
        seconds); a reply that had already ended keeps its outcome.

        :raises RelayKeyError: nothing is stored under ``key`` (or it vanished meanwhile).
        """
        state = await self._state(key)
        if not state.exists:
            raise RelayKeyError(f"no reply is stored under key {show_key(key)}")
        if not state.ended:
            await self._request_cancel(key)
        deadline = time.monotonic() + wait
        while True:
            state = await self._state(key)
            if state.ended:
                return await self._outcome(key)
            if not state.exists:  # expired, evicted or lost with Redis while we waited
                raise RelayKeyError(f"the reply under key {show_key(key)} expired while cancelled")
            if not state.lease_alive and await self._end_unowned(
                key, [End(Outcome.CANCELLED, CANCELLED_BY_RELAY)],
                end_record(Outcome.CANCELLED, CANCELLED_BY_RELAY, None, None),
            ):
                continue  # ended here: read the outcome back
            # Every other round checks the deadline and sleeps (a round that neither ended
            # the reply nor found it ended used to spin: on the memory log without yielding).
            if time.monotonic() >= deadline:
                return None
            await anyio.sleep(0.005)

    async def _outcome(self, key: str) -> Outcome | None:
        """The outcome of the terminal entry (reads the reply's tail)."""
        state = await self._state(key)
        entries = await self._read(key, max(0, state.last - 1), 0)
        for entry in entries:
            if entry.end is not None:
                return Outcome(entry.end["outcome"])
        return None

    @staticmethod
    def _new_owner() -> str:
        return uuid.uuid4().hex

