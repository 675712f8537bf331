"""The connection side of a stream: the loop over attempts, and reads of the current one.

:class:`~fluxstream._io.reader.StreamReader` turns bytes into events and states outcomes;
:class:`Channel` gets it the bytes. It sends the request (retrying what fails before a response
is usable, as :class:`~fluxstream._core.recovery.Recovery` decides), reads the current
:class:`~fluxstream._io.attempt.Attempt` directly or through a
:class:`~fluxstream._io.readahead.ReadAhead` task, waits out backoffs, and makes ``cancel()``
reach whatever is pending: a send, a wait, or a read. Which request a retry or a resume sends
after a drop is :mod:`fluxstream._io.reconnect`'s (it calls :meth:`Channel.connect`).

``recovery.cancelled`` is the one flag that says the caller cancelled; every wait checks it
before and after, so nothing is sent after a cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio

from .._core.progress import DeadlinePassed, Progress
from .._core.rate_limits import RateLimits
from .._core.recovery import Decision, DropState, Recovery, is_transient_error
from .._events import ErrorEvent, Event
from .._observe import FIRST_SEND, SendInfo
from .._parser import StreamParser
from .._timeouts import Deadline
from ..errors import APIConnectionError, APIStatusError, APITimeoutError, one_line, show_key
from .attempt import DRAIN_SECONDS, Attempt, AttemptCancelled, RequestSpec, finish_body
from .http_library import unresolvable
from .readahead import ReadAhead
from .tasks import on_asyncio

__all__ = ["Channel"]

logger = logging.getLogger("fluxstream")


class Channel:
    """Sends, re-sends and reads the requests of one logical stream."""

    def __init__(
        self,
        spec: RequestSpec,
        parser: StreamParser,
        recovery: Recovery,
        progress: Progress,
    ) -> None:
        self.spec = spec
        #: The stream's clocks: they bound every head wait, and ``first_token`` counts from
        #: the request, so it also bounds every backoff before the first content.
        self.progress = progress
        self.parser = parser
        self.recovery = recovery
        #: The current request/response (``None`` before the first and after closing).
        self.attempt: Attempt | None = None
        #: The resume strategy of the connection being read (``None`` for the first one):
        #: a reconnect rejected by its check rules out this strategy, not another.
        self.resuming_by: str | None = None
        self._pause_scope: anyio.CancelScope | None = None
        # text(coalesce=...) reads the body in a helper task (see fluxstream._io.readahead).
        self._reader_wanted = False
        self._readahead: ReadAhead | None = None
        #: The attempt closed last (its body may be left for the owner to finish: see close).
        self._closed: Attempt | None = None
        #: Runs a callback in this stream's event loop from any thread (see :meth:`abandon`).
        self._call_soon: Callable[[Callable[[], None]], object] | None = None
        #: What the latest response's headers say (rate limits, retry advice, request id),
        #: read only when asked (see :meth:`log_extra`, ``ReplyStream.rate_limits``).
        self.rate_limits: RateLimits | None = None
        #: The body the current stream answers when it is not ``spec.body`` (a
        #: continuation's): its event ids number that stream, so a ``Last-Event-ID``
        #: reconnect sends it again, and a resume token (whose body is ``spec.body``)
        #: leaves them out.
        self.sent_body: dict[str, Any] | None = None

    # ------------------------------------------------------------------ sending

    async def connect(
        self,
        *,
        headers: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
        fresh_budget: bool = False,
        get: str | None = None,
    ) -> Attempt:
        """Send the request; retry (RetryPolicy) what fails before a response is usable.

        ``fresh_budget``: a resume's reconnect gets the policy's attempts afresh; before any
        content, every request so far was a try of the same request and shares one budget.
        """
        recovery = self.recovery
        if self._call_soon is None:
            self._call_soon = _threadsafe_call_soon()
        tries = 0
        while True:
            if recovery.cancelled:
                raise AttemptCancelled
            if getattr(self.spec.http, "is_closed", False):  # never retried: nothing would be
                raise APIConnectionError("the HTTP client is closed")  # sent (or a new pool)
            progress, saw_content, now = self.progress, self.parser.saw_content, time.monotonic()
            passed = progress.due_before_content(now, saw_content)
            if passed is not None:
                raise DeadlinePassed(passed)
            head = progress.head_wait(now, saw_content)
            recovery.attempts += 1
            tries += 1
            used = tries if fresh_budget else recovery.attempts
            attempt = self.attempt = Attempt(self.spec, head=head)
            sending = self.spec.sending
            try:
                if sending is None:  # the usual case: no observer takes part in requests
                    await attempt.open(
                        headers=headers, body=body, max_json_bytes=self.parser.max_event_bytes,
                        get=get,
                    )
                else:
                    own = dict(headers or {})
                    with sending(own, self._send_info(tries, fresh_budget)):
                        await attempt.open(
                            headers=own, body=body, max_json_bytes=self.parser.max_event_bytes,
                            get=get,
                        )
                self._headers_of(attempt)
                if get is None:  # a re-read (GET) goes on with the stream it re-reads
                    self.sent_body = body
            except (APITimeoutError, APIConnectionError, APIStatusError) as exc:
                self.attempt = None
                # The failed response's headers (none without one): its segment's request id.
                self.rate_limits = self.parser.rate_limits = getattr(exc, "rate_limits", None)
                if progress.due_before_content(time.monotonic(), self.parser.saw_content):
                    raise  # e.g. the head did not come within first_token: no retry
                status = getattr(exc, "status_code", None)
                retryable = (
                    not unresolvable(exc) if status is None
                    else recovery.retry.retryable(status, getattr(exc, "should_retry", None))
                )
                decision = recovery.after_failed_request(
                    tries=used,
                    now=time.monotonic(),
                    retryable=retryable,
                    retry_after=getattr(exc, "retry_after", None),
                )
                if decision.action == "cancel":
                    raise AttemptCancelled from exc
                if decision.action != "retry":
                    raise
                await self.wait_to_retry(used, decision.delay, str(exc))
                continue
            except BaseException:
                self.attempt = None
                raise
            if not attempt.is_json and self._reader_wanted:  # text(coalesce=...) reads ahead
                await self._stop_reader()
                self._start_reader()
            return attempt

    def _send_info(self, tries: int, resume: bool) -> SendInfo:
        """Which request :meth:`connect` is sending (for observers' ``on_send``)."""
        attempts = self.recovery.attempts
        strategy = self.resuming_by if resume else None
        if attempts == 1:
            return FIRST_SEND if strategy is None else SendInfo(attempts, "first", strategy)
        return SendInfo(attempts, "resume" if resume and tries == 1 else "retry", strategy)

    def _headers_of(self, attempt: Attempt) -> None:
        """Keep the headers of the response just come (unread until asked), for the
        stream, its reply and log lines."""
        headers = getattr(attempt.response, "headers", None)
        if headers is not None:
            self.rate_limits = self.parser.rate_limits = RateLimits(headers)

    def log_extra(self) -> dict[str, str | None]:
        """What every log line of this stream carries as ``extra`` (structured loggers index
        them): its content key, and the server's request id (``x-request-id`` of the latest
        response, else the reply's id; ``None`` before either is known)."""
        limits = self.rate_limits
        return {
            "content_key": self.parser.content_key,
            "request_id": (limits and limits.request_id) or self.parser.reply.id,
        }

    # ------------------------------------------------------------------ decisions

    def after_rejected_resume(self, exc: BaseException) -> Decision:
        """A checked reconnect (``Last-Event-ID``, or a ``starting_after`` re-read) did not
        continue the stream: never the strategy that was tried again here, since the same
        request would be answered the same way; the next one, if any applies."""
        recovery = self.recovery
        strategy = self.resuming_by or "last_event_id"
        recovery.rule_out(strategy)
        decision = recovery.resume_decision(self.drop_state(exc))
        logger.warning(
            "stream %s: resume by %s rejected (%s); %s",
            show_key(self.parser.content_key),
            "Last-Event-ID" if strategy == "last_event_id" else strategy, one_line(str(exc)),
            f"resuming by {decision.strategy}" if decision.strategy else "ending truncated",
            extra=self.log_extra(),
        )
        return decision

    def drop_state(self, exc: BaseException | None) -> DropState:
        """What the parser knows now, for :meth:`Recovery.after_drop`."""
        parser = self.parser
        return DropState(
            clean=exc is None,
            done=parser.done,
            complete=parser.complete,
            saw_content=parser.saw_content,
            has_event_id=bool(parser.last_event_id),
            reconnection_time=parser.reconnection_time,
            continuable=parser.continuable(),
            stored_response=(
                self.spec.api.replayable(self.spec.body) and self.spec.build_get is not None
            ),
            response_id=parser.response_id,
            sequence=parser.sequence,
            length_left=self.recovery.budget.left(parser.reply, self.progress.content_events),
        )

    def error_event_decision(self, events: list[Event], now: float) -> Decision | None:
        """A retry for the first error event of ``events`` (before content), if it is one."""
        for event in events:
            if type(event) is ErrorEvent:
                transient = is_transient_error(event.error_type, event.code, event.message)
                return self.recovery.after_error_event(
                    saw_content=False, transient=transient, now=now
                )
        return None

    async def wait_to_retry(self, attempt: int, delay: float, reason: str) -> None:
        """Wait ``delay`` before the retry that follows ``attempt`` requests; logged as
        ``retry 1/2`` for the first of two retries (``max_attempts`` counts the first request
        too: counting attempts read ``retry 2/3`` there, which looked like one lost)."""
        delay = self.progress.backoff(time.monotonic(), delay, self.parser.saw_content)
        logger.warning(
            "request %s failed before any content (%s); retry %d/%d in %.2fs",
            show_key(self.parser.content_key), one_line(reason), attempt,
            self.recovery.retry.max_attempts - 1, delay, extra=self.log_extra(),
        )
        await self.pause(delay)

    async def pause(self, seconds: float) -> None:
        """Sleep, unless ``cancel()`` comes first (then raise ``AttemptCancelled``)."""
        if self.recovery.cancelled:
            raise AttemptCancelled
        with anyio.CancelScope() as self._pause_scope:
            await anyio.sleep(seconds)
        self._pause_scope = None
        if self.recovery.cancelled:
            raise AttemptCancelled

    # ------------------------------------------------------------------ reading

    async def receive_on_time(self) -> bytes | Deadline:
        """The next read within the deadline that applies now (:meth:`Progress.read_wait`),
        or that deadline if it passed first. No cancel scope on the hot path: only before
        the first content (with ``first_token``), between content with ``stall`` (a silent
        server is a stall too), and after every choice finished (``finish_grace``: some
        servers never send the sentinel nor close)."""
        wait = self.progress.read_wait(time.monotonic(), self.parser.in_event)
        if wait is None or (wait.deadline is Deadline.FINISH_GRACE and self._body_ended()):
            return await self.receive()
        data = await self._receive_within(wait.seconds)
        return wait.deadline if data is None else data

    def _body_ended(self) -> bool:
        """The transport has the end of the body being read (the rest is buffered): a read
        returns at once, so the wait for the sentinel after every choice finished needs no
        deadline (a format without an end marker, Gemini's, ends every reply there)."""
        attempt = self.attempt
        if attempt is None or self._readahead is not None:
            return False
        complete = attempt.controls.body_complete
        return complete is not None and complete()

    async def _receive_within(self, seconds: float) -> bytes | None:
        """The next read, or ``None`` if none came within ``seconds``. On asyncio, under
        asyncio's own timeout: the same deadline as an anyio ``move_on_after`` at about half
        its cost, and every stream whose sentinel comes in a read of its own pays one."""
        if sys.version_info >= (3, 11) and on_asyncio():
            timeout = asyncio.timeout(seconds)
            try:
                async with timeout:
                    return await self.receive()
            except TimeoutError:
                if not timeout.expired():  # not ours: the read's own
                    raise
                return None
        with anyio.move_on_after(seconds):
            return await self.receive()
        return None

    async def receive(self) -> bytes:
        """The next read: straight from the response, or through the read-ahead task."""
        if self._readahead is not None:
            return await self._readahead.receive()
        if self.attempt is None:  # closed under us
            raise StopAsyncIteration
        return await self.attempt.read()

    def direct_body(self) -> AsyncIterator[bytes] | None:
        """The body :meth:`receive` would read, when it reads it directly: no read-ahead
        task, and a read needs no cancel scope (:attr:`Attempt.scoped_reads`); ``None``
        otherwise (and when nothing is open to read)."""
        attempt = self.attempt
        if attempt is None or attempt.scoped_reads or self._readahead is not None:
            return None
        return attempt.body

    @property
    def reads_ahead(self) -> bool:
        """:meth:`start_read_ahead` was called."""
        return self._reader_wanted

    def start_read_ahead(self) -> None:
        """From now on, read the body in a helper task (``text(coalesce=...)``)."""
        self._reader_wanted = True
        self._start_reader()

    async def wait_for_bytes(self, seconds: float) -> bool:
        """Whether a read is ready within ``seconds`` (it is kept for the next read)."""
        if self._readahead is None:
            return True
        return await self._readahead.ready_within(seconds)

    def _start_reader(self) -> None:
        attempt = self.attempt
        if not self._reader_wanted or self._readahead is not None or attempt is None:
            return
        if attempt.body is not None:
            self._readahead = ReadAhead(attempt.body)

    async def _stop_reader(self, *, linger: float = 0.0) -> None:
        readahead = self._readahead
        if readahead is not None:
            self._readahead = None
            await readahead.close(linger=linger)

    # ------------------------------------------------------------------ ending

    def cancel(self) -> None:
        """Interrupt whatever is pending (a send, a wait, a read), from any task."""
        self.recovery.cancelled = True
        if self._pause_scope is not None:
            self._pause_scope.cancel()
        if self.attempt is not None:
            self.attempt.cancel()
        if self._readahead is not None:
            self._readahead.cancel_task()

    def abandon(self) -> bool:
        """Close what is open, from a finalizer: synchronously, in the stream's own event loop
        (the garbage collector may run in any thread). Whether anything was open."""
        attempt, readahead = self.attempt, self._readahead
        call_soon = self._call_soon
        if (attempt is None or attempt.response is None) and readahead is None:
            return False
        self.attempt = None
        self._readahead = None
        self.recovery.cancelled = True

        def close_now() -> None:
            if readahead is not None:
                readahead.abandon()
            if attempt is not None:
                attempt.abandon()

        if call_soon is not None:
            with contextlib.suppress(Exception):  # the loop has ended, and its sockets
                call_soon(close_now)
        return True

    @property
    def closed(self) -> bool:
        """Nothing is left to close: no response, no read-ahead task, no body left behind."""
        closed = self._closed
        return (
            self.attempt is None and self._readahead is None
            and (closed is None or closed.unfinished is None)
        )

    def close_now(self, *, drain: bool = True) -> bool:
        """:meth:`close`, synchronously, when it has nothing to wait for: no read-ahead task,
        no body left to finish, and a response that closes at once
        (:meth:`Attempt.close_now`). Whether it closed; if not, nothing changed and
        :meth:`close` is the way. Every stream's end comes here."""
        if self._readahead is not None:
            return False
        closed = self._closed
        if closed is not None and closed.unfinished is not None:
            return False
        attempt = self.attempt
        if attempt is None:
            return True
        if not attempt.close_now(drain=drain and self.parser.done and not self.recovery.cancelled):
            return False
        self.attempt = None
        self._closed = attempt
        return True

    async def close(self, *, drain: bool = True) -> None:
        """Close the current response (idempotent). ``drain``: after the sentinel, read the
        body's end first so the connection can go back to the pool."""
        if self.close_now(drain=drain):
            return
        # Drain only after the sentinel: the body's end is usually right behind it, and
        # reading it lets the connection go back to the pool instead of being torn down.
        drain = drain and self.parser.done and not self.recovery.cancelled
        reader_was_running = self._readahead is not None
        await self._stop_reader(linger=DRAIN_SECONDS if drain else 0.0)
        await self._finish_left_body()
        attempt = self.attempt
        if attempt is None:
            return
        self.attempt = None
        self._closed = attempt
        await attempt.close(drain=drain and not reader_was_running)

    async def _finish_left_body(self) -> None:
        """Closed from another task (``aclose()``) during the owner's read, the body's
        generators could not be finished there; if the read then returned bytes they are
        still suspended. The owner always closes after (at the end of the events, or leaving
        ``async with``), its read returned by then: it finishes them, in the task that
        iterated them."""
        closed = self._closed
        body = None if closed is None else closed.unfinished
        if closed is None or body is None:
            return
        closed.unfinished = None
        with anyio.CancelScope(shield=True):
            if not await finish_body(body):  # another task still reads it: its close will
                closed.unfinished = body


def _threadsafe_call_soon() -> Callable[[Callable[[], None]], object]:
    """The running event loop's thread-safe "call soon" (asyncio's or trio's)."""
    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:  # not asyncio: trio
        pass
    import trio

    return trio.lowlevel.current_trio_token().run_sync_soon
