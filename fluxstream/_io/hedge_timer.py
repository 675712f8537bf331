"""The hedged race on asyncio: the first upstream read in the stream's own task, under a timer.

Most armed hedges never fire (that is what ``hedge_after`` at a high percentile means), so a
request with a hedge armed should cost what it costs without one plus a timer and a few
calls. On asyncio the first upstream is therefore read in the stream's own task, no task
group and no second task: the hedge's upstream, request and task are chosen and made only
when the timer fires (:meth:`TimerRace._fire`). A hedge that wins interrupts the first racer
by cancelling the stream's task, a cancellation the race takes back (:meth:`TimerRace._run_first`).
trio has no way to start a task from a timer: it races in a task group (:class:`.hedge.Hedge`),
ending each racer the same ways (:class:`.hedge_racers.Racers`).
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import anyio

from .._events import Event
from .attempt import Attempt, AttemptCancelled
from .hedge_racers import Racers
from .hedge_reading import Racer, RaceReads, hedge_connect, run_racer

__all__ = ["TimerRace"]


class TimerRace:
    """One race on asyncio: the first racer in the stream's task, the hedge in a task of its
    own once the timer fired, decided by the order they settled in."""

    def __init__(self, racers: Racers, after: float) -> None:
        self.racers = racers
        self.after = after
        #: The stream's task while it runs the first racer (Python 3.11+: what
        #: :meth:`stop_first` cancels), and whether it did.
        self._first_task: asyncio.Task[Any] | None = None
        self._interrupted = False
        #: Before Python 3.11, the scope the first racer is read under instead.
        self._scope: anyio.CancelScope | None = None
        #: The racers in the order they settled.
        self._settled: list[Racer] = []
        #: The hedge's task, once the timer fired.
        self._hedge_task: asyncio.Task[None] | None = None

    def cancel(self) -> None:
        """The race was cancelled (the racers' connections aborted already): the first
        racer and the hedge's task are interrupted."""
        self.stop_first()
        if self._hedge_task is not None:
            self._hedge_task.cancel()

    def stop_first(self) -> None:
        """Interrupt the first racer's connect or read (the task or scope it runs in), if it
        runs."""
        if self._scope is not None:
            self._scope.cancel()
        task = self._first_task
        if task is not None and not self._interrupted:
            task.get_loop().call_soon(self._cancel_first)

    def _cancel_first(self) -> None:
        """:meth:`stop_first` from the event loop: the stream's task, still in the first
        racer, is waiting there, so the cancellation is raised there (and taken back by
        :meth:`_run_first`), never at an await after it."""
        task = self._first_task
        if task is not None and not self._interrupted:
            self._interrupted = True
            task.cancel()

    async def run(
        self, loop: asyncio.AbstractEventLoop, into_parser: bool
    ) -> tuple[Attempt, list[Event], RaceReads | None]:
        """:meth:`Hedge.run <fluxstream._io.hedge.Hedge.run>` on asyncio: the first upstream
        is read here, in the stream's task (:meth:`_run_first`); which upstream the hedge
        asks, its request and its task are decided and made only when the timer fires
        (:meth:`_fire`)."""
        racers = self.racers
        first = racers.start(into_parser)
        timer = loop.call_at(loop.time() + self.after, self._fire)
        try:
            try:
                await self._run_first(first)
            finally:
                timer.cancel()
            task = self._hedge_task
            if task is None:  # the usual case: the timer never fired (or could not hedge)
                if racers.cancelled:
                    raise AttemptCancelled
                return racers.served(first)
            serving, loser = await self._decide(first, task)
            await racers.close_loser(loser)
        except BaseException:
            await self._close_all()
            raise
        if racers.cancelled:
            await self._close_all()
            raise AttemptCancelled
        return racers.served(serving)

    async def _run_first(self, first: Racer) -> None:
        """The first racer, run in the stream's task so that a winning hedge or a cancel can
        interrupt it (:meth:`stop_first`): by cancelling the task, taken back here as
        ``asyncio.timeout`` takes back its own cancellation (the task's count of cancel
        requests says whether another came too: then it goes on up). A timeout or an anyio
        scope would do the same, at four to six times the cost, and every request with
        ``hedge_after`` pays it. An anyio scope before Python 3.11 (no such count there)."""
        channel = self.racers.channel
        if sys.version_info < (3, 11):  # pragma: no cover - Task.uncancel is 3.11+
            try:
                with anyio.CancelScope() as self._scope:
                    await run_racer(channel, first, channel.connect)
                    self._settled.append(first)
            finally:
                self._scope = None
            return
        task = self._first_task = asyncio.current_task()
        assert task is not None
        cancelling = task.cancelling()
        try:
            await run_racer(channel, first, channel.connect)
            self._settled.append(first)
        except asyncio.CancelledError:
            if not self._interrupted or task.uncancel() > cancelling:
                raise  # not ours, or not ours alone
        else:
            if self._interrupted:  # something in the racer swallowed it: the count goes back
                task.uncancel()
        finally:
            self._first_task = None

    def _fire(self) -> None:
        """The timer: no content from the first upstream in time; the hedge is asked of the
        next upstream not cooling down now, in a task of its own (in the stream's context,
        so trace headers follow)."""
        racers = self.racers
        if racers.cancelled or self._settled:
            return
        target = racers.route.peek(time.monotonic())
        if target is None:
            return
        spec = racers.hedge_request(target)
        if spec is None:
            return
        hedge = racers.add_hedge(target, spec, self.after)
        self._hedge_task = asyncio.get_running_loop().create_task(self._hedge_runs(hedge))

    async def _hedge_runs(self, hedge: Racer) -> None:
        """The hedge's task: connect and read until content. Settled before the first
        racer: a win interrupts the first racer's read, a failure is recorded and closed
        here while the first upstream goes on alone."""
        assert hedge.spec is not None
        racers = self.racers
        await run_racer(racers.channel, hedge, hedge_connect(racers.channel, hedge, hedge.spec))
        self._settled.append(hedge)
        if self._settled[0] is not hedge or racers.cancelled:
            return  # the first settled first: the stream's task decides
        if hedge.won:
            self.stop_first()
            return
        racers.failed_hedge(hedge)
        await racers.close(hedge)

    async def _decide(
        self, first: Racer, task: asyncio.Task[None]
    ) -> tuple[Racer, Racer | None]:
        """The hedge was sent: the first with content serves, the other loses; a failure
        leaves the other to serve, whatever it answers (as on trio, by the order the racers
        settled in: the first racer has settled here unless a winning hedge interrupted
        it). The one serving and the loser."""
        racers = self.racers
        hedge = racers.all[1]
        if racers.cancelled or not self._settled:
            return first, None
        if self._settled[0] is hedge:
            if hedge.won:
                racers.hedge_won(self.after)
                return hedge, first
            await asyncio.wait([task])  # failed: recorded and closed by its task
            return first, None
        if first.won:
            racers.abort(hedge)
            task.cancel()
            await asyncio.wait([task])
            racers.hedge_lost(hedge)
            return first, hedge
        await racers.first_failed()  # the hedge is the next upstream, asked already
        await asyncio.wait([task])
        return hedge, None

    async def _close_all(self) -> None:
        """Both connections closed (a cancel, or the task's cancellation), the hedge's task
        first, while it still races."""
        with anyio.CancelScope(shield=True):
            task = self._hedge_task
            if task is not None and not task.done():
                task.cancel()
                await asyncio.wait([task])
            await self.racers.close_all()
