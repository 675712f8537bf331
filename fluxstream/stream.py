"""``ReplyStream``: one logical streaming request, as an async iterator of normalized events.

The stream does I/O only and delegates each concern to a module of its own:

* :class:`~fluxstream.parser.StreamParser` (sans-IO) decides every event and the outcome; the
  stream tells it just what bytes cannot say: "the bytes ended", "the caller cancelled",
  "the transport failed", "a new connection starts";
* :class:`~fluxstream.channel.Channel` is the loop over attempts and the reads of the current
  one; :class:`~fluxstream.attempt.Attempt` is one request/response (send, check, read, close);
* :class:`~fluxstream.recovery.Recovery` (sans-IO) decides retry / resume / give up;
* :class:`~fluxstream.progress.Progress` (sans-IO) keeps the clocks and says what is overdue;
* :mod:`fluxstream.coalesce` and :mod:`fluxstream._readahead` pace ``text(coalesce=...)``.

What stays here is iteration, stating the outcome on every path, and acting on decisions.
Cancellation always propagates: an exception that interrupts a read (``CancelledError``,
trio's ``Cancelled``, a caller's timeout) closes the response in a shielded scope, marks the
reply ``cancelled`` and is re-raised unchanged; every other end states an outcome too and keeps
the partial reply. Why there is no cancel scope per read: see ``docs/architecture.md``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio

from .attempt import Attempt, AttemptCancelled, RequestSpec
from .channel import TOKEN_REASON, Channel
from .coalesce import Coalesced, FuncSource, Picked
from .errors import (
    FirstTokenTimeoutError,
    FluxstreamError,
    IdleTimeoutError,
    ResumeMismatchError,
    StallTimeoutError,
    StreamError,
    StreamFailedError,
    StreamTruncatedError,
)
from .events import Event, Outcome, TextDelta
from .parser import StreamParser
from .progress import Overdue, Progress, StreamStats
from .recovery import Decision, Recovery
from .retry import ResumePolicy, RetryPolicy

if TYPE_CHECKING:  # pragma: no cover
    from .reply import Reply

__all__ = ["RESUME_TOKEN_VERSION", "ReplyStream", "RequestSpec", "StreamStats"]

logger = logging.getLogger("fluxstream")

RESUME_TOKEN_VERSION = 1


class ReplyStream:
    """A streaming chat request. Use it as ``async with`` and ``async for``::

        async with client.chat.stream(model=..., messages=...) as stream:
            async for event in stream:
                ...
        print(stream.reply.outcome)

    Leaving the ``async with`` early (``break``, an exception), :meth:`aclose`, :meth:`cancel`
    from another task, cancelling the task, or a timeout around the loop closes the HTTP
    response at once and states the outcome ``cancelled``. Without ``async with``, the request
    is sent by the first ``anext`` and the response is closed when the events run out or by
    :meth:`aclose`.
    """

    def __init__(
        self,
        spec: RequestSpec,
        parser: StreamParser,
        *,
        retry: RetryPolicy,
        resume: ResumePolicy,
        stall_timeout: float | None,
        finish_grace: float | None = None,
        resuming: bool = False,
        first_token_timeout: float | None = None,
    ) -> None:
        self._spec = spec
        self._errors = spec.errors
        self._parser = parser
        self._recovery = Recovery(retry, resume)
        # The response head must come within the read timeout (and the first token's).
        limits = [t for t in (spec.read_timeout, first_token_timeout) if t is not None]
        self._channel = Channel(
            spec, parser, self._recovery, head_timeout=min(limits) if limits else None
        )
        self._progress = Progress(
            stall_timeout=stall_timeout,
            finish_grace=finish_grace,
            first_token_timeout=first_token_timeout,
        )
        self._batch: list[Event] = []
        self._pos = 0
        self._ended = False
        self._cancel_requested = False
        # A stream restored from a resume token starts with a resume, not a fresh request.
        self._resuming = resuming
        #: The exception that ended the stream badly (transport error, timeout), if any.
        self.cause: BaseException | None = None

    def __repr__(self) -> str:
        state = "ended" if self._ended else ("open" if self._channel.attempt is not None else "new")
        return f"<ReplyStream {state} key={self._parser.content_key!r}>"

    # ------------------------------------------------------------------ public state

    @property
    def reply(self) -> Reply:
        """The reply so far; final once the stream has ended."""
        return self._parser.reply

    @property
    def content_key(self) -> str:
        return self._parser.content_key

    @property
    def outcome(self) -> Outcome | None:
        return self._parser.reply.outcome

    @property
    def stats(self) -> StreamStats:
        recovery = self._recovery
        return self._progress.stats(
            self._parser.reply, recovery.attempts, recovery.resumes, time.monotonic()
        )

    def resume_token(self) -> dict[str, Any]:
        """A small JSON-serialisable value from which ``client.chat.resume(token)`` continues
        this logical stream in another process: key, request, last event id, partial reply.

        The request's headers are not included (they may hold secrets); the resuming client
        adds its own key.
        """
        return self._channel.resume_token(RESUME_TOKEN_VERSION)

    # ------------------------------------------------------------------ context manager

    async def __aenter__(self) -> ReplyStream:
        await self._open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop reading and close the response. The outcome becomes ``cancelled`` unless the
        stream had already ended. Safe to call any number of times, from any task."""
        if not self._ended:
            self._cancel_requested = True  # a read this interrupts is no drop to resume
            # From another task, a send, a wait or a read may be pending: interrupt it, or
            # the response it gets later is never closed (the connection leaks from the pool).
            self._channel.cancel()
            self._end(self._parser.cancel("closed by the caller"))
        with anyio.CancelScope(shield=True):
            await self._close_response()

    def cancel(self) -> None:
        """Cancel from anywhere (another task, a callback): synchronous and idempotent.

        The connection is aborted at once, so a read waiting for bytes ends immediately, as does
        a request waiting for its response or a retry waiting out its backoff; the iterating
        task then sees the stream end with outcome ``cancelled``. Nothing is sent after it.
        """
        if self._ended or self._cancel_requested:
            return
        self._cancel_requested = True
        self._channel.cancel()

    # ------------------------------------------------------------------ iteration

    def __aiter__(self) -> ReplyStream:
        return self

    async def __anext__(self) -> Event:
        batch = self._batch
        pos = self._pos
        if pos < len(batch):
            self._pos = pos + 1
            return batch[pos]
        return await self._next_batch()

    async def _next_batch(self) -> Event:
        if self._channel.attempt is None and not self._ended:
            await self._open()
        while True:
            if self._pos < len(self._batch):
                self._pos += 1
                return self._batch[self._pos - 1]
            if self._ended:
                await self._close_response()
                raise StopAsyncIteration
            events = await self._read()
            if events:
                self._batch = events
                self._pos = 1
                return events[0]

    async def _read(self) -> list[Event]:
        """One read from the network, through the parser. Never raises StopAsyncIteration."""
        parser = self._parser
        if self._cancel_requested:
            return self._end(parser.cancel("cancelled by stream.cancel()"))
        try:
            if self._progress.deadline_free:  # the hot path: no deadline, no scope
                data: bytes | None = await self._channel.receive()
            else:
                data = await self._channel.receive_on_time(self._progress)
        except StopAsyncIteration:
            return await self._bytes_ended(None)
        except anyio.get_cancelled_exc_class() as exc:
            await self._interrupted(exc)
            raise
        except Exception as exc:
            return await self._read_failed(exc)
        except BaseException as exc:  # KeyboardInterrupt, SystemExit: the caller stops all
            await self._interrupted(exc)
            raise
        if data is None:
            return await self._timed_out("first_token")
        try:
            events = parser.feed(data)
        except ResumeMismatchError as exc:
            return await self._resume_rejected(exc)
        except FluxstreamError as exc:  # an event over max_event_bytes; a strict-mode frame
            return await self._fail_with(StreamFailedError, exc, str(exc))
        now = time.monotonic()
        if events and not parser.saw_content:
            decision = self._channel.error_event_decision(events, now)
            if decision is not None:
                return await self._recover(
                    lambda: self._reconnect(decision, "error event before content")
                )
        overdue = self._progress.read(events, now, lambda: parser.complete)
        if events and parser.finished:
            self._end([])
        elif overdue is not None:
            return await self._timed_out(overdue)
        return events

    async def _timed_out(self, overdue: Overdue) -> list[Event]:
        """No content in time: the typed error, or ``finished`` when nothing more was due."""
        progress = self._progress
        if overdue == "first_token":
            message = f"no content within {progress.first_token_timeout}s of the request"
            return await self._fail_with(FirstTokenTimeoutError, None, message)
        if self._parser.complete:  # every choice finished: heartbeats are all that is left
            logger.info("no content for %.1fs after every choice finished; ending",
                        progress.stall_timeout)
            return await self._bytes_ended(None)
        message = f"no content for {progress.stall_timeout}s"
        return await self._fail_with(StallTimeoutError, None, message)

    async def _read_failed(self, exc: Exception) -> list[Event]:
        """A read raised: an idle timeout, a drop (maybe resumable), or a failure."""
        if self._cancel_requested or self._ended:
            # cancel() aborted the connection, or aclose() closed it from another task: the
            # read's error is the caller's own doing, not the server's.
            return self._end(self._parser.cancel("cancelled by stream.cancel()"))
        if isinstance(exc, self._errors.read_timeout):
            message = f"no bytes for {self._spec.read_timeout}s"
            return await self._fail_with(IdleTimeoutError, exc, message)
        if isinstance(exc, self._errors.transport):
            return await self._bytes_ended(exc)
        # e.g. a decoding error: the stream failed, the reply is kept
        return await self._fail_with(StreamFailedError, exc, f"{type(exc).__name__}: {exc}")

    async def _interrupted(self, exc: BaseException) -> None:
        """Cancellation or an interrupt: close now and state the outcome; the caller re-raises
        the exception unchanged."""
        self.cause = exc
        self._end(self._parser.cancel(f"interrupted by {type(exc).__name__}"))
        with anyio.CancelScope(shield=True):
            await self._close_response(drain=False)

    def _end(self, events: list[Event]) -> list[Event]:
        self._ended = True
        self._progress.end(time.monotonic())
        return events

    async def _fail_with(
        self, kind: type[StreamError], exc: BaseException | None, message: str
    ) -> list[Event]:
        """End ``failed``, close the response, raise ``kind`` carrying the partial reply."""
        self.cause = exc
        self._end(self._parser.fail(message, exc))
        with anyio.CancelScope(shield=True):
            await self._close_response(drain=False)
        raise kind(message, self._parser.reply) from exc

    # ------------------------------------------------------------------ retries and resume

    async def _recover(self, how: Callable[[], Any]) -> list[Event]:
        """Run a retry or a resume; if it cannot reconnect, the stream ends truncated (or
        cancelled) with the reason as its cause, and the partial reply is kept."""
        try:
            result: list[Event] = await how()
            return result
        except AttemptCancelled:
            return self._end(self._parser.cancel("cancelled by stream.cancel()"))
        except FluxstreamError as exc:
            self.cause = exc
            with anyio.CancelScope(shield=True):
                await self._close_response(drain=False)
            return self._end(self._parser.close(cause=exc))
        except anyio.get_cancelled_exc_class() as exc:
            await self._interrupted(exc)
            raise

    async def _bytes_ended(self, exc: BaseException | None) -> list[Event]:
        """The bytes ended (cleanly or by a transport error): end, retry, or resume."""
        parser = self._parser
        if self._cancel_requested or self._ended:
            return self._end(parser.cancel("cancelled by stream.cancel()"))
        if exc is not None:
            self.cause = exc
        decision = self._recovery.after_drop(self._channel.drop_state(exc), time.monotonic())
        if decision.action in ("end", "give_up", "cancel"):
            return self._end(parser.close(cause=exc))
        reason = f"{type(exc).__name__}: {exc}" if exc is not None else "connection closed"
        return await self._recover(lambda: self._reconnect(decision, reason))

    async def _resume_rejected(self, exc: ResumeMismatchError) -> list[Event]:
        """A ``Last-Event-ID`` reconnect did not continue the stream: never splice it. The
        next strategy takes over, or the stream ends ``truncated`` with this as its reason."""
        self.cause = exc
        decision = self._channel.after_rejected_resume(exc)
        if decision.action != "resume":
            with anyio.CancelScope(shield=True):
                await self._close_response(drain=False)
            return self._end(self._parser.close(cause=exc))
        return await self._recover(lambda: self._reconnect(decision, f"resume rejected: {exc}"))

    async def _reconnect(self, decision: Decision, reason: str) -> list[Event]:
        """Perform a retry or a resume; the events to deliver first (a restart's ``Reset``)."""
        attempt, events = await self._channel.reconnect(decision, reason)
        self._opened(attempt)
        return events

    # ------------------------------------------------------------------ text helpers

    def text(self, coalesce: float | None = None) -> AsyncIterator[str]:
        """The reply's text (choice 0) only.

        With ``coalesce`` (seconds, e.g. ``0.016`` for one screen frame), deltas that arrive
        within one interval are joined into one string: the first token is yielded at once,
        after that at most one string per interval, and text is never held longer than one
        interval waiting for more. The network is then read by a helper task of the stream, so
        that a frame's end can interrupt the wait without interrupting the HTTP read; it ends
        with the stream, and nothing keeps running after it.
        """
        if coalesce is None:
            return Picked(self, _choice0_text)
        source = FuncSource(self._next_read_ahead, self._has_ready, self._channel.wait_for_bytes)
        return Coalesced(source, coalesce, _choice0_text, "".join)

    async def _next_read_ahead(self) -> Event:
        if not self._channel.reads_ahead:
            if self._channel.attempt is None and not self._ended:
                await self._open()
            self._channel.start_read_ahead()
        return await self.__anext__()

    def _has_ready(self) -> bool:
        return self._pos < len(self._batch) or self._ended

    # ------------------------------------------------------------------ whole reply

    async def until_done(self) -> Reply:
        """Read to the end and return the reply (whatever its outcome)."""
        async for _ in self:
            pass
        return self._parser.reply

    async def complete(self) -> Reply:
        """Read to the end; raise a typed error carrying the partial reply unless it ended well."""
        reply = await self.until_done()
        if reply.outcome in (Outcome.DONE, Outcome.FINISHED):
            return reply
        if reply.outcome is Outcome.TRUNCATED:
            raise StreamTruncatedError(
                "the stream ended before the sentinel and before every choice finished", reply
            ) from self.cause
        if reply.outcome is Outcome.CANCELLED:
            raise StreamError("the stream was cancelled", reply) from self.cause
        message = reply.error.message if reply.error is not None else "the stream failed"
        raise StreamFailedError(message, reply) from self.cause

    # ------------------------------------------------------------------ opening and closing

    async def _open(self) -> None:
        if self._channel.attempt is not None or self._ended:
            return
        self._progress.start(time.monotonic())
        self._recovery.start(time.monotonic())
        try:
            if self._resuming:
                self._resuming = False
                decision = self._recovery.resume_decision(self._channel.drop_state(None))
                if decision.action != "resume":
                    raise StreamError("nothing to resume this stream by", self._parser.reply)
                self._batch = await self._reconnect(decision, TOKEN_REASON)
                self._pos = 0
            else:
                self._opened(await self._channel.connect())
        except AttemptCancelled:
            self._end(self._parser.cancel("cancelled by stream.cancel()"))
        except anyio.get_cancelled_exc_class() as exc:
            await self._interrupted(exc)
            raise
        except BaseException as exc:
            if not self._ended:
                self.cause = exc
                self._end(self._parser.fail(f"{type(exc).__name__}: {exc}", exc))
            raise

    def _opened(self, attempt: Attempt) -> None:
        """A response is usable: the stall clock starts now; a JSON body is the whole reply."""
        self._progress.connected(time.monotonic())
        if attempt.is_json:
            self._take_whole_body(attempt.payload)

    def _take_whole_body(self, payload: Any) -> None:
        """A non-streaming ``application/json`` reply: the whole reply at once."""
        parser = self._parser
        events = parser.feed_completion(payload)
        events += parser.close()
        self._batch, self._pos = self._batch[self._pos :] + events, 0
        self._end([])
        if parser.saw_content:
            self._progress.first_token = self._progress.finished_at

    async def _close_response(self, *, drain: bool = True) -> None:
        await self._channel.close(drain=drain)


def _choice0_text(event: Event) -> str | None:
    return event.text if type(event) is TextDelta and event.choice == 0 else None
