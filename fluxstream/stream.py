"""``ReplyStream``: one logical streaming request, as an async iterator of normalized events.

The stream does I/O only. Bytes go into one sans-IO :class:`~fluxstream.parser.StreamParser`,
which decides every event and the outcome; the stream tells it just what bytes cannot say:
"the bytes ended", "the caller cancelled", "the transport failed", "a new connection starts".

Cost on the hot path is kept to what the work needs. There is no cancel scope around each read
(one costs about as much as parsing a delta): the idle timeout is the HTTP client's own read
timeout, the stall timeout is checked whenever bytes arrive (a stall is, by definition, bytes
arriving without content), and :meth:`ReplyStream.cancel` aborts the connection under the
response synchronously, which ends a pending read at once.

Cancellation always propagates: any exception that interrupts a read (``CancelledError``, trio's
``Cancelled``, a caller's timeout) closes the response inside a shielded scope, marks the reply
``cancelled`` and is re-raised unchanged.

Retries and resume (see :mod:`fluxstream.retry`) happen inside the stream: a consumer sees one
sequence of events whose ``(key, choice, offset)`` never repeats, whatever happened underneath.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from ._http import HttpErrors, abort_connection, status_error
from .errors import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    ContentTypeError,
    EventTooLargeError,
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

__all__ = ["ReplyStream", "RequestSpec", "StreamStats"]

logger = logging.getLogger("fluxstream")

_ERROR_BODY_LIMIT = 64 * 1024
_DRAIN_AFTER_END_BYTES = 64 * 1024
_DRAIN_AFTER_END_SECONDS = 0.25
_EOF = object()
RESUME_TOKEN_VERSION = 1


@dataclass(frozen=True)
class StreamStats:
    """Counters of one stream; times in seconds (``None`` until they happen)."""

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


class ReplyStream:
    """A streaming chat request. Use it as ``async with`` and ``async for``::

        async with client.chat.stream(model=..., messages=...) as stream:
            async for event in stream:
                ...
        print(stream.reply.outcome)

    Leaving the ``async with`` early (``break``, an exception), :meth:`aclose`, :meth:`cancel`
    from another task, cancelling the task, or a timeout around the loop closes the HTTP
    response at once and states the outcome ``cancelled``.
    """

    def __init__(
        self,
        spec: RequestSpec,
        parser: StreamParser,
        *,
        retry: RetryPolicy,
        resume: ResumePolicy,
        stall_timeout: float | None,
        idle_timeout: float | None,
        resuming: bool = False,
    ) -> None:
        self._spec = spec
        self._errors = spec.errors
        self._parser = parser
        self._retry = retry
        self._resume = resume
        self._stall_timeout = stall_timeout
        self._idle_timeout = idle_timeout
        self._response: Any = None
        self._bytes: AsyncIterator[bytes] | None = None
        self._batch: list[Event] = []
        self._pos = 0
        self._ended = False
        self._closed = False
        self._cancel_requested = False
        self._started: float | None = None
        self._first_token: float | None = None
        self._finished_at: float | None = None
        self._last_progress = 0.0
        self._attempts = 0
        self._resumes = 0
        self._restarts = 0
        # A stream restored from a resume token starts with a resume, not a fresh request.
        self._resuming = resuming
        self._continuation_messages: list[dict[str, Any]] | None = None
        # Reader task (only for text(coalesce=...)): bytes arrive through a memory stream so a
        # frame deadline can interrupt the wait without interrupting the HTTP read.
        self._task_group: anyio.abc.TaskGroup | None = None
        self._reader_recv: Any = None
        self._stash: Any = None
        self._reader_wanted = False
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
        group = anyio.create_task_group()
        await group.__aenter__()
        self._task_group = group
        try:
            await self._open()
        except BaseException:
            group.cancel_scope.cancel()
            self._task_group = None
            await group.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.aclose()
        finally:
            group = self._task_group
            if group is not None:
                self._task_group = None
                group.cancel_scope.cancel()
                # The group only ever holds our reader task, which never raises; the body's
                # own exception (if any) propagates from here unchanged, not wrapped in a group.
                await group.__aexit__(None, None, None)

    async def aclose(self) -> None:
        """Stop reading and close the response. The outcome becomes ``cancelled`` unless the
        stream had already ended. Safe to call any number of times."""
        if not self._ended:
            self._end(self._parser.cancel("closed by the caller"))
        await self._close_response()

    def cancel(self) -> None:
        """Cancel from anywhere (another task, a callback): synchronous and idempotent.

        The connection is aborted at once, so a read waiting for bytes ends immediately; the
        iterating task then sees the stream end with outcome ``cancelled``.
        """
        if self._ended or self._cancel_requested:
            return
        self._cancel_requested = True
        if self._response is not None:
            abort_connection(self._response)

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
            if self._ended and self._pos >= len(self._batch):
                await self._close_response()
                raise StopAsyncIteration
            if self._pos < len(self._batch):
                self._pos += 1
                return self._batch[self._pos - 1]
            events = await self._read()
            if events:
                self._batch = events
                self._pos = 1
                return events[0]

    async def _receive(self) -> bytes:
        """The next read: straight from the response, or through the reader task."""
        if self._reader_recv is None:
            assert self._bytes is not None
            return await self._bytes.__anext__()
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

    async def _read(self) -> list[Event]:
        """One read from the network, through the parser. Never raises StopAsyncIteration."""
        parser = self._parser
        if self._cancel_requested:
            return self._end(parser.cancel("cancelled by stream.cancel()"))
        try:
            data = await self._receive()
        except StopAsyncIteration:
            if self._cancel_requested:
                return self._end(parser.cancel("cancelled by stream.cancel()"))
            return await self._dropped(None)
        except self._errors.read_timeout as exc:
            return self._fail_with(IdleTimeoutError, exc, f"no bytes for {self._idle_timeout}s")
        except self._errors.transport as exc:
            if self._cancel_requested:
                return self._end(parser.cancel("cancelled by stream.cancel()"))
            return await self._dropped(exc)
        except BaseException as exc:
            # Cancellation (asyncio, trio, anyio scopes, caller's timeouts) and anything else:
            # close now, state the outcome, and let the exception go on unchanged.
            self.cause = exc
            self._end(parser.cancel(f"interrupted by {type(exc).__name__}"))
            with anyio.CancelScope(shield=True):
                await self._close_response()
            raise
        try:
            events = parser.feed(data)
        except EventTooLargeError as exc:
            self.cause = exc
            self._end(parser.fail(str(exc), exc))
            await self._close_response()
            raise StreamFailedError(str(exc), parser.reply) from exc
        now = time.monotonic()
        if events:
            self._last_progress = now
            if not parser.saw_content and self._error_before_content(events):
                return await self._retry_after_error_event(events)
            if self._first_token is None and parser.saw_content:
                self._first_token = now
            if parser.finished:
                self._ended = True
                self._finished_at = now
        elif self._stall_timeout is not None and now - self._last_progress > self._stall_timeout:
            message = f"no content for {self._stall_timeout}s"
            return self._fail_with(StallTimeoutError, None, message)
        return events

    def _end(self, events: list[Event]) -> list[Event]:
        self._ended = True
        if self._finished_at is None:
            self._finished_at = time.monotonic()
        return events

    def _fail_with(
        self, kind: type[StreamError], exc: BaseException | None, message: str
    ) -> list[Event]:
        self.cause = exc
        self._end(self._parser.fail(message, exc))
        raise kind(message, self._parser.reply) from exc

    # ------------------------------------------------------------------ retries and resume

    def _error_before_content(self, events: list[Event]) -> bool:
        return (
            self._attempts < self._retry.max_attempts
            and any(type(e) is ErrorEvent for e in events)
        )

    async def _retry_after_error_event(self, events: list[Event]) -> list[Event]:
        """An error event before any content: nothing was shown, so ask again."""
        error = next(e for e in events if type(e) is ErrorEvent)
        assert isinstance(error, ErrorEvent)
        await self._close_response(drain=False)
        # Nothing was shown, so the Reset that announces the new attempt is not passed on.
        self._parser.reset(self._attempts, "error before content")
        await self._sleep_before_retry(self._attempts, None, f"error event: {error.message}")
        await self._connect()
        return []

    async def _dropped(self, exc: BaseException | None) -> list[Event]:
        """The bytes ended (cleanly or by a transport error): end, or resume."""
        parser = self._parser
        if exc is not None:
            self.cause = exc
        if parser.done or (exc is None and parser.complete):
            # The sentinel came, or the bytes ended cleanly after every choice finished.
            return self._end(parser.close(cause=exc))
        if not parser.saw_content and self._attempts < self._retry.max_attempts:
            # Dropped before any content: nothing was shown, so this is a plain retry.
            await self._close_response(drain=False)
            parser.reset(self._attempts, "dropped before content")  # nothing to replace
            reason = f"{type(exc).__name__}: {exc}" if exc is not None else "connection closed"
            await self._sleep_before_retry(self._attempts, None, f"dropped early ({reason})")
            self._closed = False
            self._response = None
            await self._connect()
            return []
        strategy = self._resume_strategy()
        if strategy is None:
            return self._end(parser.close(cause=exc))
        self._resumes += 1
        reason = f"{type(exc).__name__}: {exc}" if exc is not None else "connection closed"
        logger.warning(
            "stream %s dropped (%s); resuming by %s (%d/%d)",
            parser.content_key, reason, strategy, self._resumes, self._resume.max_resumes,
        )
        await self._close_response(drain=False)
        return await self._resume_by(strategy, reason)

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
        self._closed = False
        self._response = None
        events: list[Event] = []
        if strategy == "last_event_id":
            await anyio.sleep(self._resume.reconnect_delay(parser.reconnection_time))
            last_id = parser.last_event_id
            parser.new_connection(resume_after=last_id)
            await self._connect(headers={"Last-Event-ID": last_id})
        elif strategy == "continuation":
            await anyio.sleep(self._resume.default_delay)
            text = parser.begin_continuation(min_overlap=self._resume.min_overlap)
            messages = list(self._spec.body.get("messages", []))
            messages.append({"role": "assistant", "content": text, **self._resume.prefix_flag})
            await self._connect(body={**self._spec.body, "messages": messages})
        else:
            await anyio.sleep(self._resume.default_delay)
            self._restarts += 1
            events = parser.reset(self._restarts, f"restart after a drop ({reason})")
            await self._connect()
        return events

    async def _sleep_before_retry(
        self, attempt: int, retry_after: float | None, reason: str
    ) -> None:
        delay = self._retry.delay(attempt, retry_after)
        logger.warning(
            "request %s failed before any content (%s); retry %d/%d in %.2fs",
            self._parser.content_key, reason, attempt + 1, self._retry.max_attempts, delay,
        )
        await anyio.sleep(delay)

    # ------------------------------------------------------------------ text helpers

    async def text(self, coalesce: float | None = None) -> AsyncIterator[str]:
        """The reply's text (choice 0) only.

        With ``coalesce`` (seconds, e.g. ``0.016`` for one screen frame), deltas that arrive
        within one interval are joined into one string: the first token is yielded at once,
        after that at most one string per interval, and text is never held longer than one
        interval waiting for more. Needs the stream opened with ``async with`` (the network is
        read by a helper task of the stream so that a frame's end can interrupt the wait
        without interrupting the HTTP read); nothing keeps running after the stream ends.
        """
        if coalesce is None:
            async for event in self:
                if type(event) is TextDelta and event.choice == 0:
                    yield event.text
            return
        if coalesce <= 0:
            raise ValueError("coalesce must be a positive number of seconds")
        if self._task_group is None:
            raise RuntimeError("text(coalesce=...) needs the stream opened with 'async with'")
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
                now = time.monotonic()
                if frame_end is None or now >= frame_end:
                    yield "".join(pending)
                    pending = []
                    frame_end = time.monotonic() + coalesce
        if pending:
            yield "".join(pending)

    def _start_reader(self) -> None:
        self._reader_wanted = True
        if self._reader_recv is None and self._bytes is not None and self._task_group is not None:
            send, recv = anyio.create_memory_object_stream[Any](max_buffer_size=1024)
            self._reader_recv = recv
            self._task_group.start_soon(self._reader, self._bytes, send)

    @staticmethod
    async def _reader(source: AsyncIterator[bytes], send: Any) -> None:
        async with send:
            try:
                async for chunk in source:
                    await send.send(chunk)
                await send.send(_EOF)
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:  # forwarded: the consumer raises it where it reads
                await send.send(exc)

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
        if self._resuming:
            self._resuming = False
            strategy = self._resume_strategy()
            if strategy is None:
                raise StreamError("nothing to resume this stream by", self._parser.reply)
            self._resumes += 1
            self._batch = await self._resume_by(strategy, "resumed from a token")
            self._pos = 0
            return
        await self._connect()

    async def _connect(
        self, *, headers: Mapping[str, str] | None = None, body: Mapping[str, Any] | None = None
    ) -> None:
        """Send the request; retry (RetryPolicy) what failed before any content."""
        spec = self._spec
        errors = self._errors
        policy = self._retry
        first = time.monotonic()
        local = 0
        while True:
            self._attempts += 1
            local += 1
            # Before any content every request so far was a try of the same request; after
            # content (a resume's reconnect) the budget starts again for this connection.
            used = local if self._parser.saw_content else self._attempts
            request = spec.build(spec.path, body or spec.body, {**spec.headers, **(headers or {})})
            failure: Exception
            retry_after: float | None = None
            try:
                response = await spec.http.send(request, stream=True)
            except errors.timeout as exc:
                failure = APITimeoutError(f"timed out before the response: {type(exc).__name__}")
                failure.__cause__ = exc
            except errors.transport as exc:
                failure = APIConnectionError(f"connection failed: {exc}")
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
                    retry_after = getattr(exc, "retry_after", None)
                except BaseException:
                    with anyio.CancelScope(shield=True):
                        await self._close_response(drain=False)
                    raise
                else:
                    if self._cancel_requested:
                        abort_connection(response)
                    return
            elapsed = time.monotonic() - first
            if used >= policy.max_attempts or elapsed >= policy.total_timeout:
                raise failure
            await self._sleep_before_retry(used, retry_after, str(failure))

    async def _check(self, response: Any) -> None:
        """Status, then content type, before any SSE parsing."""
        status: int = response.status_code
        if not 200 <= status < 300:
            body = await _read_limited(response, _ERROR_BODY_LIMIT)
            raise status_error(status, response.headers, body)
        ctype = response.headers.get("content-type", "")
        mime = ctype.partition(";")[0].strip().lower()
        if mime == "text/event-stream":
            self._bytes = response.aiter_bytes().__aiter__()
            self._reader_recv = self._stash = None
            if self._reader_wanted:
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
        if self._closed or self._response is None:
            return
        self._closed = True
        response = self._response
        source = self._bytes
        try:
            if (
                drain
                and self._parser.done
                and not self._cancel_requested
                and source is not None
                and self._reader_recv is None
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
