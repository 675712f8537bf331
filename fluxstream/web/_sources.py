"""What a response streams: a live :class:`~fluxstream.ReplyStream`, or a reply followed
through a :class:`~fluxstream.relay.ReplyLog`; each opened against the request's
``Last-Event-ID`` into the events to send, or refused with a status.

A refusal is decided before the response's head, so it is a status and a short JSON body,
never an event in a body already begun. What each case answers is the table in
``docs/recipes/browser.md``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from .._events import End, Outcome
from ..errors import FluxstreamError, RelayKeyError, RelayPositionError, RelayUnavailableError
from ..relay import START, Position, RelayEvent, ReplyLog
from ._ids import EventIds, IdProblem, Kind

if TYPE_CHECKING:  # pragma: no cover
    from .._client import AsyncClient
    from .._stream import ReplyStream

__all__ = ["Followed", "Live", "Opened", "Refusal", "Source"]


@dataclass(frozen=True)
class Refusal:
    """A request answered with a status instead of events."""

    status: int
    #: A short code for programs (``malformed_last_event_id`` ...).
    error: str
    #: One sentence for people.
    message: str


MALFORMED = Refusal(400, "malformed_last_event_id",
                    "Last-Event-ID is not an id this endpoint sent")
OTHER_REPLY = Refusal(409, "other_reply", "Last-Event-ID belongs to another reply")
PAST_THE_END = Refusal(416, "past_the_end", "Last-Event-ID is past the end of the reply")
NOT_RESUMABLE = Refusal(
    410, "not_resumable",
    "this reply was streamed live and ended with its connection; nothing can resume it "
    "(record it in a ReplyLog and follow the log to make it resumable)",
)
UNKNOWN_REPLY = Refusal(404, "unknown_reply", "no reply is stored under this key")
UNAVAILABLE = Refusal(503, "unavailable", "the reply log is unavailable; try again shortly")
#: The reply ended at the id the browser sent: nothing more will come. 204 is the status
#: that tells an ``EventSource`` to stop reconnecting.
ENDED = Refusal(204, "", "")


def upstream_failed(exc: BaseException) -> Refusal:
    """The live stream could not open (the upstream refused the request, or was away): only
    the error's class is told, its message may hold the provider's words."""
    return Refusal(502, "upstream_failed", f"the model's API failed: {type(exc).__name__}")


@dataclass
class Opened:
    """The events to send, how their ids are written, and how to stop them."""

    ids: EventIds
    items: AsyncIterator[RelayEvent]
    #: Called at once (synchronously) when the page leaves: a live stream closes its
    #: upstream request; a followed reply goes on for the other followers.
    cancel: Callable[[], None]
    #: Awaited once the response is done with ``items``.
    close: Callable[[], Awaitable[None]]


class Source:
    """Something a response can stream (see :class:`Live`, :class:`Followed`)."""

    async def open(self, last_event_id: str | None) -> Opened | Refusal:
        raise NotImplementedError


class Live(Source):
    """A live stream: its events as they arrive; closed (the upstream request too) when the
    page leaves. Nothing is kept, so a reconnect (``Last-Event-ID``) is refused
    (:data:`NOT_RESUMABLE`) without opening the stream (no request is sent for it)."""

    def __init__(self, stream: ReplyStream) -> None:
        self.stream = stream

    async def open(self, last_event_id: str | None) -> Opened | Refusal:
        stream = self.stream
        ids = EventIds.of(stream.content_key, Kind.LIVE)
        if last_event_id is not None and last_event_id.strip():
            await stream.aclose()
            # An id's tag cannot be checked here: a reconnect makes a new stream, under a
            # new content key unless the app gives one; either way nothing is kept.
            return MALFORMED if ids.read(last_event_id) is IdProblem.MALFORMED else NOT_RESUMABLE
        try:
            await stream.__aenter__()
        except FluxstreamError as exc:
            await stream.aclose()
            return upstream_failed(exc)
        return Opened(ids, _numbered(stream), stream.cancel, stream.aclose)


async def _numbered(stream: ReplyStream) -> AsyncIterator[RelayEvent]:
    """The stream's events, each at position ``n-0`` (``n`` from 1). A stream made with
    ``raise_for_outcome=True`` raises after its ``End``, which the page has then had; one
    that raised before it gets an ``End`` (``failed``, the error's class as the reason), so
    the page learns the reply ended rather than reconnecting to a reply that is gone."""
    number = 0
    ended = False
    try:
        async for event in stream:
            number += 1
            ended = event.type == "end"
            yield RelayEvent(Position(number, 0), event)
    except FluxstreamError as exc:
        if not ended:
            yield RelayEvent(Position(number + 1, 0), End(Outcome.FAILED, type(exc).__name__))


class Followed(Source):
    """A reply in a log, followed from the ``Last-Event-ID`` on (from the start without
    one). The page leaving stops only this follower: the producer goes on, so a reload
    continues where it stopped; :meth:`~fluxstream.relay.ReplyLog.cancel` stops the reply."""

    def __init__(self, log: ReplyLog, key: str, takeover: AsyncClient | None = None) -> None:
        self.log = log
        self.key = key
        self.takeover = takeover

    async def open(self, last_event_id: str | None) -> Opened | Refusal:
        ids = EventIds.of(self.key, Kind.FOLLOWED)
        position = START
        if last_event_id is not None and last_event_id.strip():
            read = ids.read(last_event_id)
            if read is IdProblem.MALFORMED:
                return MALFORMED
            if read is IdProblem.OTHER_REPLY:
                return OTHER_REPLY
            assert isinstance(read, Position)
            position = read
        log = self.log
        try:
            if not await log.check_follow(self.key, after=position):
                return ENDED
        except RelayKeyError:
            return UNKNOWN_REPLY
        except RelayPositionError:
            return PAST_THE_END
        except RelayUnavailableError:
            return UNAVAILABLE
        items = cast("AsyncGenerator[RelayEvent, None]", log.follow(
            self.key, after=position, takeover=self.takeover))
        return Opened(ids, items, _nothing, items.aclose)


def _nothing() -> None:
    """A follower has nothing to stop upstream when its page leaves."""
