"""What the recorder and a takeover may do to a log, handed to them by the log itself.

A backend's primitives (create, acquire, read, ...) are the log's own, private to it and its
subclasses; applications use :meth:`ReplyLog.record` and :meth:`ReplyLog.follow`. The two
parts of the relay that work a log from outside it -- a recorder writing a stream into it,
a takeover resuming a dead producer's stream -- get this object from the log instead of
reaching into it, so the dependency runs one way: the log builds it (and uses them), they
never import the log.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .codec import Entry
    from .writer import Writer

__all__ = ["LogAccess"]


@dataclass(frozen=True)
class LogAccess:
    """One log's settings and the primitives the recorder and a takeover use (see
    :class:`fluxstream.relay.log.ReplyLog` for what each does)."""

    #: Seconds per coalesced write, of a lease, and between stored resume tokens.
    frame: float
    lease: float
    token_interval: float
    new_owner: Callable[[], str]
    create: Callable[[str, str, dict[str, Any]], Awaitable[None]]
    watch_cancel: Callable[[str, Callable[[], None]], Awaitable[Callable[[], None]]]
    #: The log's writer for the running event loop (one per log and loop).
    writer: Callable[[], Writer]
    acquire: Callable[[str, str], Awaitable[int | None]]
    release: Callable[[str, str], Awaitable[None]]
    meta: Callable[[str], Awaitable[dict[str, Any]]]
    read: Callable[[str, int, float], Awaitable[list[Entry]]]
