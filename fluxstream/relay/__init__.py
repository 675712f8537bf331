"""The relay: one streamed reply, followed from any worker, process or browser.

A layer above the stream (it consumes :class:`~fluxstream._stream.ReplyStream` events and
resume tokens) and below the server and CLI. A producer records a stream into a
:class:`ReplyLog`; followers anywhere read it from a position, live; a cancel from anywhere
stops the upstream; a dead producer is noticed through its lease and, if asked, taken over::

    log = RedisReplyLog("redis://127.0.0.1:6379/0")          # or MemoryReplyLog()
    async with log.record(client.chat.stream(model=..., messages=..., content_key=k)) as s:
        async for event in s: ...                            # recorded as delivered

    async for item in log.follow(k, after=position):          # any worker
        item.position, item.event
    await log.cancel(k)                                       # any worker

    body = to_sse(log.follow(k, last_event_id=request.headers.get("last-event-id")))

``RedisReplyLog`` is imported lazily (it needs ``fluxstream[redis]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .codec import START, Entry, Position, RelayEvent, coalesce, parse_position
from .log import CANCELLED_BY_RELAY, PRODUCER_LOST, LogState, ReplyLog
from .memory import MemoryReplyLog
from .producer import RecordedStream, produce
from .sse import to_sse

if TYPE_CHECKING:  # pragma: no cover
    from .redis_log import RedisReplyLog

__all__ = [
    "CANCELLED_BY_RELAY",
    "PRODUCER_LOST",
    "START",
    "Entry",
    "LogState",
    "MemoryReplyLog",
    "Position",
    "RecordedStream",
    "RedisReplyLog",
    "RelayEvent",
    "ReplyLog",
    "coalesce",
    "parse_position",
    "produce",
    "to_sse",
]


def __getattr__(name: str) -> Any:
    if name == "RedisReplyLog":
        from .redis_log import RedisReplyLog

        return RedisReplyLog
    raise AttributeError(f"module 'fluxstream.relay' has no attribute {name!r}")
