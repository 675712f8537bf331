"""``ReplyStream``: one logical streaming request, as an async iterator of normalized events.

This module is the public face: iteration, ``text()``, ``complete()``, the context manager
and ``cancel()``. Each concern behind it has a module of its own:

* :class:`~fluxstream._parser.StreamParser` (sans-IO) decides every event and the outcome;
* :class:`~fluxstream._io.reader.StreamReader` reads through it, enforces the timeouts, acts on
  decisions and states an outcome on every path (cancellation always propagates);
* :class:`~fluxstream._core.recovery.Recovery` (sans-IO) decides retry / resume / give up, and
  :class:`~fluxstream._core.progress.Progress` (sans-IO) keeps the clocks;
* :class:`~fluxstream._io.channel.Channel` is the loop over attempts and the reads of the current
  one; :class:`~fluxstream._io.attempt.Attempt` is one request/response (send, check, read, close);
* :mod:`fluxstream._core.coalesce` and :mod:`fluxstream._io.readahead` pace
  ``text(coalesce=...)`` and ``objects(coalesce=...)``;
* :class:`~fluxstream._core.observers.ObserverSet` tells the stream's observers
  (:mod:`fluxstream._observe`) when it opens (:meth:`ReplyStream._open`), each event it delivers
  (``__anext__``) and when it ends (:meth:`ReplyStream._observe_end`, on every way out);
* :mod:`fluxstream._io.stream_objects` (a mixin) is ``objects()``, ``partial_tool_call()`` and
  ``parsed``; :mod:`fluxstream._io.structured_output` keeps their typed partial objects
  (:mod:`fluxstream.structured` does the work).

Retries and resume happen underneath: a consumer sees one sequence of events whose
``(key, choice, offset)`` never repeats. Why there is no cancel scope per read: see
``docs/architecture.md``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import replace
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from ._core.coalesce import Coalesced, FuncSource, Picked
from ._core.observers import ObserverSet
from ._core.progress import StreamStats
from ._core.resume_token import RESUME_TOKEN_VERSION, write_token
from ._core.token_signature import TokenSigner
from ._events import Event, Outcome, TextDelta
from ._io.attempt import RequestSpec
from ._io.failover import Route
from ._io.reader import StreamReader
from ._io.stream_objects import StructuredOutput
from ._observe import StreamInfo, StreamObserver
from ._parser import StreamParser
from ._retry import ResumePolicy, RetryPolicy
from .errors import StreamError, show_key

if TYPE_CHECKING:  # pragma: no cover
    from ._core.rate_limits import RateLimits
    from ._io.structured_output import StructuredView
    from ._reply import Reply

# RESUME_TOKEN_VERSION: its home is _core.resume_token, with the token's writer and reader.
__all__ = ["RESUME_TOKEN_VERSION", "ReplyStream", "RequestSpec", "StreamStats"]

P = TypeVar("P")
U = TypeVar("U")


class ReplyStream(StructuredOutput):
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

    A stream that did not end well ends its iteration quietly (``stream.reply.outcome`` says
    how it ended) unless made with ``raise_for_outcome=True``: its ``async for`` (and
    ``text()``, ``objects()``) then raises what :meth:`Reply.raise_for_outcome` raises, after
    the last event was delivered and the observers were told of the end.
    """

    def __init__(
        self,
        spec: RequestSpec,
        parser: StreamParser,
        *,
        retry: RetryPolicy,
        resume: ResumePolicy,
        resuming: bool = False,
        observers: Iterable[StreamObserver] = (),
        route: Route | None = None,
        token_signer: TokenSigner | None = None,
        raise_for_outcome: bool = False,
    ) -> None:
        # Every deadline comes with the request (``spec.timeouts``), down to the clocks.
        self._spec = spec
        self._parser = parser
        #: Signs this stream's resume tokens (the client's ``token_secret``), if any.
        self._token_signer = token_signer
        #: The end of iteration raises for an outcome other than done or finished.
        self._raise_at_end = raise_for_outcome
        self._reader = StreamReader(
            spec, parser, retry=retry, resume=resume, resuming=resuming, route=route
        )
        self._batch: list[Event] = []
        self._pos = 0
        #: Fed every delivered event once structured output is tracked (see ``objects()``).
        self._view: StructuredView | None = None
        #: ``None`` without observers: the per-event cost of observing is then one check.
        self._observed: ObserverSet | None = None
        #: The same, once some observer is told of each event (most read the end only).
        self._watching: ObserverSet | None = None
        for observer in observers:
            self.add_observer(observer)

    @property
    def cause(self) -> BaseException | None:
        """The exception that ended the stream badly (transport error, timeout), if any."""
        return self._reader.cause

    def __repr__(self) -> str:
        reader = self._reader
        state = "ended" if reader.ended else ("open" if reader.opened else "new")
        return f"<ReplyStream {state} key={show_key(self._parser.content_key)}>"

    # ------------------------------------------------------------------ public state

    @property
    def reply(self) -> Reply:
        """The reply so far; final once the stream has ended."""
        return self._parser.reply

    @property
    def content_key(self) -> str:
        return self._parser.content_key

    @property
    def rate_limits(self) -> RateLimits | None:
        """What the headers of the response being read (the latest one) say: rate limits
        per kind, retry advice, the request id, the raw headers (``None`` before a response
        came). Read from the headers on first use."""
        return self._parser.rate_limits

    @property
    def outcome(self) -> Outcome | None:
        return self._parser.reply.outcome

    @property
    def stats(self) -> StreamStats:
        return self._stats_of(self._parser.reply)

    def _stats_of(self, reply: Reply) -> StreamStats:
        """:attr:`stats` from ``reply``, the reply as it is now (an observer told of the end
        is given the snapshot it already has: none is built twice)."""
        reader = self._reader
        recovery = reader.recovery
        stats = reader.progress.stats(reply, recovery.attempts, recovery.resumes, time.monotonic())
        error = reader.error
        cause = reader.cause
        if error is None and cause is not None and reply.outcome is not Outcome.CANCELLED:
            error = type(cause).__name__
        observed = self._observed
        errors = 0 if observed is None else observed.errors
        if not errors and error is None:
            return stats
        return replace(stats, observer_errors=errors, error_type=error)

    def add_observer(self, observer: StreamObserver) -> None:
        """Tell ``observer`` of this stream too (see :mod:`fluxstream._observe`), after the
        client's and the call's own observers. Added once the stream has opened, it misses
        ``on_open`` (and, as every observer, is not told of an end that has passed)."""
        observed = self._observed
        if observed is None:
            observed = self._observed = ObserverSet()
        observed.add(observer)
        if observed.watches_events:
            self._watching = observed
        if observed.sends and self._spec.sending is None:  # each request's send is observed
            self._spec.sending = observed.sending

    def resume_token(self) -> dict[str, Any]:
        """A small JSON-serialisable value from which ``client.chat.resume(token)`` continues
        this logical stream in another process: key, request, last event id, partial reply.

        The request's headers are not included (they may hold secrets); the resuming client
        adds its own key. A client with a ``token_secret`` signs the token (its
        ``"signature"``), and resumes only tokens signed so.
        """
        reader = self._reader
        channel, route = reader.channel, reader.route
        token = write_token(
            channel.parser, api=channel.spec.api.name, path=channel.spec.path,
            body=channel.spec.body, continued=channel.sent_body is not None,
            upstream=None if route is None else route.current.label,
        )
        signer = self._token_signer
        return token if signer is None else signer.sign(token)

    # ------------------------------------------------------------------ context manager

    async def __aenter__(self) -> ReplyStream:
        await self._open()
        return self

    async def _open(self) -> None:
        """The one place a stream opens (``async with``, the first ``anext``, a read-ahead)."""
        reader = self._reader
        observed = self._observed
        if observed is not None and not reader.ended and not reader.opened:
            spec = self._spec
            model = spec.body.get("model")
            host, port = spec.server or (None, None)
            observed.open(StreamInfo(
                content_key=self._parser.content_key, path=spec.path,
                model=model if isinstance(model, str) else None, resuming=reader.resuming,
                body=MappingProxyType(spec.body), api=spec.api.name,
                provider=spec.api.provider, operation=spec.api.operation,
                server_address=host, server_port=port,
            ))
        try:
            events = await reader.open()
        except BaseException:
            self._observe_end()  # the open failed or was cancelled: the stream has ended
            raise
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
        try:
            await self._reader.close()
        finally:
            self._observe_end()

    def _observe_end(self) -> None:
        """The one place a stream's end is observed: when its consumer is done with it (the
        last event delivered, an error or a cancellation raised, ``aclose``, collected), so
        that ``on_end`` always comes after the last ``on_event``. Once, and only if the
        stream has ended (a read that raised without ending it leaves it usable)."""
        observed = self._observed
        if observed is not None and not observed.ended and self._reader.ended:
            reply = self._parser.reply
            observed.end(reply, lambda: self._stats_of(reply))

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        """Collected while its response is open (a loop left by ``break`` without ``async
        with`` or :meth:`aclose`): the connection is closed, or the server would generate the
        rest of the reply for nobody, and a ``ResourceWarning`` says so, as for a file."""
        reader = self.__dict__.get("_reader")
        if reader is None:
            return
        observed = self.__dict__.get("_observed")
        unobserved = observed is None or observed.ended or not observed.opened
        if reader.channel.closed and unobserved:  # the usual case: nothing left open or untold
            return
        try:
            shown = repr(self)  # before the abandon, which ends the stream
            left_open = reader.abandon()
            self._observe_end()
        except Exception:  # a finalizer never raises; the loop may be gone already
            return
        if left_open:
            _warn(
                f"unclosed {shown}: use 'async with' or 'await stream.aclose()'",
                ResourceWarning, stacklevel=2, source=self,
            )

    def _client_closed(self) -> None:
        """The client that made this stream was closed: the stream ends at once, nothing
        more is sent for it (see :meth:`StreamReader.client_closed`)."""
        self._reader.client_closed()

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
            # The hot path: the transport's read is the one await; its outcome is decided
            # synchronously unless it calls for more (``StreamReader.took``/``raised``).
            reader = self._reader
            body = reader.direct_body()
            if body is None:
                event = await self._next_batch()
            else:
                try:
                    data = await body.__anext__()
                except BaseException as exc:
                    event = await self._next_batch(reader.raised(exc))
                else:
                    events = reader.took(data)
                    if not isinstance(events, list):
                        event = await self._next_batch(events)
                    elif events:
                        self._batch = events
                        self._pos = 1
                        event = events[0]
                    else:  # part of an event, or nothing to deliver: read on
                        event = await self._next_batch()
        view = self._view
        if view is not None:
            view.feed(event)
        watching = self._watching
        if watching is not None:
            watching.event(event)
        return event

    async def _next_batch(self, pending: Awaitable[list[Event]] | None = None) -> Event:
        """The next event past the current batch. ``pending``: a read's outcome that took more
        than its bytes (:meth:`StreamReader.took` or :meth:`StreamReader.raised`), awaited
        first as a read of this loop's own would be."""
        reader = self._reader
        if pending is None and not reader.opened and not reader.ended:
            await self._open()
        while True:
            if pending is None:
                if self._pos < len(self._batch):
                    self._pos += 1
                    return self._batch[self._pos - 1]
                if reader.ended:
                    self._observe_end()
                    if not reader.channel.close_now():  # the usual end closes synchronously
                        await reader.close_response()
                    if self._raise_at_end:  # after the last event, and after on_end
                        self._raise_for_outcome()
                    raise StopAsyncIteration
                pending = reader.read()
            try:
                events = await pending
            except BaseException:
                self._observe_end()  # a typed error or a cancellation that ended the stream
                raise
            pending = None
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

    # ------------------------------------------------------------------ whole reply

    async def until_done(self) -> Reply:
        """Read to the end and return the reply (whatever its outcome, also with
        ``raise_for_outcome=True``)."""
        self._raise_at_end = False
        async for _ in self:
            pass
        return self._parser.reply

    async def complete(self) -> Reply:
        """Read to the end; raise a typed error carrying the partial reply unless it ended well
        (:meth:`Reply.raise_for_outcome`, caused by the stream's :attr:`cause`)."""
        await self.until_done()
        return self._raise_for_outcome()

    def _raise_for_outcome(self) -> Reply:
        """:meth:`Reply.raise_for_outcome` of the reply, its error caused by :attr:`cause`."""
        reply = self._parser.reply
        try:
            return reply.raise_for_outcome()
        except StreamError as exc:
            raise exc from self.cause

def _choice0_text(event: Event) -> str | None:
    return event.text if type(event) is TextDelta and event.choice == 0 else None
