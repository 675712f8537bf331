"""Hedged first tokens: the next upstream is asked too when the first content is slow.

A slow first token is the usual tail of a request (a queue, a cold replica, a long prefill),
and one upstream alone can only wait it out. With ``Failover(hedge_after=s)``, when the
upstream asked first has sent no content ``s`` seconds after the request, the same request
(translated into the next upstream's API, as a handoff before content sends it) goes there
too; the first of the two to deliver content serves the reply, and the other is closed at
once (its connection aborted, so the provider stops generating for nobody), its request kept
in ``reply.segments`` (``kind="lost_hedge"``: billing is never a surprise). Only before
content: once text was shown, another generation could not be merged with it.

Which connects race: the stream's first request, and each request a handoff before content
sends (the upstream handed to, against the one after it: a failing upstream is often a slow
one too). Never a retry of the same upstream (its own attempts are the first racer's), never
after content, and never a hedge that serves because the first failed meanwhile (it was
asked already; a third request would only add cost).

:class:`Hedge` runs in the reader's first connect (:class:`FirstConnect`): only a parser knows
when content came, so each racer is read until then into one. The first upstream of a stream's
first request is read into the stream's own parser, which has read nothing else yet: when it
wins (the usual case) the events its reads gave are the reader's first read
(:class:`RaceReads`), so nothing is parsed twice; when it loses (or the race is cancelled)
the parser forgets those reads (:meth:`~fluxstream._parser.StreamParser.forget_reads`), so the
loser's id, model, counts, event id, usage or error event never reach the reply. Every other
racer (the hedge; both racers of a hand-off before content, whose parser holds the reply so
far) is read into a probe parser of its API, thrown away after, keeping its bytes; a winner's
bytes are put back in front of its response body (:class:`~fluxstream._io.attempt.PushedBack`).
Either way the reader goes on as if no race had happened: its parser, deadlines, retries and
failover see one connection.

Most armed hedges never fire (that is what ``hedge_after`` at a high percentile means), so on
asyncio the first upstream is read in the stream's own task under a timer, and the hedge's
upstream, request and task are chosen and made only when the timer fires; that task
interrupts the first racer (by a cancellation of the stream's task that the race takes back)
when the hedge wins. Armed and never fired, a request then costs what it costs without the
hedge plus that timer and a few calls. trio has no way to start a task from a timer, so
there both racers run in a task group from the start (the same decisions, checked by the
same tests on both).

The race is in four parts: this module's :class:`FirstConnect` and :class:`Hedge` (the race
on trio, and the entry on both); :mod:`.hedge_timer` (the race on asyncio);
:mod:`.hedge_reading` (one racer, connected and read until content, into the stream's parser
or a probe); :mod:`.hedge_racers` (how each racer ends, the same on both paths).

* The first upstream settles before the hedge is due (content, an error, a drop, the end):
  no hedge is sent, and the reader goes on as without hedging (a failure is then the
  ordinary failover).
* The hedge fails (a status, a drop, an error event): that upstream is not asked again by
  this stream, the circuit breaker counts it, and the first upstream goes on alone.
* The first upstream fails while the hedge is out: the hedge is the next upstream, already
  asked (no third request): it serves, whatever it answers, announced by a ``Handoff``; if
  its request fails too, the reply moves on from it as from any upstream, and that
  ``Handoff`` is still delivered, first (:attr:`Route.undelivered`).
* The hedge wins: a ``Handoff`` whose reason starts with ``"hedged"``, at offset 0.
* Losing a race is no failure: the circuit breaker does not count it.
* ``stream.cancel()``, ``aclose()`` from another task, or a cancelled task closes both.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._events import Event
from .attempt import Attempt, AttemptCancelled
from .channel import Channel
from .failover import Route
from .hedge_racers import Racers
from .hedge_reading import Racer, RaceReads, hedge_connect, run_racer
from .hedge_timer import TimerRace
from .tasks import on_asyncio

__all__ = ["FirstConnect", "Hedge", "RaceReads"]


class FirstConnect:
    """A stream's first connect, and the one of each handoff before content: raced against
    the next upstream with ``hedge_after`` (the :class:`Hedge` that runs meanwhile is what
    :meth:`cancel` reaches); the attempt and the events to deliver first."""

    def __init__(self, channel: Channel, route: Route | None) -> None:
        self.channel = channel
        self.route = route
        self._hedge: Hedge | None = None

    async def __call__(self) -> tuple[Attempt, list[Event]]:
        attempt, events, _ = await self._connect(False)
        return attempt, events

    def first(self) -> Coroutine[Any, Any, tuple[Attempt, list[Event], RaceReads | None]]:
        """The stream's first request: its parser has read nothing yet, so a race reads the
        first upstream straight into it (never into a throwaway parser whose bytes the
        reader would parse again). When that upstream serves, what the race read of it is
        returned too, for the reader to take as its own first read. (The coroutine itself,
        not one awaiting it: every stream opens through here.)"""
        return self._connect(True)

    async def _connect(self, into_parser: bool) -> tuple[Attempt, list[Event], RaceReads | None]:
        route = self.route
        if route is None or route.hedge_after is None:  # the usual case: no race
            return await self.channel.connect(), [], None
        self._hedge = Hedge(self.channel, route, route.hedge_after, into_parser=into_parser)
        try:
            return await self._hedge.run()
        finally:
            self._hedge = None

    def cancel(self) -> None:
        """Interrupt a race in flight, from any task (see :meth:`Hedge.cancel`)."""
        if self._hedge is not None:
            self._hedge.cancel()


class Hedge:
    """The race of one stream's first content between its upstream and the next one: on
    asyncio a :class:`~.hedge_timer.TimerRace`, on trio a task group run here; the racers
    and their endings are a :class:`~.hedge_racers.Racers` either way."""

    def __init__(
        self, channel: Channel, route: Route, after: float, *, into_parser: bool = False
    ) -> None:
        self.channel = channel
        self.route = route
        self.after = after
        #: The first racer reads into the stream's own parser (it has read nothing yet).
        self._into_parser = into_parser
        self._racers = Racers(channel, route)
        #: On trio, the task group's scope while the racers run (what :meth:`cancel` reaches).
        self._group: anyio.CancelScope | None = None
        #: On asyncio, the race under a timer.
        self._timer: TimerRace | None = None

    def cancel(self) -> None:
        """Interrupt the race from any task: both connections are aborted at once (the
        channel's own ``cancel()`` stops the first upstream's retries)."""
        self._racers.cancel()
        if self._group is not None:
            self._group.cancel()
        if self._timer is not None:
            self._timer.cancel()

    @property
    def cancelled(self) -> bool:
        return self._racers.cancelled

    async def run(self) -> tuple[Attempt, list[Event], RaceReads | None]:
        """The attempt that serves the stream, its bytes read so far put back in front of
        its body (or read into the stream's parser already: the third value), and the
        events to deliver first (a ``Handoff`` when the hedge serves). Raises what the
        first connect would have raised without hedging when the upstream that serves never
        answered (the reader's failover takes it from there; a ``Handoff`` made before waits
        in :attr:`Route.undelivered` for it)."""
        if on_asyncio():  # trio cannot start a task from a timer: it races in a task group
            self._timer = TimerRace(self._racers, self.after)
            return await self._timer.run(asyncio.get_running_loop(), self._into_parser)
        channel, racers = self.channel, self._racers
        target = self.route.peek(time.monotonic())
        if target is None:
            return await channel.connect(), [], None
        spec = racers.hedge_request(target)
        if spec is None:
            return await channel.connect(), [], None
        first = racers.start(self._into_parser)
        serving: Racer | None = None
        loser: Racer | None = None
        send, receive = anyio.create_memory_object_stream[Racer](2)
        try:
            with send, receive:
                async with anyio.create_task_group() as group:
                    self._group = group.cancel_scope
                    group.start_soon(self._race, first, channel.connect, send)
                    with anyio.move_on_after(self.after):
                        serving = await receive.receive()  # settled in time: no hedge
                    if serving is None and not self.cancelled:
                        hedge = racers.add_hedge(target, spec, self.after)
                        group.start_soon(self._race, hedge, hedge_connect(channel, hedge, spec),
                                         send)
                        serving, loser = await self._decide(receive, first, hedge)
                    group.cancel_scope.cancel()  # the loser, still connecting or reading
            await racers.close_loser(loser)
        except BaseException:
            await racers.close_all_shielded()
            raise
        finally:
            self._group = None
        if self.cancelled or serving is None:  # stream.cancel() or aclose() during the race
            await racers.close_all_shielded()
            raise AttemptCancelled
        return racers.served(serving)

    async def _decide(
        self, receive: MemoryObjectReceiveStream[Racer], first: Racer, hedge: Racer
    ) -> tuple[Racer, Racer | None]:
        """Both are out: the first with content serves, the other loses (its connection is
        aborted here, closed once its task has ended); a failure leaves the other to serve,
        whatever it answers. The one serving and the loser; a ``Handoff`` when the route
        moves goes to :attr:`Route.undelivered`."""
        settled = await receive.receive()
        racers = self._racers
        if self.cancelled:
            return settled, None
        if settled.won:
            if settled is hedge:
                racers.hedge_won(self.after)
                return hedge, first
            racers.abort(hedge)
            racers.hedge_lost(hedge)
            return first, hedge
        if settled is hedge:  # the first upstream goes on alone
            racers.failed_hedge(hedge)
            await racers.close(hedge)
            return await receive.receive(), None
        await racers.first_failed()  # the hedge is the next upstream, asked already
        return await receive.receive(), None

    async def _race(
        self, racer: Racer, connect: Callable[[], Awaitable[Attempt]],
        send: MemoryObjectSendStream[Racer],
    ) -> None:
        """:func:`~.hedge_reading.run_racer`, then report it settled."""
        await run_racer(self.channel, racer, connect)
        await send.send(racer)
