"""How a stream ends: whether it has, why, and who stopped it.

:class:`StreamEnd` is the part of a stream's engine that is not reading: the state of its end
(``ended``, the ``cause``, the typed ``error``'s name for observers, a caller's cancel, a
client closed under it), the caller's ways to stop it (``cancel``, ``close``, being
collected), the ends a stream without fallbacks has after each kind of failure
(:meth:`StreamEnd.give_up`: ``truncated``, the typed error, the error event delivered), and
:meth:`StreamEnd.end`, the one place an end is recorded (the route's last segment closed, the
clocks stopped, usage and cost settled before any observer sees it).
:class:`~fluxstream._io.reader.StreamReader` reads, enforces the deadlines and acts on
decisions on top of it.
"""

from __future__ import annotations

import time

import anyio

from .._core.recovery import Failure
from .._events import Event
from .._parser import StreamParser
from .._timeouts import Deadline
from ..errors import (
    APIConnectionError,
    APITimeoutError,
    FirstTokenTimeoutError,
    IdleTimeoutError,
    StallTimeoutError,
    StreamError,
    StreamFailedError,
)
from .attempt import RequestSpec
from .channel import Channel
from .failover import Route, end_at_length
from .hedge import FirstConnect
from .http_library import seconds

__all__ = ["StreamEnd"]

#: The error a stream deadline ends the stream with, and its message (``{}``: the limit).
#: ``FINISH_GRACE`` is not here: it ends the stream ``finished``, as does ``STALL`` once every
#: choice has finished.
_TIMEOUT_ERRORS: dict[Deadline, tuple[type[StreamError], str]] = {
    Deadline.FIRST_TOKEN: (FirstTokenTimeoutError, "no content within {} of the request"),
    Deadline.STALL: (StallTimeoutError, "no content for {}"),
    Deadline.IDLE: (IdleTimeoutError, "no bytes for {}"),
}


class StreamEnd:
    """The end of one logical stream (see the module docstring)."""

    def __init__(
        self, spec: RequestSpec, parser: StreamParser, channel: Channel, route: Route | None,
        connect: FirstConnect,
    ) -> None:
        self._spec = spec
        self._parser = parser
        self.channel = channel
        #: The upstreams to move to when this one fails (``None``: no fallbacks).
        self.route = route
        self._connect = connect
        self.ended = False
        self.cancel_requested = False
        #: The exception that ended the stream badly (transport error, timeout), if any.
        self.cause: BaseException | None = None
        #: The class name of the typed error a failed stream raised (``APIStatusError``,
        #: ``StallTimeoutError``...), for observers (``error.type`` in traces).
        self.error: str | None = None
        #: A response was usable (the stream's reply had begun coming).
        self.responded = False
        #: The error the stream ends with since the client that made it was closed
        #: (:meth:`client_closed`); ``None`` while it is open.
        self.client_gone: APIConnectionError | None = None

    @property
    def opened(self) -> bool:
        """A response is open (or being opened)."""
        return self.channel.attempt is not None

    # ------------------------------------------------------------------ stopped by the caller

    def cancel(self) -> None:
        """See :meth:`ReplyStream.cancel`."""
        if self.ended or self.cancel_requested:
            return
        self.cancel_requested = True
        self.channel.cancel()
        self._connect.cancel()

    def client_closed(self) -> None:
        """The client that made this stream was closed (``AsyncClient.aclose()``, from any
        task): whatever is pending (a send, a backoff, a read) is interrupted at once, and
        the stream ends as a broken connection would, but with nothing sent again: no retry,
        no resume, no hand-off to a fallback. With its response it ends ``truncated`` (what
        arrived is kept); still waiting for one, it raises ``APIConnectionError`` (``failed``),
        as a stream opened on a closed client does. A stream the caller had cancelled
        stays ``cancelled``."""
        if self.ended or self.cancel_requested:
            return
        self.client_gone = APIConnectionError(
            "the client was closed (AsyncClient.aclose()): nothing more is sent"
        )
        self.cancel()

    def stopped(self, reason: str = "cancelled by stream.cancel()") -> list[Event]:
        """A read, a send or a wait ended because the caller stopped the stream: ``cancelled``
        for :meth:`cancel` and ``aclose()``; for a closed client, see :meth:`client_closed`
        (raises its error when no response had come)."""
        gone = self.client_gone
        if gone is None or self.ended:
            return self.end(self._parser.cancel(reason))
        events = self._end_closed(gone)
        if not self.responded:
            raise gone
        return events

    def _end_closed(self, gone: APIConnectionError) -> list[Event]:
        """End the stream of a closed client (see :meth:`client_closed`)."""
        self.cause = gone
        if self.responded:
            return self.end(self._parser.close(cause=gone))
        self.error = type(gone).__name__
        return self.end(self._parser.fail(f"{type(gone).__name__}: {gone}", gone))

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
            self._connect.cancel()
            if self.client_gone is not None:  # the client's close came first: it decides
                self._end_closed(self.client_gone)
            else:
                self.end(self._parser.cancel("closed by the caller"))
        if self.channel.closed:  # the usual case: the events ran out and closed it
            return
        with anyio.CancelScope(shield=True):
            await self.close_response()

    async def close_response(self, *, drain: bool = True) -> None:
        await self.channel.close(drain=drain)

    async def interrupted(self, exc: BaseException) -> None:
        """Cancellation or an interrupt: close now and state the outcome; the caller re-raises
        the exception unchanged."""
        self.cause = exc
        self.end(self._parser.cancel(f"interrupted by {type(exc).__name__}"))
        with anyio.CancelScope(shield=True):
            await self.close_response(drain=False)

    # ------------------------------------------------------------------ ends

    def end(self, events: list[Event]) -> list[Event]:
        """The stream has ended (``events``: its last, returned): recorded once here."""
        if self.route is not None and not self.ended:
            self.route.finish(self._parser, self.channel.recovery.attempts)
        self.ended = True
        progress = self.channel.progress
        progress.end(time.monotonic())
        ledger = self._spec.ledger
        if ledger is not None:  # usage estimate and cost, before any observer sees the end
            model = self._spec.body.get("model")
            parser = self._parser
            usage, estimate, partial = parser.usage_parts()
            parser.settle(*ledger.settle_parts(
                parser.content_key, usage, estimate, partial, progress.content_events,
                model if isinstance(model, str) else None, lambda: parser.reply,
            ))
        return events

    async def fail_with(
        self, kind: type[StreamError], exc: BaseException | None, message: str
    ) -> list[Event]:
        """End ``failed``, close the response, raise ``kind`` carrying the partial reply."""
        self.cause = exc
        self.error = kind.__name__
        self.end(self._parser.fail(message, exc))
        with anyio.CancelScope(shield=True):
            await self.close_response(drain=False)
        raise kind(message, self._parser.reply) from exc

    def open_failed(self, exc: BaseException) -> None:
        """The stream could not open (no response, an error status, every upstream failed):
        it ends ``failed`` with ``exc`` (the caller raises it)."""
        if isinstance(exc, APITimeoutError):  # the head did not come in time
            self.channel.progress.passed(exc.deadline)
        if self.ended:
            return
        cause = exc
        if isinstance(exc, StreamFailedError) and isinstance(
            exc.__cause__, self._spec.errors.decoding
        ):
            # A body that cannot be decoded, known from its head: the stream's cause is the
            # library's DecodingError, as when it is found in the body.
            cause = exc.__cause__
        self.cause = cause
        self.error = type(exc).__name__
        self.end(self._parser.fail(f"{type(exc).__name__}: {exc}", cause))

    async def at_length(self, reason: str, *, failed: bool) -> list[Event]:
        """Nothing is left of the length cap for the continuation that was next: the reply
        ends ``finished``, stop ``length`` (``failed``: the serving upstream's segment ends
        for ``reason``; else a token's reply just ends there)."""
        if self.route is not None:  # the reply ends here: an error event held is not applied
            self.route.hold.drop()
        route = self.route if failed else None
        return self.end(await end_at_length(self.channel, route, reason))

    async def give_up(self, failure: Failure, exc: BaseException | None) -> list[Event]:
        """End as a stream without fallbacks ends after ``failure`` (``exc``: what raised)."""
        parser = self._parser
        kind = failure.kind
        if kind == "drop":  # truncated
            return self.end(parser.close(cause=exc))
        if kind == "deadline":
            assert failure.deadline is not None
            error, message = _TIMEOUT_ERRORS[failure.deadline]
            limit = seconds(self.channel.progress.timeouts.limit(failure.deadline))
            return await self.fail_with(error, exc, message.format(limit))
        if kind == "error_event":  # delivered: the reply ends failed
            assert self.route is not None  # only a stream with fallbacks holds one back
            events = parser.apply_held(self.route.hold.release())
            if parser.finished:
                self.end([])
            elif self.channel.closed:  # a hand-off closed it, and no upstream answered
                events += self.end(parser.close())
            return events
        if kind == "request_failed":
            last = self.route.last_error if self.route is not None else None
            if last is not None and last is not exc:
                raise last from exc  # every upstream failed: the last one's error
            assert exc is not None
            raise exc
        if kind == "token":
            raise StreamError("nothing to resume this stream by", parser.reply)
        with anyio.CancelScope(shield=True):  # a reconnect that failed, or was rejected
            await self.close_response(drain=False)
        return self.end(parser.close(cause=exc))
