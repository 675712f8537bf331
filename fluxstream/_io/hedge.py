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
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._core.failover import FAILOVER_ERRORS, reason_of, segment_end
from .._core.progress import CONTENT_EVENTS
from .._events import ErrorEvent, Event, Handoff
from .._observe import SendInfo
from .._parser import StreamParser
from .._reply import SegmentEnd
from ..errors import FluxstreamError, show_key
from .attempt import Attempt, AttemptCancelled, PushedBack, RequestSpec
from .channel import Channel
from .failover import Route, Target, moves_on
from .tasks import on_asyncio

__all__ = ["FirstConnect", "Hedge", "RaceReads"]

logger = logging.getLogger("fluxstream")
#: Bytes read from one racer without content before the race stops waiting on it: it is
#: talking (pings, metadata), and the reader's own limits decide from there.
_MAX_BUFFERED = 1 << 20
#: Reads of one racer before that (a server may send a byte at a time).
_MAX_READS = 100_000


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


class RaceReads:
    """What a race read of the upstream that serves into the stream's own parser: the
    events the parser gave for those reads, and the error its last one raised (the reader
    acts on both as on a read of its own)."""

    __slots__ = ("error", "events")

    def __init__(self, events: list[Event], error: FluxstreamError | None) -> None:
        self.events = events
        self.error = error


class _Racer:
    """One upstream in the race: its request, what was read so far, and how it settled."""

    def __init__(self, target: Target, probe: StreamParser | None) -> None:
        self.target = target
        #: The parser of its reads: a throwaway of its API that only tells when content came
        #: (its bytes, kept in :attr:`chunks`, are parsed again by the reader if it serves),
        #: or ``None``: the stream's own parser, whose events are kept in :attr:`events`.
        self.probe = probe
        self.attempt: Attempt | None = None
        self.chunks: list[bytes] = []
        #: What the stream's own parser gave for its reads, and the error one raised.
        self.events: list[Event] = []
        self.parse_error: FluxstreamError | None = None
        #: It was read into the stream's parser at least once.
        self.read_in = False
        #: Its reads were taken out of the stream's parser (it lost): it reads no more in.
        self.forgotten = False
        #: Its body ran out (nothing more to read after :attr:`chunks`).
        self.ended = False
        #: What ended it badly: the connect's error or a read's (replayed to the reader).
        self.error: BaseException | None = None
        #: Its first-token deadline passed while it was read.
        self.late = False
        #: An error event came before any content.
        self.error_event = False
        #: Content came (or a whole reply, or so much that the reader decides).
        self.won = False
        #: The hedge's request (made when the hedge is sent).
        self.spec: RequestSpec | None = None

    @property
    def reason(self) -> str:
        """Why it failed, as a segment's ``ended`` and a handoff's ``reason``."""
        if self.late:
            return "first_token timeout"
        if self.error is not None:
            return reason_of(self.error)
        if self.error_event:
            return "error event before content"
        return "connection closed before content"


class Hedge:
    """The race of one stream's first content between its upstream and the next one."""

    def __init__(
        self, channel: Channel, route: Route, after: float, *, into_parser: bool = False
    ) -> None:
        self.channel = channel
        self.route = route
        self.after = after
        #: The first racer reads into the stream's own parser (it has read nothing yet).
        self._into_parser = into_parser
        self._cancelled = False
        #: The scope a racer runs in that :meth:`cancel` reaches: the task group's, or (on
        #: asyncio before Python 3.11) the one the first racer is read under in the
        #: stream's own task.
        self._group: anyio.CancelScope | None = None
        #: On asyncio (Python 3.11+), the stream's task while it runs the first racer
        #: (what :meth:`_stop_first` cancels), and whether it did.
        self._first_task: asyncio.Task[Any] | None = None
        self._interrupted = False
        self._racers: list[_Racer] = []
        #: The racers in the order they settled (on the timer path).
        self._settled: list[_Racer] = []
        #: The hedge's task, once the timer fired (on the timer path).
        self._hedge_task: asyncio.Task[None] | None = None

    def cancel(self) -> None:
        """Interrupt the race from any task: both connections are aborted at once (the
        channel's own ``cancel()`` stops the first upstream's retries)."""
        self._cancelled = True
        for racer in self._racers:
            if racer.attempt is not None:
                racer.attempt.cancel()
        self._stop_first()
        if self._hedge_task is not None:
            self._hedge_task.cancel()

    def _stop_first(self) -> None:
        """Interrupt the first racer's connect or read (the scope it runs in), if it runs."""
        if self._group is not None:
            self._group.cancel()
        task = self._first_task
        if task is not None and not self._interrupted:
            task.get_loop().call_soon(self._cancel_first)

    def _cancel_first(self) -> None:
        """:meth:`_stop_first` on asyncio, from the event loop: the stream's task, still in
        the first racer, is waiting there, so the cancellation is raised there (and taken
        back by :meth:`_run_first`), never at an await after it."""
        task = self._first_task
        if task is not None and not self._interrupted:
            self._interrupted = True
            task.cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancelled or self.channel.recovery.cancelled

    async def run(self) -> tuple[Attempt, list[Event], RaceReads | None]:
        """The attempt that serves the stream, its bytes read so far put back in front of
        its body (or read into the stream's parser already: the third value), and the
        events to deliver first (a ``Handoff`` when the hedge serves). Raises what the
        first connect would have raised without hedging when the upstream that serves never
        answered (the reader's failover takes it from there; a ``Handoff`` made before waits
        in :attr:`Route.undelivered` for it)."""
        channel, route = self.channel, self.route
        if on_asyncio():  # trio cannot start a task from a timer: it races in a task group
            return await self._run_on_timer(asyncio.get_running_loop())
        target = route.peek(time.monotonic())
        if target is None:
            return await channel.connect(), [], None
        spec = self._hedge_request(target)
        if spec is None:
            return await channel.connect(), [], None
        first = self._first_racer()
        self._racers = [first]
        hedge: _Racer | None = None
        serving: _Racer | None = None
        loser: _Racer | None = None
        send, receive = anyio.create_memory_object_stream[_Racer](2)
        try:
            with send, receive:
                async with anyio.create_task_group() as group:
                    self._group = group.cancel_scope
                    group.start_soon(self._race, first, channel.connect, send)
                    with anyio.move_on_after(self.after):
                        serving = await receive.receive()  # settled in time: no hedge
                    if serving is None and not self.cancelled:
                        hedge = _Racer(target, self._probe(target))
                        self._racers.append(hedge)
                        self._log_hedging(target)
                        group.start_soon(self._race, hedge, self._hedge_connect(hedge, spec),
                                         send)
                        serving, loser = await self._decide(receive, first, hedge)
                    group.cancel_scope.cancel()  # the loser, still connecting or reading
            await self._close_loser(loser)
        except BaseException:
            await self._close_all_shielded()
            raise
        finally:
            self._group = None
        if self.cancelled or serving is None:  # stream.cancel() or aclose() during the race
            await self._close_all_shielded()
            raise AttemptCancelled
        return self._served(serving, hedge, spec)

    # ------------------------------------------------------------------ on a timer

    def _hedge_request(self, target: Target) -> RequestSpec | None:
        """The hedge's request, or ``None`` when ``target``'s API cannot be asked it (no
        hedge then: the first upstream goes on alone)."""
        try:
            return target.request(self.route.body_for(target))
        except FluxstreamError as exc:
            logger.info("no hedge on %s: %s", target.label, reason_of(exc))
            return None

    async def _run_on_timer(
        self, loop: asyncio.AbstractEventLoop
    ) -> tuple[Attempt, list[Event], RaceReads | None]:
        """:meth:`run` on asyncio: the first upstream is read here, in the stream's task
        (:meth:`_run_first`); which upstream the hedge asks, its request and its task are
        decided and made only when the timer fires (:meth:`_fire`)."""
        first = self._first_racer()
        self._racers = [first]
        timer = loop.call_at(loop.time() + self.after, self._fire)
        try:
            try:
                await self._run_first(first)
            finally:
                timer.cancel()
            task = self._hedge_task
            if task is None:  # the usual case: the timer never fired (or could not hedge)
                if self.cancelled:
                    raise AttemptCancelled
                return self._served(first, None, None)
            serving, loser = await self._decide_after_timer(first, task)
            await self._close_loser(loser)
        except BaseException:
            await self._close_all_shielded()
            raise
        if self.cancelled:
            await self._close_all_shielded()
            raise AttemptCancelled
        hedge = self._racers[1]
        return self._served(serving, hedge, hedge.spec)

    async def _run_first(self, first: _Racer) -> None:
        """The first racer, run in the stream's task so that a winning hedge or :meth:`cancel`
        can interrupt it (:meth:`_stop_first`): by cancelling the task, taken back here as
        ``asyncio.timeout`` takes back its own cancellation (the task's count of cancel
        requests says whether another came too: then it goes on up). A timeout or an anyio
        scope would do the same, at four to six times the cost, and every request with
        ``hedge_after`` pays it. An anyio scope before Python 3.11 (no such count there)."""
        connect = self.channel.connect
        if sys.version_info < (3, 11):  # pragma: no cover - Task.uncancel is 3.11+
            try:
                with anyio.CancelScope() as self._group:
                    await self._run_racer(first, connect)
            finally:
                self._group = None
            return
        task = self._first_task = asyncio.current_task()
        assert task is not None
        cancelling = task.cancelling()
        try:
            await self._run_racer(first, connect)
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
        if self.cancelled or self._settled:
            return
        target = self.route.peek(time.monotonic())
        if target is None:
            return
        spec = self._hedge_request(target)
        if spec is None:
            return
        hedge = _Racer(target, self._probe(target))
        hedge.spec = spec
        self._racers.append(hedge)
        self._log_hedging(target)
        self._hedge_task = asyncio.get_running_loop().create_task(self._hedge_runs(hedge))

    async def _hedge_runs(self, hedge: _Racer) -> None:
        """The hedge's task: connect and read until content. Settled before the first
        racer: a win interrupts the first racer's read (its scope), a failure is recorded
        and closed here while the first upstream goes on alone."""
        assert hedge.spec is not None
        await self._run_racer(hedge, self._hedge_connect(hedge, hedge.spec))
        if self._settled[0] is not hedge or self.cancelled:
            return  # the first settled first: the stream's task decides
        if hedge.won:
            self._stop_first()
            return
        self._failed_hedge(hedge)
        with anyio.CancelScope(shield=True):
            await self._close(hedge)

    async def _decide_after_timer(
        self, first: _Racer, task: asyncio.Task[None]
    ) -> tuple[_Racer, _Racer | None]:
        """The hedge was sent: what :meth:`_decide` decides, by the order the racers
        settled in (the first racer has settled here unless a winning hedge interrupted it)."""
        hedge = self._racers[1]
        if self.cancelled or not self._settled:
            return first, None
        if self._settled[0] is hedge:
            if hedge.won:
                self._abort(first)
                self._moved(f"hedged: no content within {self.after:.3g}s",
                            SegmentEnd.LOST_HEDGE, "")
                return hedge, first
            await asyncio.wait([task])  # failed: recorded and closed by its task
            return first, None
        route = self.route
        if first.won:
            self._abort(hedge)
            task.cancel()
            await asyncio.wait([task])
            route.noted(hedge.target, SegmentEnd.LOST_HEDGE, "", 1)
            route.drop(hedge.target)
            return first, hedge
        # the first upstream failed: the hedge is the next upstream, asked already
        route.failed(time.monotonic())
        with anyio.CancelScope(shield=True):
            await self.channel.close(drain=False)
        self._moved(first.reason, segment_end(first.reason, False), first.reason)
        await asyncio.wait([task])
        return hedge, None

    # ------------------------------------------------------------------ the race

    async def _decide(
        self, receive: MemoryObjectReceiveStream[_Racer], first: _Racer, hedge: _Racer
    ) -> tuple[_Racer, _Racer | None]:
        """Both are out: the first with content serves, the other loses (its connection is
        aborted here, closed once its task has ended); a failure leaves the other to serve,
        whatever it answers. The one serving and the loser; a ``Handoff`` when the route
        moves goes to :attr:`Route.undelivered`."""
        settled = await receive.receive()
        route = self.route
        if self.cancelled:
            return settled, None
        if settled.won:
            if settled is hedge:
                self._abort(first)
                self._moved(f"hedged: no content within {self.after:.3g}s",
                            SegmentEnd.LOST_HEDGE, "")
                return hedge, first
            self._abort(hedge)
            route.noted(hedge.target, SegmentEnd.LOST_HEDGE, "", 1)
            route.drop(hedge.target)
            return first, hedge
        if settled is hedge:  # the first upstream goes on alone
            self._failed_hedge(hedge)
            with anyio.CancelScope(shield=True):
                await self._close(hedge)
            return await receive.receive(), None
        # the first upstream failed: the hedge is the next upstream, asked already
        route.failed(time.monotonic())
        with anyio.CancelScope(shield=True):
            await self.channel.close(drain=False)
        self._moved(first.reason, segment_end(first.reason, False), first.reason)
        return await receive.receive(), None

    async def _race(
        self, racer: _Racer, connect: Callable[[], Awaitable[Attempt]],
        send: MemoryObjectSendStream[_Racer],
    ) -> None:
        """:meth:`_run_racer`, then report it settled."""
        await self._run_racer(racer, connect)
        await send.send(racer)

    async def _run_racer(
        self, racer: _Racer, connect: Callable[[], Awaitable[Attempt]]
    ) -> None:
        """Connect, then read until content (or the end, or a failure); settled then (in
        :attr:`_settled`). A connect that failed leaves no attempt: the racer never
        answered."""
        try:
            attempt = await connect()
        except Exception as exc:  # raised to the reader if this racer is left to serve
            racer.attempt = None
            racer.error = exc
        else:
            racer.attempt = attempt
            try:
                if attempt.is_json:  # the whole reply in one body
                    racer.won = True
                else:
                    await self._read_first(racer, attempt)
            except Exception as exc:  # replayed to the reader after the bytes read
                racer.error = exc
        self._settled.append(racer)

    async def _read_first(self, racer: _Racer, attempt: Attempt) -> None:
        """Read ``racer`` until content, into its probe (keeping the bytes) or into the
        stream's own parser (keeping its events); bounded by the stream's ``first_token``
        deadline (else by the HTTP library's read timeout, as any read)."""
        probe = racer.probe
        channel = self.channel
        parser = channel.parser
        if attempt is channel.attempt:  # the first racer's: as the reader reads it
            body = channel.direct_body()
            read = channel.receive if body is None else body.__anext__
        else:
            read = attempt.read
        progress = channel.progress
        size = 0
        for _ in range(_MAX_READS):
            left = progress.first_token_left(time.monotonic())
            data: bytes | None = None
            try:
                if left is None:  # no first-token deadline: no scope either
                    data = await read()
                else:
                    with anyio.move_on_after(left):
                        data = await read()
            except StopAsyncIteration:
                racer.ended = True
                return
            if data is None:
                racer.late = True
                return
            size += len(data)
            if probe is None:
                if racer.forgotten:  # it lost meanwhile (a read that came with the cancel)
                    return
                try:
                    events = parser.feed(data)
                except FluxstreamError as exc:  # the reader acts on it, as on its own read
                    racer.read_in = True
                    racer.parse_error = exc
                    return
                racer.read_in = True
                racer.events += events
                settled = True if parser.saw_content else _decided(parser, events)
                if settled is None and parser.pending_error is not None:
                    return  # as the reader, which acts on it before reading on
            else:
                racer.chunks.append(data)
                try:
                    settled = _probed(probe, data)
                except FluxstreamError:  # the reader's parser meets it again, and decides
                    return
            if settled is not None:
                racer.error_event = not settled
                racer.won = settled
                return
            if size > _MAX_BUFFERED:
                racer.won = True
                return
        racer.won = True

    def _hedge_connect(
        self, racer: _Racer, spec: RequestSpec
    ) -> Callable[[], Awaitable[Attempt]]:
        async def connect() -> Attempt:
            channel = self.channel
            head = channel.progress.head_wait(time.monotonic(), False)
            attempt = racer.attempt = Attempt(spec, head=head)
            limit = channel.parser.max_event_bytes
            if spec.sending is None:
                await attempt.open(max_json_bytes=limit)
            else:  # observers that take part in requests (trace headers) see it too
                own: dict[str, str] = {}
                with spec.sending(own, SendInfo(1, "first")):
                    await attempt.open(headers=own, max_json_bytes=limit)
            return attempt

        return connect

    def _log_hedging(self, target: Target) -> None:
        channel = self.channel
        logger.info(
            "stream %s: no content from %s within %.3gs; hedging on %s",
            show_key(channel.parser.content_key), self._racers[0].target.label,
            self.after, target.label, extra=channel.log_extra(),
        )

    def _first_racer(self) -> _Racer:
        """The racer of the upstream asked first: read into the stream's own parser when it
        has read nothing yet (see :meth:`FirstConnect.first`), else into a probe."""
        target = self.route.current
        return _Racer(target, None if self._into_parser else self._probe(target))

    def _probe(self, target: Target) -> StreamParser:
        """A throwaway parser of ``target``'s API: it tells when content came."""
        parser = self.channel.parser
        return StreamParser(
            content_key=parser.content_key, format=target.api.name,
            max_event_bytes=parser.max_event_bytes, strict=parser.strict,
            require_finish_reason=parser.require_finish_reason, limits=parser.limits,
        )

    # ------------------------------------------------------------------ endings

    def _moved(self, reason: str, kind: SegmentEnd, detail: str) -> None:
        """The route moves to the hedge (before content): the first upstream's segment ends
        (``kind``, ``detail``) with its requests, the hedge has sent one, and the
        ``Handoff`` waits in :attr:`Route.undelivered` to be delivered first."""
        route, channel = self.route, self.channel
        self._forget(self._racers[0])
        hedge = self._racers[1].target
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

    def _forget(self, racer: _Racer) -> None:
        """``racer`` will not serve: what it read into the stream's parser is taken out
        (nothing of an upstream that lost reaches the reply), and it reads no more in."""
        if racer.probe is None and not racer.forgotten:
            racer.forgotten = True
            racer.read_in = False
            racer.events = []
            racer.parse_error = None
            self.channel.parser.forget_reads()

    def _abort(self, racer: _Racer) -> None:
        """``racer`` lost: its connection is aborted now (the server sees it close at once;
        losing is no failure for the circuit breaker)."""
        attempt = racer.attempt
        if racer is self._racers[0]:
            attempt = self.channel.attempt  # maybe still connecting (racer.attempt unset)
        if attempt is not None:
            attempt.cancel()

    async def _close(self, racer: _Racer) -> None:
        if racer is self._racers[0]:
            await self.channel.close(drain=False)
        elif racer.attempt is not None:
            await racer.attempt.close(drain=False)
            racer.attempt = None

    def _failed_hedge(self, racer: _Racer) -> None:
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
                    self._racers[0].target.label, extra=self.channel.log_extra())

    async def _close_loser(self, loser: _Racer | None) -> None:
        """The race's loser closed, whatever cancels the caller (not when the stream was
        cancelled meanwhile: :meth:`_close_all` closes everything then)."""
        if loser is not None and not self.cancelled:
            with anyio.CancelScope(shield=True):
                await self._close(loser)

    async def _close_all_shielded(self) -> None:
        with anyio.CancelScope(shield=True):
            await self._close_all()

    async def _close_all(self) -> None:
        """Both connections closed (a cancel, or the task's cancellation); the hedge, if it
        was sent and is not recorded yet, is recorded as cancelled."""
        task = self._hedge_task
        if task is not None and not task.done():  # the timer path's hedge, still racing
            task.cancel()
            await asyncio.wait([task])
        for racer in self._racers:
            self._abort(racer)
            self._forget(racer)  # nothing of it was delivered
        await self.channel.close(drain=False)
        if len(self._racers) > 1:
            hedge = self._racers[1]
            await self._close(hedge)
            route = self.route
            if hedge.target in route.targets[route.index + 1:]:
                route.noted(hedge.target, SegmentEnd.CANCELLED, "", 1)
                route.drop(hedge.target)

    def _served(
        self, racer: _Racer, hedge: _Racer | None, spec: RequestSpec | None
    ) -> tuple[Attempt, list[Event], RaceReads | None]:
        """:meth:`run`'s answer: ``racer`` serves, the bytes it read put back in front of its
        body for the reader (none when it was read into the stream's parser: what that gave
        is the third value), after the events to deliver first."""
        channel = self.channel
        attempt = racer.attempt
        if racer is hedge:
            assert spec is not None
            channel.parser.switch_format(racer.target.api.name)
            channel.spec = spec
            channel.resuming_by = None
        if attempt is None:  # it never answered: as the connect would have raised
            raise racer.error or AttemptCancelled()
        if racer is hedge:
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


def _decided(parser: StreamParser, events: list[Event]) -> bool | None:
    """What :func:`_probed` decides of a read, for the stream's own parser that has just
    read it (``events``: what it gave): ``True`` when content came (or the reply finished),
    ``False`` for an error event before content, ``None`` when neither. While another
    upstream could take the reply over, the parser's hold keeps an error event and the rest
    of its read out of the reply: content after it in that read is content all the same."""
    if not parser.saw_content:
        hold = parser.hold
        if hold is not None and hold.held:
            return any(type(event) in CONTENT_EVENTS for event in hold.held)
        if any(type(event) is ErrorEvent for event in events):
            return False
        if not parser.finished:
            return None
    return True


def _probed(probe: StreamParser, data: bytes) -> bool | None:
    """``data`` through ``probe`` an event at a time, up to the first content: ``True`` when
    content came (or the reply finished), ``False`` for an error event before content,
    ``None`` when neither (read on). A read often holds the whole reply, and only its start
    decides the race: the reader parses all of it anyway. Cutting at blank lines is only a
    guess at event boundaries (a stream with CR LF line ends is fed in one piece); the parser
    gives the same events at any cut."""
    start, size = 0, len(data)
    while start < size:
        cut = data.find(b"\n\n", start)
        end = size if cut < 0 else cut + 2
        events = probe.feed(data[start:end] if start or end < size else data)
        if not probe.saw_content and any(type(e) is ErrorEvent for e in events):
            if end < size:  # as the reader sees this read: content after it in it wins
                probe.feed(data[end:])
            return probe.saw_content
        if probe.saw_content or probe.finished:
            return True
        start = end
    return None
