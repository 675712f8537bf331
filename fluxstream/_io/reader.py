"""The engine of a :class:`~fluxstream._stream.ReplyStream`: reads, timeouts, recovery.

:class:`StreamReader` turns the bytes of a :class:`~fluxstream._io.channel.Channel` into events
through the parser and enforces the clocks of :class:`~fluxstream._core.progress.Progress`.
What goes wrong (a drop, a deadline, an error event, a failed request or reconnect, a rejected
resume; and the open of a resume token) it describes as a
:class:`~fluxstream._core.recovery.Failure` and asks :meth:`~fluxstream._core.recovery.
Recovery.decide` (sans-IO) about; :meth:`StreamReader._act` is the one place the
:class:`~fluxstream._core.recovery.Decision` is carried out: a retry or a resume
(:mod:`~fluxstream._io.reconnect`), a hand-off, a continuation where it is or an end at the
length cap (:mod:`~fluxstream._io.failover`), or the end a stream without fallbacks has.
Cancellation always propagates (the response closed in a shielded scope, the reply
``cancelled``, the exception re-raised unchanged); every other end states an outcome and keeps
the partial reply. The ends themselves, and the caller's ways to stop a stream, are
:class:`~fluxstream._io.stream_end.StreamEnd`'s, which it extends.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import anyio

from .._core.failover import FAILOVER_ERRORS, error_event_reason, reason_of
from .._core.length_budget import LengthBudget
from .._core.progress import DeadlinePassed, Progress
from .._core.recovery import Decision, Failure, FailureKind, Recovery, is_transient_error
from .._events import Event
from .._parser import StreamParser
from .._retry import ResumePolicy, RetryPolicy
from .._timeouts import Deadline
from ..errors import APITimeoutError, FluxstreamError, ResumeMismatchError, StreamFailedError
from .attempt import Attempt, AttemptCancelled, RequestSpec
from .channel import Channel
from .failover import Route, continue_here, hand_off, moves_on, start_on
from .hedge import FirstConnect, RaceReads
from .reconnect import TOKEN_REASON, reconnect
from .stream_end import StreamEnd

__all__ = ["StreamReader"]

logger = logging.getLogger("fluxstream")


class StreamReader(StreamEnd):
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
        if route is not None:  # each upstream's own attempts, then the next upstream
            retry = dataclasses.replace(retry, max_attempts=route.per_upstream_attempts)
        self._errors = spec.errors
        #: "Every choice finished", as Progress asks it (one callable, not one per read).
        self._complete: Callable[[], bool] = lambda: parser.complete
        # The output counted against the length cap, across upstreams (a token's reply too;
        # a new stream's is empty, and a reply snapshot costs as much as the rest of this).
        # The cap is read from the request on first use (a stream that never drops or
        # continues never asks); the body does not change once the stream is made.
        if route is not None:
            budget = LengthBudget(route.length_cap, parser.reply if resuming else None)
        else:
            api, body = spec.api, spec.body
            budget = LengthBudget(None, parser.reply if resuming else None,
                                  cap_of=lambda: api.length_cap(body))
        self.recovery = Recovery(retry, resume, budget=budget)
        self.progress = Progress(spec.timeouts)
        channel = Channel(spec, parser, self.recovery, self.progress)
        if route is not None:  # each segment's content counted, for its usage
            route.attach(channel)
        #: While an upstream is left to move to, a read's error event is held back from the
        #: reply (the route's hold, which the parser runs each read through) until decided.
        self._hold = parser.hold = route.hold if route is not None else None
        # The first connect (and a hand-off's before content), hedged with hedge_after.
        super().__init__(spec, parser, channel, route, FirstConnect(channel, route))
        #: A stream restored from a resume token starts with a resume, not a fresh request
        #: (``False`` once it has).
        self.resuming = resuming

    # ------------------------------------------------------------------ reading

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
            return self.stopped()
        pending = parser.pending_error
        if pending is not None:  # found by the last read, after the events it delivered
            return await self.fail_with(StreamFailedError, pending, str(pending))
        try:
            if self.progress.deadline_free:  # the hot path: no deadline, no scope
                data: bytes | Deadline = await self.channel.receive()
            else:
                data = await self.channel.receive_on_time()
        except BaseException as exc:
            return await self.raised(exc)
        if isinstance(data, Deadline):  # no read in time: the deadline it was for
            return await self._deadline_passed(data)
        events = self.took(data)
        return events if isinstance(events, list) else await events

    async def raised(self, exc: BaseException) -> list[Event]:
        """A read raised ``exc`` (call it where it was caught): the body ended, a drop, a
        timeout or a failure, acted on; a cancellation or an interrupt closes the response,
        states the outcome and is re-raised unchanged."""
        if isinstance(exc, StopAsyncIteration):
            return await self._bytes_ended(None)
        if not isinstance(exc, Exception) or isinstance(exc, anyio.get_cancelled_exc_class()):
            await self.interrupted(exc)  # asyncio's, trio's, KeyboardInterrupt: the caller's
            raise exc
        if self.cancel_requested or self.ended:
            # cancel() aborted the connection, or aclose() closed it from another task (or
            # the client was closed): the read's error is the caller's doing, not the server's.
            return self.stopped()
        if isinstance(exc, self._errors.read_timeout):
            return await self._deadline_passed(Deadline.IDLE, exc)
        if isinstance(exc, self._errors.transport):
            return await self._bytes_ended(exc)
        # e.g. a decoding error: the stream failed, the reply is kept
        return await self.fail_with(StreamFailedError, exc, f"{type(exc).__name__}: {exc}")

    def took(
        self, data: bytes, parsed: list[Event] | None = None
    ) -> list[Event] | Coroutine[Any, Any, list[Event]]:
        """A read's bytes, through the parser and the clocks: the events to deliver, or, when
        the read calls for more than that (an error event, a resume that did not continue,
        a deadline passed, a retry), the coroutine that acts on it, for the caller to await.
        Synchronous in the common case, so the hot path awaits only the transport's read.
        ``parsed``: the events the parser gave for the read already (a hedged race read it
        into the parser), taken on from there (one check per read, where a function of its
        own would be a call per read)."""
        parser = self._parser
        if parsed is None:
            try:
                events = parser.feed(data)
            except FluxstreamError as exc:
                return self._unparsed(exc)
        else:
            events = parsed
        now = time.monotonic()
        hold = self._hold
        if hold is not None and hold.held:
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

    def _unparsed(self, exc: FluxstreamError) -> Coroutine[Any, Any, list[Event]]:
        """What a read that the parser raised ``exc`` for calls for."""
        if isinstance(exc, ResumeMismatchError):
            return self._resume_rejected(exc)
        # an event over max_event_bytes; a strict-mode frame
        return self.fail_with(StreamFailedError, exc, str(exc))

    async def _deadline_passed(
        self, deadline: Deadline, exc: BaseException | None = None
    ) -> list[Event]:
        """``deadline`` passed: recorded for ``stats``, then decided (the next upstream, the
        typed error, or ``finished`` when nothing more was due)."""
        self.progress.passed(deadline)
        return await self._decided(
            "deadline", exc, f"{deadline.value} timeout", "connection closed", deadline=deadline
        )

    # ------------------------------------------------------------------ what went wrong

    async def _bytes_ended(self, exc: BaseException | None) -> list[Event]:
        """The bytes ended (cleanly or by a transport error): decided and acted on."""
        if self.cancel_requested or self.ended:
            return self.stopped()
        if exc is not None:
            self.cause = exc
        elif self._parser.complete and not self.recovery.cancelled:
            # Every choice finished and the bytes ended cleanly: the usual end of a format
            # without an end marker (Gemini's), which Recovery.decide always ends as it is
            # (held to it by tests/sansio/test_recovery.py::
            # test_bytes_ending_cleanly_with_every_choice_finished_always_end_the_stream).
            return self.end(self._parser.close())
        again = f"{type(exc).__name__}: {exc}" if exc is not None else "connection closed"
        return await self._decided("drop", exc, reason_of(exc), again)

    async def _error_event(self, events: list[Event], now: float) -> list[Event]:
        """The parser held back an error event after ``events`` (while an upstream is left
        to move to): decided by whether a busy provider sent it (``transient``)."""
        assert self._hold is not None
        error = self._hold.error
        assert error is not None
        self.progress.read(events, now, self._complete)
        reason = error_event_reason(error.error_type, error.code, error.message)
        transient = is_transient_error(error.error_type, error.code, error.message)
        return events + await self._decided(
            "error_event", None, reason, "error event before content", transient=transient
        )

    async def _resume_rejected(self, exc: ResumeMismatchError) -> list[Event]:
        """A ``Last-Event-ID`` reconnect did not continue the stream: never spliced, its
        strategy ruled out here, then decided (``continued``: it was a continuation's)."""
        self.cause = exc
        continued = self.channel.sent_body is not None  # a continuation's ids, rejected
        self.channel.after_rejected_resume(exc)
        return await self._decided(
            "rejected", exc, reason_of(exc), f"resume rejected: {exc}", continued=continued
        )

    async def _recover(self, how: Callable[[], Awaitable[list[Event]]]) -> list[Event]:
        """Run a retry, a resume or a continuation; if it cannot reconnect, as decided (the
        next upstream, or the end ``truncated`` with the reason as its cause)."""
        try:
            return await how()
        except AttemptCancelled:
            return self.stopped()
        except DeadlinePassed as passed:  # a retry before content ran out of time
            return await self._deadline_passed(passed.deadline)
        except FluxstreamError as exc:
            self.cause = exc
            if isinstance(exc, APITimeoutError):  # the reconnect's head never came
                self.progress.passed(exc.deadline)
            return await self._decided("reconnect_failed", exc, reason_of(exc))
        except anyio.get_cancelled_exc_class() as exc:
            await self.interrupted(exc)
            raise

    # ------------------------------------------------------------------ deciding and acting

    async def _decided(
        self, kind: FailureKind, exc: BaseException | None, reason: str, again: str = "",
        **facts: Any,
    ) -> list[Event]:
        """Describe a failure of ``kind`` (``exc``: what raised, if anything), decide, act:
        ``reason`` is a handoff's, ``again`` a reconnect's."""
        route = self.route
        failure = Failure(
            kind, self.channel.drop_state(exc), **facts,
            fallback=route is not None and not route.exhausted,
            stopped=self.cancel_requested or self.ended,
        )
        decision = self.recovery.decide(failure, time.monotonic())
        return await self._act(decision, failure, exc, reason, again or reason)

    async def _act(
        self, decision: Decision, failure: Failure, exc: BaseException | None, reason: str,
        again: str,
    ) -> list[Event]:
        """The one place a decision is carried out; the events to deliver."""
        parser = self._parser
        action = decision.action
        # An error event's failure: the event is held until the reply goes on without it.
        held = self._hold if failure.kind == "error_event" else None
        if action in ("retry", "resume"):
            if failure.kind == "token":  # a stream that opens by it: its failures are open's
                return await self._reconnect(decision, again)
            if held is not None:
                held.drop()
            return await self._recover(lambda: self._reconnect(decision, again))
        if action == "continue_here":
            moved = await self._continue_here(again)
            if moved is not None:
                return moved
            action = decision.otherwise or "give_up"
        if action == "hand_off":
            moved = await self._hand_off(reason)
            if moved is not None:
                if held is not None:
                    held.drop()
                return moved
        elif action == "end_at_length":
            return await self.at_length(reason, failed=failure.kind != "token")
        elif action == "cancel":
            return self.stopped()
        elif action == "end":
            if failure.deadline is not None:  # the sentinel's grace, or only heartbeats
                logger.info("%s after every choice finished; ending", reason,
                            extra=self.channel.log_extra())
            return self.end(parser.close(cause=exc))
        return await self.give_up(failure, exc)

    async def _hand_off(self, reason: str) -> list[Event] | None:
        """Move to the next upstream (:func:`~fluxstream._io.failover.hand_off`); the events
        to deliver first, or ``None`` when none answered (then the stream gives up)."""
        assert self.route is not None
        try:
            moved = await hand_off(self.channel, self.route, reason, self._connect)
        except AttemptCancelled:
            return self.stopped()
        except anyio.get_cancelled_exc_class() as exc:
            await self.interrupted(exc)
            raise
        return None if moved is None else moved[1] + self._opened(moved[0])

    async def _continue_here(self, reason: str) -> list[Event] | None:
        """The reply's text continued on the upstream serving it
        (:func:`~fluxstream._io.failover.continue_here`); ``None`` when it cannot be."""
        route = self.route
        assert route is not None
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
        if attempt is None:  # the strategy next would continue past the length cap
            return events + await self.at_length(reason, failed=reason != TOKEN_REASON)
        return events + self._opened(attempt)

    # ------------------------------------------------------------------ opening

    async def open(self) -> list[Event]:
        """Send the request (or resume from a token); the events to deliver first."""
        if self.channel.attempt is not None or self.ended:
            return []
        now = time.monotonic()
        self.progress.start(now)
        self.recovery.start(now)
        try:
            if self.resuming:
                self.resuming = False
                return await self._decided("token", None, TOKEN_REASON)
            if self.route is not None:
                start_on(self.channel, self.route, now)
            try:
                attempt, first, read = await self._connect.first()
            except FAILOVER_ERRORS as exc:
                return await self._decided("request_failed", exc, reason_of(exc),
                                           retryable=moves_on(self.channel, exc))
            first += self._opened(attempt)
        except AttemptCancelled:  # cancelled before any response: nothing to deliver
            self.stopped()
            return []
        except DeadlinePassed as passed:  # no response in time, across the retries
            return await self._deadline_passed(passed.deadline)
        except anyio.get_cancelled_exc_class() as exc:
            await self.interrupted(exc)
            raise
        except BaseException as exc:
            self.open_failed(exc)
            raise
        return first if read is None else first + await self._race_read(read)

    async def _race_read(self, read: RaceReads) -> list[Event]:
        """What a hedged race read of the upstream that serves into this stream's parser,
        acted on as this reader acts on its own reads: their events (an error event, a
        deadline or the end they call for decided), then the error the last one raised."""
        events = self.took(b"", read.events)
        if not isinstance(events, list):  # decided: the reader would have read no more
            return await events
        if read.error is None or self.ended:
            return events
        return events + await self._unparsed(read.error)

    def _opened(self, attempt: Attempt) -> list[Event]:
        """A response is usable: the stall clock starts now; a JSON body is the whole reply
        (its events are returned, and the stream has ended)."""
        now = time.monotonic()
        self.responded = True
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
