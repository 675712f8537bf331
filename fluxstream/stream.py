"""``ReplyStream``: one logical streaming request, as an async iterator of normalized events.

This module is the public face: iteration, ``text()``, ``complete()``, the context manager
and ``cancel()``. Each concern behind it has a module of its own:

* :class:`~fluxstream.parser.StreamParser` (sans-IO) decides every event and the outcome;
* :class:`~fluxstream.reader.StreamReader` reads through it, enforces the timeouts, acts on
  decisions and states an outcome on every path (cancellation always propagates);
* :class:`~fluxstream.recovery.Recovery` (sans-IO) decides retry / resume / give up, and
  :class:`~fluxstream.progress.Progress` (sans-IO) keeps the clocks;
* :class:`~fluxstream.channel.Channel` is the loop over attempts and the reads of the current
  one; :class:`~fluxstream.attempt.Attempt` is one request/response (send, check, read, close);
* :mod:`fluxstream.coalesce` and :mod:`fluxstream._readahead` pace ``text(coalesce=...)`` and
  ``objects(coalesce=...)``;
* :mod:`fluxstream._objects` keeps the typed partial objects of ``objects()`` and
  ``partial_tool_call()`` (:mod:`fluxstream.structured` does the work).

Retries and resume happen underneath: a consumer sees one sequence of events whose
``(key, choice, offset)`` never repeats. Why there is no cancel scope per read: see
``docs/architecture.md``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from .attempt import RequestSpec
from .coalesce import Coalesced, FuncSource, Picked
from .errors import StreamError, StreamFailedError, StreamTruncatedError
from .events import Event, Outcome, TextDelta, ToolCallDelta
from .parser import StreamParser
from .progress import StreamStats
from .reader import StreamReader
from .retry import ResumePolicy, RetryPolicy

if TYPE_CHECKING:  # pragma: no cover
    from ._objects import Structured, StructuredView
    from .reply import Reply
    from .structured import ObjectBuilder, StructuredResult

__all__ = ["RESUME_TOKEN_VERSION", "ReplyStream", "RequestSpec", "StreamStats"]

RESUME_TOKEN_VERSION = 1

P = TypeVar("P")
U = TypeVar("U")


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
        self._parser = parser
        self._reader = StreamReader(
            spec,
            parser,
            retry=retry,
            resume=resume,
            stall_timeout=stall_timeout,
            finish_grace=finish_grace,
            first_token_timeout=first_token_timeout,
            resuming=resuming,
        )
        self._batch: list[Event] = []
        self._pos = 0
        #: Fed every delivered event once structured output is tracked (see ``objects()``).
        self._view: StructuredView | None = None

    @property
    def cause(self) -> BaseException | None:
        """The exception that ended the stream badly (transport error, timeout), if any."""
        return self._reader.cause

    def __repr__(self) -> str:
        reader = self._reader
        state = "ended" if reader.ended else ("open" if reader.opened else "new")
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
        reader = self._reader
        recovery = reader.recovery
        return reader.progress.stats(
            self._parser.reply, recovery.attempts, recovery.resumes, time.monotonic()
        )

    def resume_token(self) -> dict[str, Any]:
        """A small JSON-serialisable value from which ``client.chat.resume(token)`` continues
        this logical stream in another process: key, request, last event id, partial reply.

        The request's headers are not included (they may hold secrets); the resuming client
        adds its own key.
        """
        return self._reader.channel.resume_token(RESUME_TOKEN_VERSION)

    # ------------------------------------------------------------------ context manager

    async def __aenter__(self) -> ReplyStream:
        await self._open()
        return self

    async def _open(self) -> None:
        events = await self._reader.open()
        if events:
            self._batch, self._pos = self._batch[self._pos :] + events, 0

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
        await self._reader.close()

    def cancel(self) -> None:
        """Cancel from anywhere (another task, a callback): synchronous and idempotent.

        The connection is aborted at once, so a read waiting for bytes ends immediately, as does
        a request waiting for its response or a retry waiting out its backoff; the iterating
        task then sees the stream end with outcome ``cancelled``. Nothing is sent after it.
        """
        self._reader.cancel()

    # ------------------------------------------------------------------ iteration

    def __aiter__(self) -> ReplyStream:
        return self

    async def __anext__(self) -> Event:
        batch = self._batch
        pos = self._pos
        if pos < len(batch):
            self._pos = pos + 1
            event = batch[pos]
        else:
            event = await self._next_batch()
        view = self._view
        if view is not None:
            view.feed(event)
        return event

    async def _next_batch(self) -> Event:
        reader = self._reader
        if not reader.opened and not reader.ended:
            await self._open()
        while True:
            if self._pos < len(self._batch):
                self._pos += 1
                return self._batch[self._pos - 1]
            if reader.ended:
                await reader.close_response()
                raise StopAsyncIteration
            events = await reader.read()
            if events:
                self._batch = events
                self._pos = 1
                return events[0]

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
        return self._text(coalesce, self)

    def _text(self, coalesce: float | None, via: AsyncIterator[Event]) -> AsyncIterator[str]:
        if coalesce is None:
            return Picked(via, _choice0_text)
        return self._paced(via, coalesce, _choice0_text, "".join)

    def _paced(
        self,
        via: AsyncIterator[Event],
        coalesce: float,
        pick: Callable[[Event], P | None],
        join: Callable[[list[P]], U],
    ) -> AsyncIterator[U]:
        """What ``pick`` keeps of the events of ``via`` (this stream, or a wrapper that
        delivers its events, such as a relay's recorded stream), joined per ``coalesce``
        seconds: the pacing of ``text(coalesce=)``, for any item."""
        wait = self._reader.channel.wait_for_bytes

        async def next_event() -> Event:
            await self._start_read_ahead()
            return await via.__anext__()

        source = FuncSource(next_event, self._has_ready, wait)
        return Coalesced(source, coalesce, pick, join)

    async def _start_read_ahead(self) -> None:
        reader = self._reader
        if not reader.channel.reads_ahead:
            if not reader.opened and not reader.ended:
                await self._open()
            reader.channel.start_read_ahead()

    def _has_ready(self) -> bool:
        return self._pos < len(self._batch) or self._reader.ended

    # ------------------------------------------------------------------ structured output

    def objects(
        self, tp: Any = None, *, coalesce: float | None = None, live: bool = False
    ) -> AsyncIterator[Any]:
        """Typed partial objects of the structured reply as its JSON arrives.

        The type is the ``response_format=`` the stream was opened with (for Anthropic, the
        object is the forced tool's input), or ``tp`` (for a stream opened with a ``dict``
        ``response_format`` or from a resume token; given before any event was delivered).
        An object is yielded whenever it changed: complete fields set and validated, strings
        and lists growing, fields not started absent from ``model_fields_set`` (the user's own
        class, built like ``model_construct``); a value once complete never changes. With
        ``coalesce`` (seconds), at most one object per interval, paced like
        ``text(coalesce=)``.

        Each object yielded is a snapshot that later text never changes: only the parts
        still being filled in are copied, values already complete (which never change) are
        shared between snapshots, so treat them as read-only (``copy.deepcopy`` one to edit
        it). A snapshot costs the size of the containers still open (for a list that grows,
        a plain list copy), not of the whole object: ~0.1 s for 11,000 snapshots of a 70 KB
        object. ``live=True`` yields the one partial object that the stream updates in place
        instead (O(size of each delta); keep no reference across iterations). Bad output
        never raises here: the objects stop at the last valid state and :attr:`parsed` (or
        ``reply.parse(Model)``) raises :class:`~fluxstream.errors.ParseError`. A ``Reset``
        (a restarted generation) starts the object over.
        """
        return self._objects(tp, coalesce, live, self)

    def _objects(
        self, tp: Any, coalesce: float | None, live: bool, via: AsyncIterator[Event]
    ) -> AsyncIterator[Any]:
        view = self._structured_view(tp)
        from ._objects import hand_out

        def pick_builder(_event: Event) -> ObjectBuilder[Any] | None:
            return view.take()

        if coalesce is None:
            def pick(_event: Event) -> Any:
                builder = view.take()
                return None if builder is None else hand_out(builder, live)

            return Picked(via, pick)
        return self._paced(via, coalesce, pick_builder,
                           lambda batch: hand_out(batch[-1], live))

    def partial_tool_call(self, event: ToolCallDelta, tp: Any, *, live: bool = False) -> Any:
        """The typed partial arguments (``tp``: a pydantic model or any adaptable type) of
        ``event``'s tool call, as far as the stream has delivered them (``event`` included).

        Ask with the ``ToolCallDelta`` just received; the first ask reads the arguments
        delivered so far in one pass, and from then on the stream keeps that call's partial
        object up to date as it delivers events (linear in the arguments). A snapshot by
        default (as in :meth:`objects`: complete values shared, read-only); ``live=True``
        returns the object the stream updates in place. The final object:
        ``ToolCall.parse_arguments(Model)``.
        """
        view = self._view
        if view is None:
            from ._objects import StructuredView

            view = self._view = StructuredView()
        return view.call(event, tp, lambda: self._parser.reply, live)

    def _structured_view(self, tp: Any) -> StructuredView:
        view = self._view
        if view is not None and view.structured is not None:
            if tp is not None and tp != view.structured.type:
                raise ValueError("this stream already reads its objects as another type")
            return view
        if tp is None:
            raise ValueError("no type: open the stream with response_format=Model, "
                             "or pass the type to objects()")
        if self._pos > 0:
            raise ValueError("objects(Model) must be called before the stream delivers events")
        from ._objects import Structured

        self._track(Structured(tp))
        assert self._view is not None
        return self._view

    def _track(self, structured: Structured) -> None:
        """Track structured output (the client does it for ``response_format=Model``; call
        it before any event is delivered)."""
        from ._objects import StructuredView

        view = self._view
        if view is None:
            view = self._view = StructuredView()
        # What the reply holds but was not delivered yet comes through __anext__ later; what
        # it holds beyond that (a resumed stream's partial reply) is fed now.
        view.track(structured, self._parser.reply, self._batch[self._pos :])

    @property
    def parsed(self) -> StructuredResult[Any]:
        """The structured result of the reply so far (final once the stream has ended), for
        the stream's ``response_format`` type: ``value`` is the validated instance when
        ``complete``; a reply cut short (``length``, ``max_tokens``, a network cut) gives the
        last partial object with ``complete=False`` and the ``reason``; a refusal gives
        ``refusal``. Same as ``stream.reply.parse(Model)``.

        :raises ParseError: the output is not JSON, not an object, or does not validate.
        :raises LookupError: the stream has no structured type.
        """
        view = self._view
        if view is None or view.structured is None:
            raise LookupError("no structured type: open the stream with response_format=Model")
        structured = view.structured
        return self.reply.parse(structured.type, tool=structured.tool)

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

def _choice0_text(event: Event) -> str | None:
    return event.text if type(event) is TextDelta and event.choice == 0 else None
