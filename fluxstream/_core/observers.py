"""The observers of one stream, sans-IO: who is told what, once, and what happens when one
of them raises (see :mod:`fluxstream._observe` for the promises this keeps).

:class:`~fluxstream._stream.ReplyStream` holds one :class:`ObserverSet` only when it has
observers: a stream without any pays one ``None`` check per delivered event, no more.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from .._observe import StreamObserver

if TYPE_CHECKING:  # pragma: no cover
    from .._events import Event
    from .._observe import SendInfo, StreamInfo
    from .._reply import Reply
    from .progress import StreamStats

__all__ = ["ObserverSet"]

logger = logging.getLogger("fluxstream")


class ObserverSet:
    """Calls each observer's ``on_open`` once, ``on_event`` per delivered event and
    ``on_end`` once (only after an ``on_open``), isolating the stream from their errors."""

    __slots__ = (
        "_event_calls", "_logged", "_send_calls", "ended", "errors", "observers", "opened",
    )

    def __init__(self, observers: Iterable[StreamObserver] = ()) -> None:
        self.observers: list[StreamObserver] = []
        #: Bound ``on_event`` methods, looked up once: this is the per-event path.
        self._event_calls: tuple[Callable[[Event], None], ...] = ()
        #: The observers' ``on_send`` (see :class:`~fluxstream._observe.SendObserver`).
        self._send_calls: list[tuple[object, Callable[..., Any]]] = []
        self.opened = False
        self.ended = False
        #: Exceptions the observers raised (each one is counted; see :meth:`_failed`).
        self.errors = 0
        self._logged: set[int] = set()
        for observer in observers:
            self.add(observer)

    def add(self, observer: StreamObserver) -> None:
        """Tell ``observer`` of this stream (or the observer its ``for_stream()`` makes for
        it: one observer given to a client sees many streams at once)."""
        make = getattr(observer, "for_stream", None)
        if make is not None:
            observer = make()
        self.observers.append(observer)
        call = observer.on_event
        # An observer that keeps the protocol's no-op (it reads what it needs at the end)
        # costs a stream nothing per event.
        if getattr(call, "__func__", None) is not StreamObserver.on_event:
            self._event_calls += (call,)
        send = getattr(observer, "on_send", None)
        if send is not None:
            self._send_calls.append((observer, send))

    @property
    def watches_events(self) -> bool:
        """Some observer is told of each event (not all are: see :meth:`add`)."""
        return bool(self._event_calls)

    @property
    def sends(self) -> bool:
        """Some observer takes part in the stream's requests (``on_send``)."""
        return bool(self._send_calls)

    def sending(self, headers: dict[str, str], info: SendInfo) -> _Sending:
        """Around one request's send: each ``on_send`` may add ``headers`` and give a
        context to enter; errors are the observers' own, counted and logged (never raised),
        and whatever the send raises goes on unchanged."""
        return _Sending(self, headers, info)

    def open(self, info: StreamInfo) -> None:
        if self.opened:
            return
        self.opened = True
        for observer in self.observers:
            try:
                observer.on_open(info)
            except Exception as exc:
                self._failed(observer, "on_open", exc)

    def event(self, event: Event) -> None:
        if self.ended:  # delivered after the end (a batch left when the stream was closed)
            return
        for call in self._event_calls:
            try:
                call(event)
            except Exception as exc:
                self._failed(getattr(call, "__self__", call), "on_event", exc)

    def end(self, reply: Reply, stats: Callable[[], StreamStats]) -> None:
        """The stream ended; ``stats`` is called only if someone is told."""
        if self.ended or not self.opened:
            return
        self.ended = True
        value = stats()
        for observer in self.observers:
            try:
                observer.on_end(reply, value)
            except Exception as exc:
                self._failed(observer, "on_end", exc)

    def _failed(self, observer: object, hook: str, exc: Exception) -> None:
        """Counted, and logged the first time per observer: an observer that fails on every
        event must not flood the log (nor slow the stream with tracebacks)."""
        self.errors += 1
        if id(observer) in self._logged:
            return
        self._logged.add(id(observer))
        logger.warning(
            "stream observer %s failed in %s; the stream goes on: %s: %s",
            type(observer).__qualname__, hook, type(exc).__name__, exc,
        )


class _Sending:
    """:meth:`ObserverSet.sending`'s context: a plain class, entered once per request (a
    generator-based context manager costs several times as much)."""

    __slots__ = ("_entered", "_headers", "_info", "_set")

    def __init__(self, observed: ObserverSet, headers: dict[str, str], info: SendInfo) -> None:
        self._set = observed
        self._headers = headers
        self._info = info
        self._entered: list[tuple[object, AbstractContextManager[object]]] = []

    def __enter__(self) -> None:
        observed, entered = self._set, self._entered
        for observer, call in observed._send_calls:
            try:
                context = call(self._headers, self._info)
                if context is not None:
                    context.__enter__()
                    entered.append((observer, context))
            except Exception as exc:
                observed._failed(observer, "on_send", exc)

    def __exit__(self, *exc_info: object) -> None:
        observed, entered = self._set, self._entered
        self._entered = []
        for observer, context in reversed(entered):
            try:
                context.__exit__(None, None, None)
            except Exception as exc:
                observed._failed(observer, "on_send", exc)
