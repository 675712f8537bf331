"""The engine of a :class:`~fluxstream.stream.ReplyStream`: reads, timeouts, outcomes, recovery.

:class:`StreamReader` turns the bytes of a :class:`~fluxstream._io.channel.Channel` into events
through the parser, enforces the clocks of :class:`~fluxstream._core.progress.Progress`, acts on
:class:`~fluxstream._core.recovery.Recovery`'s decisions, and states an outcome on every path:

* cancellation always propagates: an exception that interrupts a read (``CancelledError``,
  trio's ``Cancelled``, a caller's timeout) closes the response in a shielded scope, marks the
  reply ``cancelled`` and is re-raised unchanged;
* every other end states an outcome too and keeps the partial reply (``failed`` with a typed
  error, ``truncated``, ``finished``, ``done``).

The stream itself (:mod:`fluxstream.stream`) is the public face: iteration, ``text()``,
``complete()``, the context manager and ``cancel()``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import anyio

from .._core.progress import DeadlinePassed, Progress
from .._core.recovery import Decision, Recovery, is_transient_error
from ..errors import (
    APIStatusError,
    APITimeoutError,
    FirstTokenTimeoutError,
    FluxstreamError,
    IdleTimeoutError,
    ResumeMismatchError,
    StallTimeoutError,
    StreamError,
    StreamFailedError,
    one_line,
)
from ..events import Event
from ..parser import StreamParser
from ..retry import ResumePolicy, RetryPolicy
from ..timeouts import Deadline
from .attempt import Attempt, AttemptCancelled, RequestSpec
from .channel import Channel
from .failover import FAILOVER_ERRORS, Route, continue_here, hand_off, reason_of, start_on
from .hedge import Hedge
from .http_library import seconds
from .reconnect import TOKEN_REASON, reconnect

__all__ = ["StreamReader"]

logger = logging.getLogger("fluxstream")

#: The error a stream deadline ends the stream with, and its message (``{}``: the limit).
#: ``FINISH_GRACE`` is not here: it ends the stream ``finished``, as does ``STALL`` once every
#: choice has finished.
_TIMEOUT_ERRORS: dict[Deadline, tuple[type[StreamError], str]] = {
    Deadline.FIRST_TOKEN: (FirstTokenTimeoutError, "no content within {} of the request"),
    Deadline.STALL: (StallTimeoutError, "no content for {}"),
    Deadline.IDLE: (IdleTimeoutError, "no bytes for {}"),
}


class StreamReader:
    """Reads one logical stream (every attempt of it) into events; see the module docstring."""

    def __init__(
        self,
        spec: RequestSpec,
        parser: StreamParser,
        *,
        retry: RetryPolicy,
        resume: ResumePolicy,
        resuming: bool,
        route: Route | None = None,
    ) -> None:
        self._spec = spec
        #: The upstreams to move to when this one fails (``None``: no fallbacks).
        self.route = route
        if route is not None:  # each upstream's own attempts, then the next upstream
            retry = dataclasses.replace(retry, max_attempts=route.per_upstream_attempts)
        self._errors = spec.errors
        self._parser = parser
        #: "Every choice finished", as Progress asks it (one callable, not one per read).
        self._complete: Callable[[], bool] = lambda: parser.complete
        self.recovery = Recovery(retry, resume)
        self.progress = Progress(spec.timeouts)
        self.channel = Channel(spec, parser, self.recovery, self.progress)
        # An error event is the parser's to hold back while an upstream is left to move to.
        parser.hold_errors = route is not None
        #: The race of the first content while a hedge is out (see _connect_first).
        self._hedge: Hedge | None = None
        self.ended = False
        self.cancel_requested = False
        #: A stream restored from a resume token starts with a resume, not a fresh request
        #: (``False`` once it has).
        self.resuming = resuming
        #: The exception that ended the stream badly (transport error, timeout), if any.
        self.cause: BaseException | None = None
        #: The class name of the typed error a failed stream raised (``APIStatusError``,
        #: ``StallTimeoutError``...), for observers (``error.type`` in traces).
        self.error: str | None = None

    @property
    def opened(self) -> bool:
        """A response is open (or being opened)."""
        return self.channel.attempt is not None

    def cancel(self) -> None:
        """See :meth:`ReplyStream.cancel`."""
        if self.ended or self.cancel_requested:
            return
        self.cancel_requested = True
        self.channel.cancel()
        if self._hedge is not None:
            self._hedge.cancel()

    def abandon(self) -> bool:
        """The stream was collected: it ends ``cancelled`` (unless it had ended), and whatever
        it left open is closed (see :meth:`Channel.abandon`); whether anything was."""
        if not self.ended:
            self.cancel_requested = True
            self.end(self._parser.cancel("abandoned: collected without being closed"))
        if self.channel.closed:
            return False
        self.cancel_requested = True
        return self.channel.abandon()

    async def close(self) -> None:
        """See :meth:`ReplyStream.aclose`."""
        if not self.ended:
            self.cancel_requested = True  # a read this interrupts is no drop to resume
            # From another task, a send, a wait or a read may be pending: interrupt it, or
            # the response it gets later is never closed (the connection leaks from the pool).
            self.channel.cancel()
            if self._hedge is not None:
                self._hedge.cancel()
            self.end(self._parser.cancel("closed by the caller"))
        if self.channel.closed:  # the usual case: the events ran out and closed it
            return
        with anyio.CancelScope(shield=True):
            await self.close_response()

    def direct_body(self) -> AsyncIterator[bytes] | None:
        """The body to read straight from when the next read needs nothing but its bytes:
        the stream is open and has not ended, no cancel is asked, no error is held back
        for it, no deadline applies (:attr:`Progress.deadline_free`) and no read-ahead task
        or cancel scope stands between (:meth:`Channel.direct_body`). ``None``: the next
        read is :meth:`read`'s. Its outcome is :meth:`raised`'s or :meth:`took`'s, so the
        caller awaits the transport's read and nothing else (see ``ReplyStream.__anext__``).
        Held equal to :meth:`read` by ``tests/client/test_direct_read_path.py``.
        """
        if (
            self.ended
            or self.cancel_requested
            or self._parser.pending_error is not None
            or not self.progress.deadline_free
        ):
            return None
        return self.channel.direct_body()

    async def read(self) -> list[Event]:
        """One read from the network, through the parser. Never raises StopAsyncIteration."""
        parser = self._parser
        if self.cancel_requested:
            return self.end(parser.cancel("cancelled by stream.cancel()"))
        pending = parser.pending_error
        if pending is not None:  # found by the last read, after the events it delivered
            return await self._fail_with(StreamFailedError, pending, str(pending))
        passed: Deadline | None = None
        try:
            if self.progress.deadline_free:  # the hot path: no deadline, no scope
                data = await self.channel.receive()
            else:
                got = await self.channel.receive_on_time()
                if isinstance(got, Deadline):  # no read in time: the deadline it was for
                    passed, data = got, b""
                else:
                    data = got
        except BaseException as exc:
            return await self.raised(exc)
        if passed is not None:
            return await self._deadline_passed(passed)
        events = self.took(data)
        return events if isinstance(events, list) else await events

    async def raised(self, exc: BaseException) -> list[Event]:
        """A read raised ``exc`` (call it where it was caught): the body ended, a drop, a
        timeout or a failure, acted on; a cancellation or an interrupt closes the response,
        states the outcome and is re-raised unchanged."""
        if isinstance(exc, StopAsyncIteration):
            return await self._bytes_ended(None)
        if isinstance(exc, Exception) and not isinstance(exc, anyio.get_cancelled_exc_class()):
            return await self._read_failed(exc)
        # Cancellation (asyncio's, trio's), KeyboardInterrupt, SystemExit: the caller stops.
        await self._interrupted(exc)
        raise exc

    def took(self, data: bytes) -> list[Event] | Coroutine[Any, Any, list[Event]]:
        """A read's bytes, through the parser and the clocks: the events to deliver, or, when
        the read calls for more than that (an error event, a resume that did not continue,
        a deadline passed, a retry), the coroutine that acts on it, for the caller to await.
        Synchronous in the common case, so the hot path awaits only the transport's read."""
        parser = self._parser
        try:
            events = parser.feed(data)
        except ResumeMismatchError as exc:
            return self._resume_rejected(exc)
        except FluxstreamError as exc:  # an event over max_event_bytes; a strict-mode frame
            return self._fail_with(StreamFailedError, exc, str(exc))
        now = time.monotonic()
        if parser.held_error is not None:
            return self._error_event(events, now)
        if events and not parser.saw_content:
            decision = self.channel.error_event_decision(events, now)
            if decision is not None:
                return self._recover(
                    lambda: self._reconnect(decision, "error event before content")
                )
        overdue = self.progress.read(events, now, self._complete)
        if events and parser.finished:
            self.end([])
        elif overdue is not None:
            return self._deadline_passed(overdue)
        return events

    async def _deadline_passed(
        self, deadline: Deadline, exc: BaseException | None = None
    ) -> list[Event]:
        """``deadline`` passed: recorded for ``stats``, then the stream ends with its typed
        error, or ``finished`` when nothing more was due (the sentinel's grace ran out, or
        every choice finished and only heartbeats are left)."""
        progress = self.progress
        progress.passed(deadline)
        limit = progress.timeouts.limit(deadline)
        if deadline is Deadline.FINISH_GRACE:
            logger.info("no sentinel %.1fs after every choice finished; ending", limit,
                        extra=self.channel.log_extra())
            return await self._bytes_ended(None)
        if deadline is Deadline.STALL and self._parser.complete:
            # every choice finished: heartbeats are all that is left
            logger.info("no content for %.1fs after every choice finished; ending", limit,
                        extra=self.channel.log_extra())
            return await self._bytes_ended(None)
        moved = await self._try_fail_over(f"{deadline.value} timeout")
        if moved is not None:
            return moved
        kind, message = _TIMEOUT_ERRORS[deadline]
        return await self._fail_with(kind, exc, message.format(seconds(limit)))

    async def _read_failed(self, exc: Exception) -> list[Event]:
        """A read raised: an idle timeout, a drop (maybe resumable), or a failure."""
        if self.cancel_requested or self.ended:
            # cancel() aborted the connection, or aclose() closed it from another task: the
            # read's error is the caller's own doing, not the server's.
            return self.end(self._parser.cancel("cancelled by stream.cancel()"))
        if isinstance(exc, self._errors.read_timeout):
            return await self._deadline_passed(Deadline.IDLE, exc)
        if isinstance(exc, self._errors.transport):
            return await self._bytes_ended(exc)
        # e.g. a decoding error: the stream failed, the reply is kept
        return await self._fail_with(StreamFailedError, exc, f"{type(exc).__name__}: {exc}")

    async def _interrupted(self, exc: BaseException) -> None:
        """Cancellation or an interrupt: close now and state the outcome; the caller re-raises
        the exception unchanged."""
        self.cause = exc
        self.end(self._parser.cancel(f"interrupted by {type(exc).__name__}"))
        with anyio.CancelScope(shield=True):
            await self.close_response(drain=False)

    def end(self, events: list[Event]) -> list[Event]:
        if self.route is not None and not self.ended:
            self.route.finish(self._parser, self.recovery.attempts)
        self.ended = True
        progress = self.progress
        progress.end(time.monotonic())
        ledger = self._spec.ledger
        if ledger is not None:  # usage estimate and cost, before any observer sees the end
            model = self._spec.body.get("model")
            parser = self._parser
            parser.settle(*ledger.settle(parser.reply, progress.content_events,
                                         model if isinstance(model, str) else None))
        return events

    async def _fail_with(
        self, kind: type[StreamError], exc: BaseException | None, message: str
    ) -> list[Event]:
        """End ``failed``, close the response, raise ``kind`` carrying the partial reply."""
        self.cause = exc
        self.error = kind.__name__
        self.end(self._parser.fail(message, exc))
        with anyio.CancelScope(shield=True):
            await self.close_response(drain=False)
        raise kind(message, self._parser.reply) from exc

    # ------------------------------------------------------------------ failover

    def _may_fail_over(self, exc: BaseException) -> bool:
        """Whether a failure before content is one the retry policy would retry (a 400 or
        a 401 ends the stream as it would without fallbacks: the request is at fault)."""
        if not isinstance(exc, APIStatusError):
            return True
        api = self.channel.spec.api
        return exc.status_code in self.recovery.retry.retry_status | api.retry_statuses

    async def _try_fail_over(self, reason: str) -> list[Event] | None:
        """Move to the next upstream (see :func:`~fluxstream._io.failover.hand_off`); the
        events to deliver first, or ``None`` when there is none to move to (the caller then
        ends the stream as it would without fallbacks)."""
        route = self.route
        if route is None or route.exhausted or self.cancel_requested or self.ended:
            return None
        try:
            moved = await hand_off(self.channel, route, reason)
        except AttemptCancelled:
            return self.end(self._parser.cancel("cancelled by stream.cancel()"))
        except anyio.get_cancelled_exc_class() as exc:
            await self._interrupted(exc)
            raise
        except FluxstreamError as exc:  # e.g. a request another API cannot be asked
            logger.warning("failover refused: %s", reason_of(exc))
            route.exhausted = True
            return None
        if moved is None:
            self._parser.hold_errors = False  # none left: an error event ends the reply
            return None
        attempt, events = moved
        return events + self._opened(attempt)

    async def _error_event(self, events: list[Event], now: float) -> list[Event]:
        """The parser held back an error event (a stream with an upstream left to move to),
        after ``events``. A busy provider's error (overloaded, a server error, a rate limit:
        :func:`~fluxstream._core.recovery.is_transient_error`) is a failure like a drop:
        before content this upstream is asked again while its own attempts last, then the
        next upstream takes over; after content the next upstream goes on with the reply at
        once (asking the same busy provider to continue would most likely fail the same
        way), and the error is the segment's ``ended``. Any other error (the request was
        refused) ends the stream as it does without fallbacks."""
        parser = self._parser
        error = parser.held_error
        assert error is not None
        self.progress.read(events, now, self._complete)
        if is_transient_error(error.error_type, error.code, error.message):
            if not parser.saw_content:
                decision = self.recovery.after_error_event(
                    saw_content=False, transient=True, now=now
                )
                if decision is not None:
                    parser.drop_error()
                    return events + await self._recover(
                        lambda: self._reconnect(decision, "error event before content")
                    )
            kind = error.error_type or error.code
            reason = one_line(f"error event ({kind}): {error.message}" if kind
                              else f"error event: {error.message}")[:200]
            moved = await self._try_fail_over(reason)
            if moved is not None:
                parser.drop_error()
                return events + moved
        events += parser.release_error()
        if parser.finished:
            self.end([])
        elif self.channel.closed:  # a hand-off closed it, and no upstream answered
            events += self.end(parser.close())
        return events

    # ------------------------------------------------------------------ retries and resume

    async def _recover(self, how: Callable[[], Any]) -> list[Event]:
        """Run a retry or a resume; if it cannot reconnect, the stream ends truncated (or
        cancelled) with the reason as its cause, and the partial reply is kept."""
        try:
            result: list[Event] = await how()
            return result
        except AttemptCancelled:
            return self.end(self._parser.cancel("cancelled by stream.cancel()"))
        except DeadlinePassed as passed:  # a retry before content ran out of time
            return await self._deadline_passed(passed.deadline)
        except FluxstreamError as exc:
            self.cause = exc
            if isinstance(exc, APITimeoutError):  # the reconnect's head never came
                self.progress.passed(exc.deadline)
            moved = await self._try_fail_over(reason_of(exc))
            if moved is not None:
                return moved
            with anyio.CancelScope(shield=True):
                await self.close_response(drain=False)
            return self.end(self._parser.close(cause=exc))
        except anyio.get_cancelled_exc_class() as exc:
            await self._interrupted(exc)
            raise

    async def _bytes_ended(self, exc: BaseException | None) -> list[Event]:
        """The bytes ended (cleanly or by a transport error): end, retry, or resume."""
        parser = self._parser
        if self.cancel_requested or self.ended:
            return self.end(parser.cancel("cancelled by stream.cancel()"))
        if exc is not None:
            self.cause = exc
        decision = self.recovery.after_drop(self.channel.drop_state(exc), time.monotonic())
        if decision.action == "give_up" and not parser.complete:
            moved = await self._try_fail_over(reason_of(exc))
            if moved is not None:
                return moved
        if decision.action in ("end", "give_up", "cancel"):
            return self.end(parser.close(cause=exc))
        reason = f"{type(exc).__name__}: {exc}" if exc is not None else "connection closed"
        return await self._recover(lambda: self._reconnect(decision, reason))

    async def _resume_rejected(self, exc: ResumeMismatchError) -> list[Event]:
        """A ``Last-Event-ID`` reconnect did not continue the stream: never splice it. The
        next strategy takes over; with fallbacks and none left, a continuation is continued
        again on the upstream serving it, then the reply moves to the next one; else the
        stream ends ``truncated`` with this as its reason."""
        self.cause = exc
        continued = self.channel.sent_body is not None  # a continuation's ids, rejected
        decision = self.channel.after_rejected_resume(exc)
        if decision.action != "resume" and self.route is not None:
            # With fallbacks: the continuation first continued again where it is, then the
            # next upstream (as after any drop no own strategy can resume).
            moved = await self._continue_here(f"resume rejected: {exc}") if continued else None
            if moved is None:
                moved = await self._try_fail_over(reason_of(exc))
            if moved is not None:
                return moved
        if decision.action != "resume":
            with anyio.CancelScope(shield=True):
                await self.close_response(drain=False)
            return self.end(self._parser.close(cause=exc))
        return await self._recover(lambda: self._reconnect(decision, f"resume rejected: {exc}"))

    async def _continue_here(self, reason: str) -> list[Event] | None:
        """With fallbacks, the reply's text continued on the upstream serving it
        (:func:`~fluxstream._io.failover.continue_here`); ``None`` when it cannot be."""
        route = self.route
        if route is None or route.exhausted or self.cancel_requested or self.ended:
            return None
        attempt = None

        async def how() -> list[Event]:
            nonlocal attempt
            attempt = await continue_here(self.channel, route, reason)
            return [] if attempt is None else self._opened(attempt)

        events = await self._recover(how)
        return events if attempt is not None or self.ended else None

    async def _reconnect(self, decision: Decision, reason: str) -> list[Event]:
        """Perform a retry or a resume; the events to deliver first (a restart's ``Reset``)."""
        attempt, events = await reconnect(self.channel, decision, reason)
        return events + self._opened(attempt)

    async def open(self) -> list[Event]:
        """Send the request (or resume from a token); the events to deliver first."""
        if self.channel.attempt is not None or self.ended:
            return []
        self.progress.start(time.monotonic())
        self.recovery.start(time.monotonic())
        try:
            if self.resuming:
                self.resuming = False
                decision = self.recovery.resume_decision(self.channel.drop_state(None))
                if decision.action == "resume":
                    return await self._reconnect(decision, TOKEN_REASON)
                # A reply another upstream was continuing: its text continued there.
                moved = await self._continue_here(TOKEN_REASON)
                if moved is None:
                    raise StreamError("nothing to resume this stream by", self._parser.reply)
                return moved
            if self.route is not None:
                start_on(self.channel, self.route, time.monotonic())
            try:
                route = self.route
                first: list[Event] = []
                if route is None or route.hedge_after is None:  # the usual case: no race
                    attempt = await self.channel.connect()
                else:
                    attempt, first = await self._connect_first()
            except FAILOVER_ERRORS as exc:
                moved = await self._try_fail_over(reason_of(exc)) if self._may_fail_over(
                    exc) else None
                if moved is None:
                    last = self.route.last_error if self.route is not None else None
                    if last is not None and last is not exc:
                        raise last from exc  # every upstream failed: the last one's error
                    raise
                return moved
            return first + self._opened(attempt)
        except AttemptCancelled:  # cancelled before any response: nothing to deliver
            self.end(self._parser.cancel("cancelled by stream.cancel()"))
            return []
        except DeadlinePassed as passed:  # no response in time, across the retries
            return await self._deadline_passed(passed.deadline)
        except anyio.get_cancelled_exc_class() as exc:
            await self._interrupted(exc)
            raise
        except BaseException as exc:
            if isinstance(exc, APITimeoutError):
                self.progress.passed(exc.deadline)
            if not self.ended:
                cause = exc
                if isinstance(exc, StreamFailedError) and isinstance(
                    exc.__cause__, self._errors.decoding
                ):
                    # A body that cannot be decoded, known from its head: the stream's cause
                    # is the library's DecodingError, as when it is found in the body.
                    cause = exc.__cause__
                self.cause = cause
                self.error = type(exc).__name__
                self.end(self._parser.fail(f"{type(exc).__name__}: {exc}", cause))
            raise

    async def _connect_first(self) -> tuple[Attempt, list[Event]]:
        """The first request; with ``hedge_after``, raced against the next upstream's until
        one delivers content (:mod:`fluxstream._io.hedge`). The events to deliver first."""
        route = self.route
        if route is None or route.hedge_after is None:
            return await self.channel.connect(), []
        self._hedge = Hedge(self.channel, route, route.hedge_after)
        try:
            return await self._hedge.run()
        finally:
            self._hedge = None

    def _opened(self, attempt: Attempt) -> list[Event]:
        """A response is usable: the stall clock starts now; a JSON body is the whole reply
        (its events are returned, and the stream has ended)."""
        now = time.monotonic()
        self.progress.connected(now)
        if not attempt.is_json:
            return []
        parser = self._parser
        events = parser.feed_completion(attempt.payload)
        events += parser.close()
        # Its content came with the body, now: counted like any read's before the end, so
        # the stats at the end (an observer's) have the first token.
        self.progress.read(events, now, self._complete)
        self.end([])
        return events

    async def close_response(self, *, drain: bool = True) -> None:
        await self.channel.close(drain=drain)


