"""The clocks of one stream, sans-IO: when it started, when content came, when it is overdue.

:class:`~fluxstream.stream.ReplyStream` reports each read's events and the time; this object
says whether a timeout has passed and how long the stream may still wait for the sentinel once
every choice has finished (``finish_grace``). No event loop here: ``now`` is passed in
(``time.monotonic()`` seconds), so each rule is tested without sleeping.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .events import Event, ReasoningDelta, RefusalDelta, TextDelta, ToolCallDelta

if TYPE_CHECKING:  # pragma: no cover
    from .reply import Reply

__all__ = ["CONTENT_EVENTS", "Overdue", "Progress", "StreamStats"]

#: Events that are progress: text, reasoning, refusal or tool-call arguments. Heartbeats,
#: skipped frames, usage chunks and role-only deltas are not.
CONTENT_EVENTS: frozenset[type] = frozenset(
    {TextDelta, ReasoningDelta, RefusalDelta, ToolCallDelta}
)

Overdue = Literal["stall"]


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


class Progress:
    """Timestamps and timeouts of one logical stream (every attempt included)."""

    __slots__ = (
        "finish_grace", "finished_at", "first_token", "last_progress", "lingering", "stall_timeout",
        "started",
    )

    def __init__(self, *, stall_timeout: float | None, finish_grace: float | None) -> None:
        self.stall_timeout = stall_timeout
        self.finish_grace = finish_grace
        self.started: float | None = None
        self.first_token: float | None = None
        self.finished_at: float | None = None
        self.last_progress = 0.0
        #: Every choice has finished but no sentinel yet: wait at most ``finish_grace``.
        self.lingering = False

    def start(self, now: float) -> None:
        self.started = now
        self.last_progress = now

    def connected(self, now: float) -> None:
        """A response is usable: the stall clock starts again with each connection."""
        self.last_progress = now

    def read(
        self, events: list[Event], now: float, saw_content: bool, complete: Callable[[], bool]
    ) -> Overdue | None:
        """One read's events; a timeout that has passed, if any."""
        if events:
            self.last_progress = now
            if self.first_token is None and saw_content:
                self.first_token = now
            if self.finish_grace is not None:
                self.lingering = complete()
            return None
        if self.stall_timeout is not None and now - self.last_progress > self.stall_timeout:
            return "stall"
        return None

    def end(self, now: float) -> None:
        if self.finished_at is None:
            self.finished_at = now

    def stats(self, reply: Reply, attempts: int, resumes: int, now: float) -> StreamStats:
        start = self.started
        end = self.finished_at if self.finished_at is not None else now
        first = self.first_token
        return StreamStats(
            bytes=reply.bytes,
            events=reply.events,
            skipped_frames=reply.skipped_frames,
            heartbeats=reply.heartbeats,
            time_to_first_token=None if start is None or first is None else first - start,
            duration=None if start is None else end - start,
            attempts=attempts,
            resumes=resumes,
        )
