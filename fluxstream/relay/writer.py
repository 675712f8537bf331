"""One writer per log and event loop for every stream the process records.

A task per recorded stream, each with its own frame timer, wake-ups and round trip, cost
about as much CPU per write as parsing the upstream delta (cProfile at 500 streams,
``benchmarks/bench_relay.py``), and its round trips went out one by one as the tasks woke.
Instead one background task writes what every stream has due, together, in one call
(the log's batch write: on Redis one round trip, and on one Redis one script call); what
becomes due while a round trip is out goes in the next one. The rules per stream stay those
of a writer of its own: an event is written at once when the stream's last write is a frame
old, else at that frame's end (at most one write per stream per frame, never held longer
than a frame); the lease is refreshed when there is nothing to write; the terminal entry is
written as soon as the stream ends. (A shared frame clock instead made every delta wait half
a frame on average.) Round trips are spaced: one starts no sooner than the log's
``write_spacing`` after the previous one started. Under load, writes that become due in
separate event-loop passes (each upstream delta arrives in its own) would otherwise each get a
round trip, whose fixed cost is several times a further write's in the same one; a write that
becomes due after a quiet spell still goes at once (so spacing only delays what shares a round
trip, by at most the spacing, as Kafka's ``linger.ms``). What each write means (cancel
requested, lease lost, log failed) goes back to its stream (:meth:`Recording.written`), so
one stream's failure never stops another's recording.

The writer knows a log only as the batch write it is given, and a stream only as a
:class:`Recording`: it stands below the log and the recorder, which both use it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

from .._io.tasks import spawn
from .codec import Entry

__all__ = ["Recording", "WriteMany", "Write", "Writer", "current_loop"]


@dataclass(slots=True)
class Write:
    """One write of a producer, for a log's batch write: append ``entry`` (with ``token``;
    ``final`` ends the reply), or with no entry refresh the lease, or with ``release`` drop
    it.

    Not frozen, though nothing changes it: a frozen dataclass sets each field through
    ``object.__setattr__``, four times the CPU of a plain one, and a producer makes one
    per write."""

    key: str
    owner: str
    entry: Entry | None = None
    token: dict[str, Any] | None = None
    final: bool = False
    release: bool = False


#: A log's batch write: for each write, whether a cancel was requested, or the error it met.
WriteMany = Callable[[list[Write]], Awaitable[list[bool | Exception]]]


class Recording(Protocol):
    """A stream the writer writes for (:class:`fluxstream.relay.producer.Recorder`)."""

    def ready_at(self) -> float:
        """When the writer may write what it has (``inf``: nothing to write)."""

    def idle_due(self, now: float) -> bool:
        """Whether its lease needs a refresh."""

    def take(self, now: float) -> list[Write]:
        """The writes due now (may raise: the stream then stops recording alone)."""

    def written(self, outcomes: list[tuple[Write, Any]], now: float) -> bool:
        """What its writes met; ``True`` when its recording is over."""

    def broken(self, exc: BaseException) -> None:
        """Its recording stopped on ``exc``."""

    def abandoned(self) -> None:
        """The writer stopped (its event loop is ending): nothing more will be written."""


def current_loop() -> object:
    """The running event loop (asyncio's, or trio's root task): a writer serves one."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        import trio

        return trio.lowlevel.current_root_task()


class Writer:
    """Writes the entries, lease refreshes and ends of the streams recorded into one log.

    :param spacing: seconds from one round trip's start before the next may start (the
        log's ``write_spacing``; 0: each as soon as something is due)."""

    def __init__(
        self, write_many: WriteMany, lease: float, loop: object, spacing: float = 0.0
    ) -> None:
        self._write_many = write_many
        self._lease = lease
        #: Seconds from a round trip's start before the next may start (0: none).
        self._spacing = spacing
        #: When the last round trip started (``-inf``: none yet).
        self._started = -math.inf
        self.loop = loop
        self._streams: dict[Recording, None] = {}
        #: Streams with something to write (events or the end), in the order they got it.
        self._active: dict[Recording, None] = {}
        self._wake: _Wake = (
            _LoopWake(loop) if isinstance(loop, asyncio.AbstractEventLoop) else _AnyioWake()
        )
        self._running = False
        self._refresh_scan = 0.0

    def add(self, stream: Recording) -> None:
        self._streams[stream] = None
        if not self._running:
            self._running = True
            spawn(self._run)

    def remove(self, stream: Recording) -> None:
        self._streams.pop(stream, None)
        self._active.pop(stream, None)

    def wake(self, stream: Recording) -> None:
        """``stream`` has something to write (its first pending event, or its end)."""
        if stream in self._streams:
            self._active[stream] = None
            self._wake.set()

    async def _run(self) -> None:
        try:
            while self._streams:
                # A new wake-up first: an event added after the scan below sets it.
                self._wake.clear()
                now = time.monotonic()
                due: list[Recording] = []
                soonest = math.inf
                idle: list[Recording] = []
                for stream in self._active:
                    ready = stream.ready_at()
                    if ready <= now:
                        due.append(stream)
                    elif ready == math.inf:  # nothing to write after all: lease refreshes only
                        idle.append(stream)
                    else:
                        soonest = min(soonest, ready)
                for stream in idle:
                    del self._active[stream]
                # Within the spacing of the last round trip's start nothing is sent: what is
                # due waits (without a scan per wake-up), joined by what becomes due meanwhile.
                hold = self._started + self._spacing - now
                if hold <= 0 and now >= self._refresh_scan:
                    # Lease refreshes: a scan of every stream a few times per lease.
                    active = self._active
                    due.extend(s for s in self._streams if s not in active and s.idle_due(now))
                    self._refresh_scan = now + self._lease / 6
                if due:
                    if hold > 0:
                        await self._wake.pause(hold)
                        continue
                    await self._write(due)
                    continue
                await self._wake.wait(max(0.0, hold, min(soonest, self._refresh_scan) - now))
        finally:
            self._running = False
            self._wake.stop()
            if self._streams:  # cancelled (the loop ends): nothing is left waiting for it
                for stream in list(self._streams):
                    stream.abandoned()
                self._streams.clear()
                self._active.clear()

    async def _write(self, due: list[Recording]) -> None:
        now = time.monotonic()
        writes: list[Write] = []
        #: Each stream with the end of its writes in ``writes`` (taken together: one run).
        runs: list[tuple[Recording, int]] = []
        pop = self._active.pop
        for stream in due:
            pop(stream, None)
            try:
                taken = stream.take(now)
            except Exception as exc:  # this stream's entry cannot be built: it stops alone
                stream.broken(exc)
                self.remove(stream)
                continue
            if taken:
                writes += taken
                runs.append((stream, len(writes)))
        if not writes:
            return
        self._started = now
        try:
            results = await self._write_many(writes)
        except Exception as exc:  # a backend bug: every stream of this frame stops recording
            results = [exc for _ in writes]
        done = time.monotonic()
        if len(results) != len(writes):
            raise ValueError(f"{len(results)} results for {len(writes)} writes")
        start = 0
        for stream, end in runs:
            if end - start == 1:
                outcomes = [(writes[start], results[start])]
            else:
                outcomes = list(zip(writes[start:end], results[start:end], strict=True))
            start = end
            try:
                finished = stream.written(outcomes, done)
            except Exception as exc:  # e.g. its stream's cancel failed: it stops alone
                stream.broken(exc)
                finished = True
            if finished:
                self.remove(stream)


class _Wake(Protocol):
    """The writer's wake-up: set by a stream with something to write, waited for with a
    timeout (the next frame's end, or the next lease scan)."""

    def set(self) -> None: ...

    def clear(self) -> None: ...

    async def wait(self, within: float) -> None: ...

    async def pause(self, within: float) -> None:
        """Wait ``within`` seconds, whatever is set meanwhile (the round trips' spacing)."""

    def stop(self) -> None:
        """The writer stopped: nothing is kept for a next wait."""


class _AnyioWake:
    """A wake-up on any event loop anyio runs (trio)."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        if self._event.is_set():
            self._event = anyio.Event()

    async def wait(self, within: float) -> None:
        with anyio.move_on_after(within):
            await self._event.wait()

    async def pause(self, within: float) -> None:
        await anyio.sleep(within)

    def stop(self) -> None:
        """Nothing is kept between waits."""


class _LoopWake:
    """A wake-up on an asyncio loop: one future per wait, and a timer kept between waits.
    An ``anyio.Event`` and a cancel scope per wait cost more than the rest of a one-delta
    frame's bookkeeping (cProfile, ``benchmarks/bench_relay_write.py --batch 1``), and the
    writer waits once per round trip: a new timer each time (made, pushed on the loop's
    heap, cancelled) was a tenth of a one-write round trip's bytecodes. The timer is kept
    while it is due no later than the next wait needs (waking early is harmless: the
    writer scans again and waits on), so it is made again only when a wait needs it
    sooner, or after it fired."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._set = False
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def set(self) -> None:
        if self._set:  # woken already (every stream of a frame but the first says so)
            return
        self._set = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self, within: float) -> None:
        if self._set:
            return
        if within <= 0:
            await asyncio.sleep(0)  # a checkpoint, as a lapsed cancel scope gives
            return
        loop = self._loop
        at = loop.time() + within
        timer = self._timer
        if timer is None or timer.when() > at:
            if timer is not None:
                timer.cancel()
            self._timer = loop.call_at(at, self._fire)
        waiter = self._waiter = loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    async def pause(self, within: float) -> None:
        """A wait of ``within`` seconds that :meth:`set` does not end, on a timer of its
        own: taking the kept timer for it would make that timer again at the next wait
        (twice the timers per round trip)."""
        paused = self._loop.create_future()
        timer = self._loop.call_later(within, _resolve, paused)
        try:
            await paused
        except BaseException:
            timer.cancel()
            raise

    def _fire(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def stop(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
