"""The racers of one hedged first connect, and every way each one ends.

A race is run one way on asyncio (:mod:`.hedge_timer`: a timer, the hedge's task made only
when it fires) and another on trio (:mod:`.hedge`: a task group), but it ends the same ways
on both: the loser's connection aborted at once and closed, what it read into the stream's
parser forgotten, a failed hedge recorded and not asked again, the route moved when the
hedge serves, everything closed when the stream is cancelled, and the racer that serves
handed to the reader as if it alone had been asked. :class:`Racers` is those endings, kept
in one place so that the two paths cannot come to decide them differently.
"""

from __future__ import annotations

import logging
import time

import anyio

from .._core.failover import FAILOVER_ERRORS, reason_of, segment_end
from .._events import Event, Handoff
from .._reply import SegmentEnd
from ..errors import FluxstreamError, show_key
from .attempt import Attempt, AttemptCancelled, PushedBack, RequestSpec
from .channel import Channel
from .failover import Route, Target, moves_on
from .hedge_reading import Racer, RaceReads, probe_for

__all__ = ["Racers"]

logger = logging.getLogger("fluxstream")


class Racers:
    """The racers of one race (the first upstream's, then the hedge's once it is sent),
    whether the race was cancelled, and how each of them ends."""

    def __init__(self, channel: Channel, route: Route) -> None:
        self.channel = channel
        self.route = route
        #: The first upstream's racer, then the hedge's once it is sent.
        self.all: list[Racer] = []
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        return self._cancelled or self.channel.recovery.cancelled

    def cancel(self) -> None:
        """The race is cancelled (from any task): every connection is aborted at once (the
        channel's own ``cancel()`` stops the first upstream's retries)."""
        self._cancelled = True
        for racer in self.all:
            if racer.attempt is not None:
                racer.attempt.cancel()

    # ------------------------------------------------------------------ who races

    def start(self, into_parser: bool) -> Racer:
        """The racer of the upstream asked first, the race's only one until a hedge is sent:
        read into the stream's own parser when it has read nothing yet (see
        :meth:`FirstConnect.first <fluxstream._io.hedge.FirstConnect.first>`), else into a
        probe."""
        target = self.route.current
        first = Racer(target, None if into_parser else probe_for(self.channel.parser, target))
        self.all = [first]
        return first

    def hedge_request(self, target: Target) -> RequestSpec | None:
        """The hedge's request, or ``None`` when ``target``'s API cannot be asked it (no
        hedge then: the first upstream goes on alone)."""
        try:
            return target.request(self.route.body_for(target))
        except FluxstreamError as exc:
            logger.info("no hedge on %s: %s", target.label, reason_of(exc))
            return None

    def add_hedge(self, target: Target, spec: RequestSpec, after: float) -> Racer:
        """The hedge sent to ``target`` (``after`` seconds without content): its racer, read
        into a probe of its API."""
        hedge = Racer(target, probe_for(self.channel.parser, target))
        hedge.spec = spec
        self.all.append(hedge)
        channel = self.channel
        logger.info(
            "stream %s: no content from %s within %.3gs; hedging on %s",
            show_key(channel.parser.content_key), self.all[0].target.label,
            after, target.label, extra=channel.log_extra(),
        )
        return hedge

    # ------------------------------------------------------------------ how it is decided

    def hedge_won(self, after: float) -> None:
        """The hedge had content first: the first upstream's connection is aborted, and the
        route moves to the hedge."""
        self.abort(self.all[0])
        self._moved(f"hedged: no content within {after:.3g}s", SegmentEnd.LOST_HEDGE, "")

    def hedge_lost(self, hedge: Racer) -> None:
        """The first upstream had content first: the hedge's request is recorded as lost
        (losing is no failure) and not asked again by this stream."""
        self.route.noted(hedge.target, SegmentEnd.LOST_HEDGE, "", 1)
        self.route.drop(hedge.target)

    async def first_failed(self) -> None:
        """The first upstream failed while the hedge is out: the circuit breaker counts it,
        its connection is closed, and the route moves to the hedge (the next upstream, asked
        already: it serves whatever it answers)."""
        first = self.all[0]
        self.route.failed(time.monotonic())
        with anyio.CancelScope(shield=True):
            await self.channel.close(drain=False)
        self._moved(first.reason, segment_end(first.reason, False), first.reason)

    def failed_hedge(self, racer: Racer) -> None:
        """The hedge failed: recorded, counted by the circuit breaker (unless the request
        itself was at fault), and not asked again by this stream."""
        route = self.route
        error = racer.error
        counts = error is None or (
            isinstance(error, FAILOVER_ERRORS) and moves_on(self.channel, error)
        )
        if counts and route.cooldown is not None:
            route.cooldown.failed(racer.target.label, time.monotonic())
        route.noted(racer.target, segment_end(racer.reason, False), racer.reason, 1)
        route.drop(racer.target)
        logger.info("hedge on %s failed (%s); %s goes on", racer.target.label, racer.reason,
                    self.all[0].target.label, extra=self.channel.log_extra())

    def _moved(self, reason: str, kind: SegmentEnd, detail: str) -> None:
        """The route moves to the hedge (before content): the first upstream's segment ends
        (``kind``, ``detail``) with its requests, the hedge has sent one, and the
        ``Handoff`` waits in :attr:`Route.undelivered` to be delivered first."""
        route, channel = self.route, self.channel
        self.forget(self.all[0])
        hedge = self.all[1].target
        recovery = channel.recovery
        route.close_segment(channel.parser, detail, recovery.attempts, kind)
        route.take_over(hedge)
        recovery.next_upstream(time.monotonic())
        recovery.attempts = 1
        # A hedge that wins is routine (what it is for); an upstream that failed is not.
        logger.log(
            logging.INFO if kind is SegmentEnd.LOST_HEDGE else logging.WARNING,
            "stream %s: %s; %s serves", show_key(channel.parser.content_key), reason,
            hedge.label, extra=channel.log_extra(),
        )
        route.undelivered.append(Handoff(
            channel.parser.content_key, hedge.label, hedge.api.name, route.model_of(hedge),
            reason, 0,
        ))

    # ------------------------------------------------------------------ closing

    def forget(self, racer: Racer) -> None:
        """``racer`` will not serve: what it read into the stream's parser is taken out
        (nothing of an upstream that lost reaches the reply), and it reads no more in."""
        if racer.probe is None and not racer.forgotten:
            racer.forgotten = True
            racer.read_in = False
            racer.events = []
            racer.parse_error = None
            self.channel.parser.forget_reads()

    def abort(self, racer: Racer) -> None:
        """``racer`` lost: its connection is aborted now (the server sees it close at once;
        losing is no failure for the circuit breaker)."""
        attempt = racer.attempt
        if racer is self.all[0]:
            attempt = self.channel.attempt  # maybe still connecting (racer.attempt unset)
        if attempt is not None:
            attempt.cancel()

    async def close(self, racer: Racer) -> None:
        """``racer``'s connection closed, whatever cancels the caller meanwhile."""
        with anyio.CancelScope(shield=True):
            await self._close(racer)

    async def _close(self, racer: Racer) -> None:
        if racer is self.all[0]:
            await self.channel.close(drain=False)
        elif racer.attempt is not None:
            await racer.attempt.close(drain=False)
            racer.attempt = None

    async def close_loser(self, loser: Racer | None) -> None:
        """The race's loser closed, whatever cancels the caller (not when the stream was
        cancelled meanwhile: :meth:`close_all` closes everything then)."""
        if loser is not None and not self.cancelled:
            await self.close(loser)

    async def close_all_shielded(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.close_all()

    async def close_all(self) -> None:
        """Both connections closed (a cancel, or the task's cancellation); the hedge, if it
        was sent and is not recorded yet, is recorded as cancelled."""
        for racer in self.all:
            self.abort(racer)
            self.forget(racer)  # nothing of it was delivered
        await self.channel.close(drain=False)
        if len(self.all) > 1:
            hedge = self.all[1]
            await self._close(hedge)
            route = self.route
            if hedge.target in route.targets[route.index + 1:]:
                route.noted(hedge.target, SegmentEnd.CANCELLED, "", 1)
                route.drop(hedge.target)

    # ------------------------------------------------------------------ serving

    def served(self, racer: Racer) -> tuple[Attempt, list[Event], RaceReads | None]:
        """The race's answer: ``racer`` serves, the bytes it read put back in front of its
        body for the reader (none when it was read into the stream's parser: what that gave
        is the third value), after the events to deliver first. Raises what its connect
        raised when it never answered."""
        channel = self.channel
        attempt = racer.attempt
        hedged = racer is not self.all[0]
        if hedged:
            assert racer.spec is not None
            channel.parser.switch_format(racer.target.api.name)
            channel.spec = racer.spec
            channel.resuming_by = None
        if attempt is None:  # it never answered: as the connect would have raised
            raise racer.error or AttemptCancelled()
        if hedged:
            channel.attempt = attempt
            if channel.reads_ahead:
                channel.start_read_ahead()
        if not attempt.is_json and (racer.chunks or racer.error or racer.ended):
            attempt.body = PushedBack(
                attempt, racer.chunks, attempt.body, error=racer.error, ended=racer.ended
            )
        undelivered = self.route.take_undelivered()
        if not racer.read_in:
            return attempt, undelivered, None
        return attempt, undelivered, RaceReads(racer.events, racer.parse_error)
