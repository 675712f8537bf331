"""Observing streams: what tracing, metrics, failover bookkeeping and recording plug into.

A :class:`StreamObserver` is given to the client (``AsyncClient(..., observers=[...])``, for
every stream) or to one call (``client.chat.stream(..., observers=[...])``). Each stream then
tells it three things, always in this order:

* ``on_open(info)`` once, when the stream sends its request (or resumes from a token);
* ``on_event(event)`` for every event the stream *delivers* to its consumer, as it does
  (``async for``, ``text()``, ``objects()``, ``complete()`` all deliver through it);
* ``on_end(reply, stats)`` exactly once, after the last event it delivered, however the
  stream ended: done, finished, truncated, failed, cancelled, closed by ``aclose()`` or
  ``async with``, left by ``break``, or collected while open. ``reply.outcome`` says which
  (``cancelled`` for the last four); ``stats`` holds the times, attempts and bytes.

A stream closed before it opened calls neither ``on_open`` nor ``on_end``.

Observers are plain synchronous objects: they run on the stream's own task, so they must be
quick (hand slow work to a queue or a task of your own). ``on_end`` may run in a finalizer
(a stream collected while open), where nothing can be awaited. An observer that raises never
breaks the stream: the error is logged (the first one of each observer per stream, on the
``fluxstream`` logger) and counted in ``stream.stats.observer_errors``; the observer is still
called for what follows. Cancellation and ``KeyboardInterrupt`` are never swallowed.

Subclassing :class:`StreamObserver` is optional (it is a ``Protocol``); doing so gives no-op
defaults for the callbacks one does not need.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    from ._core.progress import StreamStats
    from .events import Event
    from .reply import Reply

__all__ = ["StreamInfo", "StreamObserver"]


@dataclass(frozen=True)
class StreamInfo:
    """What is known of a stream when it opens (never its headers: they may hold secrets)."""

    #: The stream's content key (events carry it as ``key``).
    content_key: str
    #: The API path the request goes to, relative to the client's base URL
    #: (``"chat/completions"``, ``"responses"``, ``"messages"``).
    path: str
    #: The requested model, if the body names one.
    model: str | None
    #: The stream continues from a resume token rather than sending a fresh request.
    resuming: bool


@runtime_checkable
class StreamObserver(Protocol):
    """Told when a stream opens, of every event it delivers, and once when it ends.

    See :mod:`fluxstream.observe` for the guarantees (order, exactly-once end, errors)."""

    def on_open(self, info: StreamInfo) -> None:
        """The stream is sending its request (once; before any ``on_event``)."""
        return None

    def on_event(self, event: Event) -> None:
        """The stream delivered ``event`` to its consumer."""
        return None

    def on_end(self, reply: Reply, stats: StreamStats) -> None:
        """The stream ended (once; after its last ``on_event``). ``reply`` is final."""
        return None
