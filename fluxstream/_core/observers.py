"""The observers of one stream, sans-IO: who is told what, once, and what happens when one
of them raises (see :mod:`fluxstream.observe` for the promises this keeps).

:class:`~fluxstream.stream.ReplyStream` holds one :class:`ObserverSet` only when it has
observers: a stream without any pays one ``None`` check per delivered event, no more.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ..events import Event
    from ..observe import StreamInfo, StreamObserver
    from ..reply import Reply
    from .progress import StreamStats

__all__ = ["ObserverSet"]

logger = logging.getLogger("fluxstream")


class ObserverSet:
    """Calls each observer's ``on_open`` once, ``on_event`` per delivered event and
    ``on_end`` once (only after an ``on_open``), isolating the stream from their errors."""

    __slots__ = ("_event_calls", "_logged", "ended", "errors", "observers", "opened")

    def __init__(self, observers: Iterable[StreamObserver] = ()) -> None:
        self.observers: list[StreamObserver] = []
        #: Bound ``on_event`` methods, looked up once: this is the per-event path.
        self._event_calls: tuple[Callable[[Event], None], ...] = ()
        self.opened = False
        self.ended = False
        #: Exceptions the observers raised (each one is counted; see :meth:`_failed`).
        self.errors = 0
        self._logged: set[int] = set()
        for observer in observers:
            self.add(observer)

    def add(self, observer: StreamObserver) -> None:
        self.observers.append(observer)
        self._event_calls += (observer.on_event,)

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
