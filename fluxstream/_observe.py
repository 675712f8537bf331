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

Two optional methods serve observers that keep state per stream or take part in its requests
(tracing); the stream looks them up once, so an observer without them pays nothing:

* ``for_stream()``: an observer given to a client sees every stream of it, concurrently; one
  with this method is asked, once per stream, for the observer that stream then tells
  (:class:`StreamObserverFactory`);
* ``on_send(headers, info)``: called before each HTTP request of the stream (the first, each
  retry and each resume; :class:`SendInfo`), with the request's own headers, which it may add
  to (a ``traceparent``); the context manager it returns, if any, is entered around sending
  that request (so that the request runs in a trace context of the observer's)
  (:class:`SendObserver`).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    from ._core.progress import StreamStats
    from ._events import Event
    from ._reply import Reply

__all__ = ["SendInfo", "SendObserver", "StreamInfo", "StreamObserver", "StreamObserverFactory"]


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
    #: The request body as sent (model, messages, parameters; never headers). Read-only: the
    #: stream sends it again on a retry. Not part of equality.
    body: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    #: The API's registered name (``"chat_completions"``, ``"responses"``,
    #: ``"anthropic_messages"``) and its provider in the OpenTelemetry GenAI conventions
    #: (``"openai"``, ``"anthropic"``; ``None``: not one of theirs).
    api: str | None = field(default=None, compare=False)
    provider: str | None = field(default=None, compare=False)
    #: What the conventions call the request (``gen_ai.operation.name``): ``"chat"``, or
    #: ``"generate_content"`` for Gemini's ``streamGenerateContent``.
    operation: str = field(default="chat", compare=False)
    #: The server's host and port, from the client's base URL (tracing's ``server.*``).
    server_address: str | None = field(default=None, compare=False)
    server_port: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class SendInfo:
    """Which HTTP request of a stream is about to be sent (see ``on_send``)."""

    #: 1 for the first request, then 2, 3... over every retry and resume of the stream.
    attempt: int
    #: ``first``: the stream's first request (a resume token's too); ``retry``: the same
    #: request again, after a failure before any usable response or content; ``resume``: a
    #: reconnect after content (``strategy`` says how).
    kind: Literal["first", "retry", "resume"]
    #: The resume strategy (``last_event_id``, ``starting_after``, ``continuation``,
    #: ``restart``), for ``resume`` and the retries of a resume's request.
    strategy: str | None = None


#: A stream's first request, the usual one (frozen: one value serves every stream, where
#: making a frozen dataclass costs a call per field).
FIRST_SEND = SendInfo(1, "first")


@runtime_checkable
class StreamObserver(Protocol):
    """Told when a stream opens, of every event it delivers, and once when it ends.

    See :mod:`fluxstream._observe` for the guarantees (order, exactly-once end, errors)."""

    def on_open(self, info: StreamInfo) -> None:
        """The stream is sending its request (once; before any ``on_event``)."""
        return None

    def on_event(self, event: Event) -> None:
        """The stream delivered ``event`` to its consumer."""
        return None

    def on_end(self, reply: Reply, stats: StreamStats) -> None:
        """The stream ended (once; after its last ``on_event``). ``reply`` is final."""
        return None


@runtime_checkable
class StreamObserverFactory(Protocol):
    """An observer with state per stream: each stream asks it once for its own observer."""

    def for_stream(self) -> StreamObserver:
        """The observer of one new stream (told ``on_open`` and the rest, as any observer)."""
        ...


@runtime_checkable
class SendObserver(Protocol):
    """An observer that takes part in each HTTP request of its stream (trace propagation)."""

    def on_send(
        self, headers: dict[str, str], info: SendInfo
    ) -> AbstractContextManager[object] | None:
        """A request is about to be sent: ``headers`` is a fresh dict of what this request
        adds to the call's own headers (those are not shown: they may hold credentials);
        what is put in it is sent. The returned context manager, if any, is entered around
        the send."""
        ...
