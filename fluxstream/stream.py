"""``ReplyStream``: one logical streaming request, as an async iterator of normalized events.

The stream does I/O only. Bytes go into one sans-IO :class:`~fluxstream.parser.StreamParser`,
which decides every event and the outcome; the stream tells it just what bytes cannot say:
"the bytes ended", "the caller cancelled", "the transport failed", "a new connection starts".

Cost on the hot path is kept to what the work needs. There is no cancel scope around each read
(one costs about as much as parsing a delta): the idle timeout is the HTTP client's own read
timeout, the stall timeout is checked whenever bytes arrive (a stall is, by definition, bytes
arriving without content), and :meth:`ReplyStream.cancel` aborts the connection under the
response synchronously, which ends a pending read at once. Only where that is impossible
(HTTP/2, whose connection other streams share, or an unknown transport) are reads wrapped in a
cancel scope.

Cancellation always propagates: any exception that interrupts a read (``CancelledError``, trio's
``Cancelled``, a caller's timeout) closes the response inside a shielded scope, marks the reply
``cancelled`` and is re-raised unchanged. Every other way a stream can end states an outcome
too, and keeps the partial reply.

Retries and resume (see :mod:`fluxstream.retry`) happen inside the stream: a consumer sees one
sequence of events whose ``(key, choice, offset)`` never repeats, whatever happened underneath.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio

from ._http import HttpErrors, abort_connection, can_abort, status_error
from ._tasks import spawn
from .errors import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    ContentTypeError,
    FluxstreamError,
    IdleTimeoutError,
    StallTimeoutError,
    StreamError,
    StreamFailedError,
    StreamTruncatedError,
)
from .events import ErrorEvent, Event, Outcome, TextDelta
from .parser import StreamParser
from .retry import ResumePolicy, RetryPolicy

if TYPE_CHECKING:  # pragma: no cover
    from .reply import Reply

__all__ = ["RESUME_TOKEN_VERSION", "ReplyStream", "RequestSpec", "StreamStats"]

logger = logging.getLogger("fluxstream")

_ERROR_BODY_LIMIT = 64 * 1024
_DRAIN_AFTER_END_BYTES = 64 * 1024
_DRAIN_AFTER_END_SECONDS = 0.25
_EOF = object()
RESUME_TOKEN_VERSION = 1
#: Error events worth another try when they come before any content: the provider was busy.
_TRANSIENT_ERROR_WORDS = (
    "overload", "rate_limit", "rate limit", "server_error", "internal", "unavailable",
    "timeout", "timed out", "try again", "capacity", "busy", "429", "500", "502", "503", "504",
)


@dataclass(frozen=True)
class StreamStats:
    """Counters of one stream; times in seconds (``None`` until they happen).

    ``attempts`` counts HTTP requests sent (retries and resumes included); ``resumes`` counts
    drops after content that were continued.
    """

    bytes: int
    events: int
    skipped_frames: int
    heartbeats: int
    time_to_first_token: float | None
    duration: float | None
    attempts: int
    resumes: int


@dataclass
class RequestSpec:
    """Everything needed to send (and send again) the request behind a stream."""

    path: str
    body: dict[str, Any]
    build: Callable[[str, Mapping[str, Any], Mapping[str, str]], Any]
    http: Any
    errors: HttpErrors
    headers: dict[str, str] = field(default_factory=dict)
    #: The read timeout in force, for error messages.
    read_timeout: float | None = None


class _Cancelled(Exception):
    """Internal: ``stream.cancel()`` interrupted a send or a sleep."""


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
    ) -> None:
        self._spec = spec
        self._errors = spec.errors
        self._parser = parser
        self._retry = retry
        self._resume = resume
        self._stall_timeout = stall_timeout
        self._finish_grace = finish_grace
        # Every choice has finished but no sentinel yet: wait at most finish_grace for more.
        self._lingering = False
        self._response: Any = None
        self._bytes: AsyncIterator[bytes] | None = None
        self._batch: list[Event] = []
        self._pos = 0
        self._ended = False
        self._closed = False
        self._cancel_requested = False
        # Cancel scope of the current send, retry sleep or (where aborting is impossible) read.
        self._scope: anyio.CancelScope | None = None
        self._scoped_reads = False
        self._started: float | None = None
        self._first_token: float | None = None
        self._finished_at: float | None = None
        self._last_progress = 0.0
        self._attempts = 0
        self._resumes = 0
        self._restarts = 0
        # A stream restored from a resume token starts with a resume, not a fresh request.
        self._resuming = resuming
        # Reader task (only for text(coalesce=...)): bytes arrive through a memory stream so a
        # frame deadline can interrupt the wait without interrupting the HTTP read.
        self._reader_wanted = False
        self._reader_recv: Any = None
        self._reader_cancel: Callable[[], None] | None = None
        self._stash: Any = None
        #: The exception that ended the stream badly (transport error, timeout), if any.
        self.cause: BaseException | None = None

    def __repr__(self) -> str:
        state = "ended" if self._ended else ("open" if self._response is not None else "new")
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
        reply = self._parser.reply
        start = self._started
        end = self._finished_at if self._finished_at is not None else time.monotonic()
        return StreamStats(
            bytes=reply.bytes,
            events=reply.events,
            skipped_frames=reply.skipped_frames,
            heartbeats=reply.heartbeats,
            time_to_first_token=None
            if start is None or self._first_token is None
            else self._first_token - start,
            duration=None if start is None else end - start,
            attempts=self._attempts,
            resumes=self._resumes,
        )

    def resume_token(self) -> dict[str, Any]:
        """A small JSON-serialisable value from which ``client.chat.resume(token)`` continues
        this logical stream in another process: key, request, last event id, partial reply.

        The request's headers are not included (they may hold secrets); the resuming client
        adds its own key.
        """
        parser = self._parser
        return {
            "version": RESUME_TOKEN_VERSION,
            "key": parser.content_key,
            "path": self._spec.path,
            "body": self._spec.body,
            "last_event_id": parser.last_event_id or None,
            "reconnection_time": parser.reconnection_time,
            "offsets": parser.offsets(),
            "reply": parser.reply.model_dump(mode="json"),
        }

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
        if self._scope is not None:
            self._scope.cancel()
        if self._response is not None and not self._scoped_reads:
            abort_connection(self._response)
        if self._reader_cancel is not None:
            self._reader_cancel()

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
        if self._response is None and not self._ended:
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

    async def _receive(self) -> bytes:
        """The next read: straight from the response, or through the reader task."""
        if self._reader_recv is not None:
            item = self._stash
            if item is None:
                item = await self._reader_recv.receive()
            else:
                self._stash = None
            if item is _EOF:
                raise StopAsyncIteration
            if isinstance(item, BaseException):
                raise item
            return item  # type: ignore[no-any-return]
        assert self._bytes is not None
        if not self._scoped_reads:
            return await self._bytes.__anext__()
        with anyio.CancelScope() as self._scope:
            return await self._bytes.__anext__()
        raise StopAsyncIteration  # cancelled by cancel(): the stream ends as cancelled

    async def _receive_within(self, seconds: float | None) -> bytes:
        """A read after every choice finished: some servers (OCI) never send the sentinel nor
        close the connection; after ``seconds`` without bytes the stream ends ``finished``."""
        with anyio.move_on_after(seconds):
            return await self._receive()
        logger.info("no sentinel %.1fs after every choice finished; ending", seconds)
        raise StopAsyncIteration

    async def _read(self) -> list[Event]:
        """One read from the network, through the parser. Never raises StopAsyncIteration."""
        parser = self._parser
        if self._cancel_requested:
            return self._end(parser.cancel("cancelled by stream.cancel()"))
        try:
            if self._lingering:
                data = await self._receive_within(self._finish_grace)
            else:
                data = await self._receive()
        except StopAsyncIteration:
            return await self._bytes_ended(None)
        except self._errors.read_timeout as exc:
            return await self._fail_with(
                IdleTimeoutError, exc, f"no bytes for {self._spec.read_timeout}s"
            )
        except self._errors.transport as exc:
            return await self._bytes_ended(exc)
        except anyio.get_cancelled_exc_class() as exc:
            await self._interrupted(exc)
            raise
        except Exception as exc:  # e.g. a decoding error: the stream failed, the reply is kept
            return await self._fail_with(StreamFailedError, exc, f"{type(exc).__name__}: {exc}")
        except BaseException as exc:  # KeyboardInterrupt, SystemExit: the caller stops all
            await self._interrupted(exc)
            raise
        try:
            events = parser.feed(data)
        except FluxstreamError as exc:  # an event over max_event_bytes; a strict-mode frame
            return await self._fail_with(StreamFailedError, exc, str(exc))
        now = time.monotonic()
        if events:
            self._last_progress = now
            saw_content = parser.saw_content
            if not saw_content and self._transient_error_before_content(events):
                return await self._recover(self._retry_after_error_event)
            if self._first_token is None and saw_content:
                self._first_token = now
            if parser.finished:
                self._end([])
            elif self._finish_grace is not None:
                self._lingering = parser.complete
        elif self._stall_timeout is not None and now - self._last_progress > self._stall_timeout:
            message = f"no content for {self._stall_timeout}s"
            return await self._fail_with(StallTimeoutError, None, message)
        return events

    async def _interrupted(self, exc: BaseException) -> None:
        """Cancellation or an interrupt: close now and state the outcome; the caller re-raises
        the exception unchanged."""
        self.cause = exc
        self._end(self._parser.cancel(f"interrupted by {type(exc).__name__}"))
        with anyio.CancelScope(shield=True):
            await self._close_response(drain=False)

    def _end(self, events: list[Event]) -> list[Event]:
        self._ended = True
        if self._finished_at is None:
            self._finished_at = time.monotonic()
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

    def _budget_left(self) -> float:
        """Seconds left of the retry policy's total time (from the first request)."""
        start = self._started if self._started is not None else time.monotonic()
        return self._retry.total_timeout - (time.monotonic() - start)

    def _transient_error_before_content(self, events: list[Event]) -> bool:
        if self._attempts >= self._retry.max_attempts or self._budget_left() <= 0:
            return False
        for event in events:
            if type(event) is ErrorEvent:
                text = f"{event.error_type} {event.code} {event.message}".lower()
                return any(word in text for word in _TRANSIENT_ERROR_WORDS)
        return False

    async def _recover(self, how: Callable[[], Any]) -> list[Event]:
        """Run a retry or a resume; if it cannot reconnect, the stream ends truncated (or
        cancelled) with the reason as its cause, and the partial reply is kept."""
        try:
            result: list[Event] = await how()
            return result
        except _Cancelled:
            return self._end(self._parser.cancel("cancelled by stream.cancel()"))
        except FluxstreamError as exc:
            self.cause = exc
            with anyio.CancelScope(shield=True):
                await self._close_response(drain=False)
            return self._end(self._parser.close(cause=exc))
        except anyio.get_cancelled_exc_class() as exc:
            await self._interrupted(exc)
            raise

    async def _retry_after_error_event(self) -> list[Event]:
        """A transient error event before any content: nothing was shown, so ask again."""
        await self._close_response(drain=False)
        # Nothing was shown, so the Reset that announces the new attempt is not passed on.
        self._parser.reset(self._attempts, "error before content")
        await self._sleep_before_retry(self._attempts, None, "error event before content")
        await self._connect()
        return []

    async def _bytes_ended(self, exc: BaseException | None) -> list[Event]:
        """The bytes ended (cleanly or by a transport error): end, retry, or resume."""
        parser = self._parser
        if self._cancel_requested or self._ended:
            return self._end(parser.cancel("cancelled by stream.cancel()"))
        if exc is not None:
            self.cause = exc
        if parser.done or (exc is None and parser.complete):
            # The sentinel came, or the bytes ended cleanly after every choice finished.
            return self._end(parser.close(cause=exc))
        reason = f"{type(exc).__name__}: {exc}" if exc is not None else "connection closed"
        if (
            not parser.saw_content
            and self._attempts < self._retry.max_attempts
            and self._budget_left() > 0
        ):
            return await self._recover(lambda: self._retry_after_early_drop(reason))
        strategy = self._resume_strategy()
        if strategy is None:
            return self._end(parser.close(cause=exc))
        self._resumes += 1
        logger.warning(
            "stream %s dropped (%s); resuming by %s (%d/%d)",
            parser.content_key, reason, strategy, self._resumes, self._resume.max_resumes,
        )
        return await self._recover(lambda: self._resume_by(strategy, reason))

    async def _retry_after_early_drop(self, reason: str) -> list[Event]:
        """Dropped before any content: nothing was shown, so this is a plain retry."""
        await self._close_response(drain=False)
        self._parser.reset(self._attempts, "dropped before content")  # nothing to replace
        await self._sleep_before_retry(self._attempts, None, f"dropped early ({reason})")
        await self._connect()
        return []

    def _resume_strategy(self) -> str | None:
        policy = self._resume
        if self._resumes >= policy.max_resumes or self._cancel_requested:
            return None
        if policy.last_event_id and self._parser.last_event_id:
            return "last_event_id"
        if policy.continuation and self._parser.continuable():
            return "continuation"
        if policy.restart:
            return "restart"
        return None

    async def _resume_by(self, strategy: str, reason: str) -> list[Event]:
        parser = self._parser
        await self._close_response(drain=False)
        events: list[Event] = []
        if strategy == "last_event_id":
            await self._pause(self._resume.reconnect_delay(parser.reconnection_time))
            last_id = parser.last_event_id
            parser.new_connection(resume_after=last_id)
            await self._connect(headers={"Last-Event-ID": last_id}, fresh_budget=True)
        elif strategy == "continuation":
            await self._pause(self._resume.default_delay)
            text = parser.begin_continuation(min_overlap=self._resume.min_overlap)
            messages = list(self._spec.body.get("messages", []))
            messages.append({"role": "assistant", "content": text, **self._resume.prefix_flag})
            await self._connect(body={**self._spec.body, "messages": messages}, fresh_budget=True)
        else:
            await self._pause(self._resume.default_delay)
            self._restarts += 1
            events = parser.reset(self._restarts, f"restart after a drop ({reason})")
            await self._connect(fresh_budget=True)
        return events

    async def _sleep_before_retry(
        self, attempt: int, retry_after: float | None, reason: str
    ) -> None:
        delay = min(self._retry.delay(attempt, retry_after), max(0.0, self._budget_left()))
        logger.warning(
            "request %s failed before any content (%s); retry %d/%d in %.2fs",
            self._parser.content_key, reason, attempt + 1, self._retry.max_attempts, delay,
        )
        await self._pause(delay)

    async def _pause(self, seconds: float) -> None:
        """Sleep, unless ``cancel()`` comes first (then raise ``_Cancelled``)."""
        if self._cancel_requested:
            raise _Cancelled
        with anyio.CancelScope() as self._scope:
            await anyio.sleep(seconds)
        self._scope = None
        if self._cancel_requested:
            raise _Cancelled

    # ------------------------------------------------------------------ text helpers

    async def text(self, coalesce: float | None = None) -> AsyncIterator[str]:
        """The reply's text (choice 0) only.

        With ``coalesce`` (seconds, e.g. ``0.016`` for one screen frame), deltas that arrive
        within one interval are joined into one string: the first token is yielded at once,
        after that at most one string per interval, and text is never held longer than one
        interval waiting for more. The network is then read by a helper task of the stream, so
        that a frame's end can interrupt the wait without interrupting the HTTP read; it ends
        with the stream, and nothing keeps running after it.
        """
        if coalesce is None:
            async for event in self:
                if type(event) is TextDelta and event.choice == 0:
                    yield event.text
            return
        if coalesce <= 0:
            raise ValueError("coalesce must be a positive number of seconds")
        if self._response is None and not self._ended:
            await self._open()
        self._reader_wanted = True
        self._start_reader()
        pending: list[str] = []
        frame_end: float | None = None  # None: nothing yielded yet, the first token goes at once
        while True:
            if pending and self._pos >= len(self._batch) and not self._ended:
                remaining = 0.0 if frame_end is None else frame_end - time.monotonic()
                if remaining <= 0 or not await self._wait_for_bytes(remaining):
                    yield "".join(pending)
                    pending = []
                    frame_end = time.monotonic() + coalesce
            try:
                event = await self.__anext__()
            except StopAsyncIteration:
                break
            if type(event) is TextDelta and event.choice == 0:
                pending.append(event.text)
                if frame_end is None or time.monotonic() >= frame_end:
                    yield "".join(pending)
                    pending = []
                    frame_end = time.monotonic() + coalesce
        if pending:
            yield "".join(pending)

    def _start_reader(self) -> None:
        if not self._reader_wanted or self._reader_recv is not None or self._bytes is None:
            return
        send, recv = anyio.create_memory_object_stream[Any](max_buffer_size=1024)
        source = self._bytes

        async def reader() -> None:
            async with send:
                try:
                    async for chunk in source:
                        await send.send(chunk)
                    await send.send(_EOF)
                except anyio.get_cancelled_exc_class():
                    return  # the stream closed; the consumer no longer reads
                except Exception as exc:  # forwarded: the consumer raises it where it reads
                    with contextlib.suppress(Exception):  # unless it stopped reading
                        await send.send(exc)

        self._reader_recv = recv
        self._reader_cancel = spawn(reader)

    def _stop_reader(self) -> None:
        if self._reader_cancel is not None:
            self._reader_cancel()
            self._reader_cancel = None
        if self._reader_recv is not None:
            self._reader_recv.close()
            self._reader_recv = None
        self._stash = None

    async def _wait_for_bytes(self, seconds: float) -> bool:
        """Whether a read is ready within ``seconds`` (it is kept for the next read)."""
        if self._stash is not None or self._reader_recv is None:
            return True
        with anyio.move_on_after(seconds):
            self._stash = await self._reader_recv.receive()
            return True
        return False

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
        if self._response is not None or self._ended:
            return
        self._started = time.monotonic()
        self._last_progress = self._started
        try:
            if self._resuming:
                self._resuming = False
                strategy = self._resume_strategy()
                if strategy is None:
                    raise StreamError("nothing to resume this stream by", self._parser.reply)
                self._resumes += 1
                self._batch = await self._resume_by(strategy, "resumed from a token")
                self._pos = 0
            else:
                await self._connect()
        except _Cancelled:
            self._end(self._parser.cancel("cancelled by stream.cancel()"))
        except anyio.get_cancelled_exc_class() as exc:
            await self._interrupted(exc)
            raise
        except BaseException as exc:
            if not self._ended:
                self.cause = exc
                self._end(self._parser.fail(f"{type(exc).__name__}: {exc}", exc))
            raise

    async def _connect(
        self,
        *,
        headers: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        fresh_budget: bool = False,
    ) -> None:
        """Send the request; retry (RetryPolicy) what fails before a response is usable.

        ``fresh_budget``: a resume's reconnect gets the policy's attempts afresh; before any
        content, every request so far was a try of the same request and shares one budget.
        """
        spec = self._spec
        errors = self._errors
        policy = self._retry
        tries = 0
        while True:
            if self._cancel_requested:
                raise _Cancelled
            self._attempts += 1
            tries += 1
            used = tries if fresh_budget else self._attempts
            request = spec.build(spec.path, body or spec.body, {**spec.headers, **(headers or {})})
            failure: FluxstreamError
            retry_after: float | None = None
            try:
                response = await self._send(request)
            except errors.timeout as exc:
                failure = APITimeoutError(f"timed out before the response: {type(exc).__name__}")
                failure.__cause__ = exc
            except errors.request as exc:  # transport errors, and decoding errors at the head
                failure = APIConnectionError(f"request failed: {type(exc).__name__}: {exc}")
                failure.__cause__ = exc
            else:
                self._response = response
                self._closed = False
                try:
                    await self._check(response)
                except APIStatusError as exc:
                    with anyio.CancelScope(shield=True):
                        await self._close_response(drain=False)
                    if exc.status_code not in policy.retry_status:
                        raise
                    failure = exc
                    retry_after = exc.retry_after
                except BaseException:
                    with anyio.CancelScope(shield=True):
                        await self._close_response(drain=False)
                    raise
                else:
                    self._scoped_reads = not can_abort(response)
                    self._last_progress = time.monotonic()  # the stall clock starts now
                    if self._cancel_requested:
                        abort_connection(response)
                    return
            if used >= policy.max_attempts or self._budget_left() <= 0:
                raise failure
            await self._sleep_before_retry(used, retry_after, str(failure))

    async def _send(self, request: Any) -> Any:
        """Send; ``cancel()`` interrupts the wait for the response head (``_Cancelled``)."""
        response = None
        with anyio.CancelScope() as scope:
            self._scope = scope
            response = await self._spec.http.send(request, stream=True)
        self._scope = None
        if response is None or self._cancel_requested:
            if response is not None:
                with anyio.CancelScope(shield=True):
                    await response.aclose()
            raise _Cancelled
        return response

    async def _check(self, response: Any) -> None:
        """Status, then content type, before any SSE parsing."""
        status: int = response.status_code
        if not 200 <= status < 300:
            body = await _read_limited(response, _ERROR_BODY_LIMIT)
            raise status_error(status, response.headers, body)
        ctype = response.headers.get("content-type", "")
        mime = ctype.partition(";")[0].strip().lower()
        if mime == "text/event-stream":
            self._stop_reader()
            self._bytes = response.aiter_bytes().__aiter__()
            self._start_reader()
            return
        if mime == "application/json" or mime.endswith("+json"):
            body = await _read_limited(response, self._parser.max_event_bytes)
            try:
                payload = json.loads(body)
            except ValueError as exc:
                raise ContentTypeError(ctype, body[:200].decode("utf-8", "replace")) from exc
            events = self._parser.feed_completion(payload)
            events += self._parser.close()
            self._batch, self._pos = self._batch[self._pos :] + events, 0
            self._end([])
            if self._parser.saw_content:
                self._first_token = self._finished_at
            return
        body = await _read_limited(response, 512)
        raise ContentTypeError(ctype or "(none)", body[:200].decode("utf-8", "replace"))

    async def _close_response(self, *, drain: bool = True) -> None:
        reader_was_running = self._reader_recv is not None
        self._stop_reader()
        if self._closed or self._response is None:
            return
        self._closed = True
        response = self._response
        source = self._bytes
        self._response = None
        self._bytes = None
        try:
            if (
                drain
                and self._parser.done
                and not self._cancel_requested
                and source is not None
                and not reader_was_running
            ):
                # The sentinel came; the body's end is usually right behind it. Reading it lets
                # the connection go back to the pool instead of being torn down.
                with anyio.move_on_after(_DRAIN_AFTER_END_SECONDS):
                    drained = 0
                    async for chunk in source:
                        drained += len(chunk)
                        if drained > _DRAIN_AFTER_END_BYTES:
                            break
        except Exception:  # the reply is complete; a failing drain changes nothing
            pass
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()


async def _read_limited(response: Any, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        parts.append(chunk)
        size += len(chunk)
        if size >= limit:
            break
    return b"".join(parts)[:limit]
