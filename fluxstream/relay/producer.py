"""The producer side: a stream whose delivered events are recorded into a reply log.

:class:`Recorder` is a stream observer (:mod:`fluxstream._observe`): told of each event the
stream delivers, it only appends it to a list. The log's writer (one background task per log,
:mod:`fluxstream.relay.writer`, for every stream the process records) coalesces what arrived
into one entry per frame and writes it, refreshes the lease when there is nothing to write,
and -- through the log's cancel watch or the flag every write returns -- the recorder calls
``stream.cancel()`` when any worker asks the reply to stop. So a slow or dead log never slows
or breaks the stream that feeds it: a failed write is reported once (``log_error`` and a
warning) and recording stops.

:class:`RecordedStream` is the stream itself, recorded: :meth:`ReplyLog.record` gives the
very :class:`~fluxstream._stream.ReplyStream` it was handed a recorder and the few members
the relay adds (creating the reply before the request, waiting for the terminal entry when
the stream ends, the recorder's counters). Everything else is the stream's own.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

import anyio

from .._events import End, Event, Outcome, PathDelta, PathDone, PathStart
from .._io.tasks import spawn
from .._stream import ReplyStream
from ..errors import RelayError, RelayLeaseLostError, RelayUnavailableError, show_key
from .codec import Entry, coalesce, end_record, plain_entry
from .writer import Write, Writer

if TYPE_CHECKING:  # pragma: no cover
    from .._core.progress import StreamStats
    from .._observe import StreamInfo
    from .._reply import Reply
    from .access import LogAccess

__all__ = ["RecordedStream", "Recorder", "produce"]

logger = logging.getLogger("fluxstream.relay")

#: How long closing a recorded stream waits for its last writes (the terminal entry).
_CLOSE_WAIT = 5.0
#: Seconds (at least; or ten leases) a started stream may go unconsumed -- nobody waiting
#: in ``anext`` -- before its recording stops and its lease is left to lapse: a stream
#: started and then dropped would otherwise be kept, and its reply held open, forever.
_ABANDONED_MIN = 60.0


def background(factory: Callable[[], Any]) -> Callable[[], None]:
    """Start ``factory()`` as an owned background task (:func:`fluxstream._io.tasks.spawn`);
    returns the function that cancels it (whichever handle ``spawn`` returns)."""
    handle: Any = spawn(factory)
    cancel = getattr(handle, "cancel", None)
    return cancel if callable(cancel) else handle  # type: ignore[no-any-return]


class Source(Protocol):
    """What a recorder uses of the stream it records (a :class:`ReplyStream`)."""

    @property
    def content_key(self) -> str: ...

    @property
    def outcome(self) -> Outcome | None: ...

    @property
    def reply(self) -> Reply: ...

    def resume_token(self) -> dict[str, Any]: ...

    def cancel(self) -> None: ...


class Recorder:
    """Records the events a stream delivers into a log, one entry per frame (see the module
    docstring): a :class:`~fluxstream._observe.StreamObserver` of the stream, and a
    :class:`~fluxstream.relay.writer.Recording` of the log's writer."""

    def __init__(
        self,
        stream: Source,
        log: LogAccess,
        *,
        key: str | None = None,
        owner: str | None = None,
        first_entry: int = 0,
        transform: Callable[[Event], list[Event]] | None = None,
        prefill: list[Event] | None = None,
        release_on_cancel: bool = False,
        only_consumer: bool = False,
    ) -> None:
        self._stream = stream
        self._log = log
        self.key = key if key is not None else stream.content_key
        # owner given: the lease is already held (a takeover), so nothing is created.
        self._owner = owner if owner is not None else log.new_owner()
        self._created = owner is not None
        self._number = first_entry
        if transform is None and _tracks_paths(stream):
            transform = without_paths
        self._transform = transform
        self._pending: list[Event] = list(prefill or [])
        self._release_on_cancel = release_on_cancel
        #: Nobody reads the stream but to record it: a lost lease (another worker streams
        #: the reply now, or its followers gave this producer up) cancels the upstream, which
        #: would otherwise generate -- and bill -- the rest of the reply a second time.
        self._only_consumer = only_consumer
        #: Seconds unconsumed before recording stops (see :data:`_ABANDONED_MIN`).
        self._abandon = max(_ABANDONED_MIN, 10 * log.lease)
        self._end: End | None = None
        self.started = False
        self._closing = False
        self._done = anyio.Event()
        self._writer: Writer | None = None
        self._stop_watch: Callable[[], None] | None = None
        self._last_token = 0.0
        self._last_io = 0.0
        self._last_write = -math.inf
        self._final_taken = False
        #: Consumer activity: inside ``anext`` now (set by the recorded stream), and when it
        #: last got an event.
        self.in_next = False
        self._consumed_at = 0.0
        #: The first error of the log (recording stopped then); the stream goes on regardless.
        self.log_error: BaseException | None = None
        #: Entries written (terminal included), and lease refreshes (each one log command).
        self.writes = 0
        self.refreshes = 0

    def __repr__(self) -> str:
        return f"<Recorder key={show_key(self.key)} writes={self.writes}>"

    # ------------------------------------------------------------------ the stream's observer

    def on_open(self, info: StreamInfo) -> None:
        """Nothing to do: the reply is created before the request (:meth:`start`)."""

    def on_event(self, event: Event) -> None:
        self._consumed_at = time.monotonic()
        if self.log_error is not None or self._end is not None:
            return
        first = not self._pending
        if self._transform is None:  # every event of a plain recording: no list per event
            if type(event) is End:
                self._end = event
            else:
                self._pending.append(event)
        else:
            for item in self._transform(event):
                if type(item) is End:
                    self._end = item
                else:
                    self._pending.append(item)
        # Only when there is something to write: a takeover's transform may drop the event
        # (resumed text that is stored already), and a stream with nothing to write must stay
        # where the writer's lease refreshes look.
        if self._writer is not None and ((first and self._pending) or self._end is not None):
            self._writer.wake(self)

    def on_end(self, reply: Reply, stats: StreamStats) -> None:
        """The stream ended without delivering its ``End`` (cancelled, failed, closed): the
        terminal entry says how; written at once, even if nobody awaits :meth:`finish`."""
        if self._end is None and self.log_error is None:
            self._end = End(reply.outcome or Outcome.CANCELLED, reply.end_reason)
            if self._writer is not None:
                self._writer.wake(self)

    # ------------------------------------------------------------------ recording

    async def start(self) -> None:
        """Create the reply in the log and start writing (idempotent)."""
        if self.started:
            return
        self.started = True
        log = self._log
        if not self._created:
            try:
                base = self._stream.resume_token()
                base.pop("reply", None)
                await log.create(self.key, self._owner, base)
            except Exception as exc:
                self.broken(exc)
                return
            self._created = True
        try:
            self._stop_watch = await log.watch_cancel(self.key, self._cancel_requested)
        except Exception as exc:
            self.broken(exc)
            return
        self._writer = log.writer()
        self._last_io = self._consumed_at = time.monotonic()
        self._writer.add(self)
        if self._pending or self._end is not None:  # a takeover's gap fill: written at once
            self._writer.wake(self)

    def _cancel_requested(self) -> None:
        logger.info("relay: cancel requested for %s", show_key(self.key))
        self._stream.cancel()

    async def finish(self) -> None:
        """The stream ended (or was closed): write what is left and the terminal entry,
        waiting for it at most :data:`_CLOSE_WAIT` seconds."""
        if self._closing:
            return
        self._closing = True
        if self._end is None and self.log_error is None:
            stream = self._stream
            self._end = End(stream.outcome or Outcome.CANCELLED, stream.reply.end_reason)
        if self._writer is not None:
            self._writer.wake(self)
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_WAIT):
                await self._done.wait()
            self._writer.remove(self)
            if not self._done.is_set():  # the log never answered: say the end is not stored
                self.broken(RelayUnavailableError(
                    f"the end of {show_key(self.key)} was not recorded within {_CLOSE_WAIT} s"
                ))
        if self._stop_watch is not None:
            self._stop_watch()

    # ------------------------------------------------------------------ the log's writer

    def broken(self, exc: BaseException, *, cancelled: bool = False) -> None:
        """Recording stopped on ``exc`` (``cancelled``: and so did the stream). The cancel
        watch goes with it: the log's watch would otherwise hold this recorder, and so the
        stream, its request and its connection, for as long as the log lives when nobody
        consumes or closes the stream (its lease lapsed before it was abandoned)."""
        if self._stop_watch is not None:
            self._stop_watch()
            self._stop_watch = None
        if self.log_error is None:
            self.log_error = exc
            logger.warning(
                "relay: recording %s stopped, %s: %s: %s", show_key(self.key),
                "its upstream is cancelled" if cancelled else "the stream goes on",
                type(exc).__name__, str(exc),  # not exc: a kept record
                # (caplog, a MemoryHandler) would keep its traceback and this stream alive
            )
        self._done.set()

    def ready_at(self) -> float:
        """When the writer may write what this stream has (``inf``: nothing to write)."""
        if self.log_error is not None or self._final_taken:
            return math.inf
        if self._end is not None:
            return 0.0
        if self._pending:
            return self._last_write + self._log.frame
        return math.inf

    def idle_due(self, now: float) -> bool:
        """Whether the lease needs a refresh (nothing was written for a third of it)."""
        return (
            self.log_error is None and not self._final_taken
            and now >= self._last_io + self._log.lease / 3
        )

    def take(self, now: float) -> list[Write]:
        """The writes due now (no await: events added meanwhile wait for the next frame).

        :raises RelayError: nobody consumed the stream for too long (see
            :data:`_ABANDONED_MIN`): the writer stops recording it, and the lease lapses.
        """
        if now - self._consumed_at > self._abandon and self._unconsumed(now):
            bound = self._abandon_after()
            raise RelayError(
                f"nobody consumed the stream of {show_key(self.key)} for {bound:g} s:"
                " recording stopped"
            )
        events, self._pending = self._pending, []
        end = self._end
        if end is None and events:  # a frame of events, no end: one write (most of them)
            self._last_write = now
            return [self._entry(events, final=False, now=now)]
        writes: list[Write] = []
        if end is not None and end.outcome is Outcome.CANCELLED and self._release_on_cancel:
            if events:
                writes.append(self._entry(events, final=False, now=now))
            writes.append(Write(self.key, self._owner, release=True))
            self._final_taken = True
            return writes
        if events:
            writes.append(self._entry(events, final=False, now=now))
            self._last_write = now
        if end is not None:
            writes.append(self._entry([end], final=True, now=now))
            self._final_taken = True
        elif not events and now >= self._last_io + self._log.lease / 3:
            writes.append(Write(self.key, self._owner))
        return writes

    def _abandon_after(self) -> float:
        return self._abandon

    def _unconsumed(self, now: float) -> bool:
        """Started, not ending, and nobody has waited in ``anext`` for too long."""
        return (
            self._end is None and not self._closing and not self.in_next
            and now - self._consumed_at > self._abandon_after()
        )

    def written(self, outcomes: list[tuple[Write, Any]], now: float) -> bool:
        """What this stream's writes of a frame met; ``True`` when its recording is over."""
        if len(outcomes) == 1:  # a frame's entry, appended, no cancel asked (most of them)
            write, result = outcomes[0]
            if result is False and write.entry is not None and not write.final:
                self._last_io = now
                self.writes += 1
                return False
        cancel = False
        for write, result in outcomes:
            if isinstance(result, Exception):
                lost = isinstance(result, RelayLeaseLostError) and self._only_consumer
                self.broken(result, cancelled=lost)
                if lost:  # another worker streams this reply now: stop generating it here
                    self._stream.cancel()
                return True
            self._last_io = now
            if write.release or write.final:
                self.writes += write.final
                self._done.set()
                return True
            if write.entry is None:
                self.refreshes += 1
            else:
                self.writes += 1
            cancel = cancel or bool(result)
        if cancel:
            self._stream.cancel()
        return False

    def abandoned(self) -> None:
        """The writer stopped (its event loop is ending): nothing will be written."""
        self._done.set()

    def _entry(self, events: list[Event], *, final: bool, now: float) -> Write:
        self._number += 1
        token: dict[str, Any] | None = None
        end: dict[str, Any] | None = None
        if final:
            token = self._stream.resume_token()
            reply = token.get("reply") or {}
            end_event = events[0]
            assert type(end_event) is End
            metadata = {
                name: reply.get(name)
                for name in ("id", "model", "usage", "outcome", "stream_end", "end_reason")
            }
            metadata["finish_reasons"] = [c.get("finish_reason") for c in reply.get("choices", [])]
            end = end_record(end_event.outcome, end_event.reason, metadata, token)
            entry = Entry(self._number, tuple(coalesce(events)), end)
            return Write(self.key, self._owner, entry, None, True)
        if self._last_token == 0.0 or now - self._last_token >= self._log.token_interval:
            token = self._stream.resume_token()
            self._last_token = now
        joined = tuple(events) if len(events) < 2 else tuple(coalesce(events))
        return Write(self.key, self._owner, plain_entry(self._number, joined), token, False)


class RecordedStream(ReplyStream):
    """A :class:`~fluxstream._stream.ReplyStream` recorded into a :class:`ReplyLog` as it is
    consumed (see :meth:`ReplyLog.record`): the stream's whole API, and the recorder's
    state (:attr:`log_error`, :attr:`writes`, :attr:`refreshes`, :meth:`start`)."""

    #: Writes the delivered events into the log (the stream's last observer).
    recorder: Recorder

    @classmethod
    def adopt(cls, stream: ReplyStream, recorder: Recorder) -> RecordedStream:
        """Make ``stream`` itself a recorded stream, recorded by ``recorder``.

        The caller's own object becomes recorded -- same state, same identity, still a
        ``ReplyStream`` -- rather than being wrapped: a wrapper had to re-implement the
        stream's whole API (and was no ``ReplyStream``), and two objects for one stream
        would each think they own its response."""
        if type(stream) is not ReplyStream:
            raise TypeError(f"only a plain ReplyStream can be recorded, not {stream!r}")
        stream.__class__ = cls
        recorded = cast("RecordedStream", stream)
        recorded.recorder = recorder
        recorded.add_observer(recorder)
        return recorded

    @property
    def key(self) -> str:
        """The key the stream is recorded under."""
        return self.recorder.key

    @property
    def stream(self) -> ReplyStream:
        """The stream recorded: this very object."""
        return self

    @property
    def log_error(self) -> BaseException | None:
        """The first error of the log (recording stopped then; the stream went on)."""
        return self.recorder.log_error

    @property
    def writes(self) -> int:
        """Entries written (terminal included)."""
        return self.recorder.writes

    @property
    def refreshes(self) -> int:
        """Lease refreshes (each one log command)."""
        return self.recorder.refreshes

    async def start(self) -> None:
        """Create the reply in the log (done by ``async with`` or the first ``anext``; call it
        first when followers must find the key before the stream is consumed). Idempotent."""
        await self.recorder.start()

    async def __aenter__(self) -> RecordedStream:
        await self.recorder.start()
        try:
            await super().__aenter__()
        except BaseException:
            await self.recorder.finish()
            raise
        return self

    async def aclose(self) -> None:
        try:
            await super().aclose()
        finally:
            await self.recorder.finish()

    async def __anext__(self) -> Event:
        recorder = self.recorder
        if not recorder.started:
            await recorder.start()
        recorder.in_next = True
        try:
            return await super().__anext__()
        except StopAsyncIteration:
            await recorder.finish()
            raise
        except BaseException:
            with anyio.CancelScope(shield=True):
                await recorder.finish()
            raise
        finally:
            recorder.in_next = False


#: What the log never stores: path events are a view of the tool-call and text deltas it
#: stores (a follower that wants them runs a ``structured.PathTracker`` over what it reads),
#: and would more than double its entries and break the runs of deltas that coalesce.
_DERIVED = (PathStart, PathDelta, PathDone)


def without_paths(event: Event) -> list[Event]:
    """The events of a stream that asked for path events, as the log stores them."""
    return [] if type(event) in _DERIVED else [event]


def _tracks_paths(stream: Source) -> bool:
    """The stream puts path events among its own (``json_paths=True``): decided once, so a
    recording of any other stream keeps its no-transform path."""
    parser = getattr(stream, "_parser", None)
    return getattr(parser, "paths", None) is not None


class Records(Protocol):
    """A log that records streams (:class:`~fluxstream.relay.log.ReplyLog`)."""

    def record(
        self, stream: ReplyStream, *, key: str | None = None, only_consumer: bool = False
    ) -> RecordedStream: ...


async def produce(stream: ReplyStream, log: Records, *, key: str | None = None) -> Reply:
    """Drive ``stream`` to its end, recording it into ``log``; returns the reply. For a
    worker that relays a reply it does not show itself (followers read it from the log):
    the relay is the stream's only consumer, so a lost lease cancels the upstream (see
    :meth:`~fluxstream.relay.ReplyLog.record`)."""
    recorded = log.record(stream, key=key, only_consumer=True)
    async with recorded:
        async for _ in recorded:
            pass
    return recorded.reply
