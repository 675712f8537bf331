"""``to_sse``: followed events as ``text/event-stream`` bytes for a browser's ``EventSource``.

Each event becomes one SSE event: ``id:`` is its follow position, ``event:`` its ``type``,
``data:`` its JSON (one line: JSON never needs a raw newline). A browser that reconnects sends
the last ``id`` it saw as ``Last-Event-ID``; ``log.follow(key, last_event_id=...)`` on any
worker continues right after it, so a page that renders ``buf[offset:offset+len(text)] =
text`` shows every character once. The ``End`` closes the stream; a reconnect after it gets
nothing more (an ``EventSource`` should be closed by the page when it sees ``end``).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

from .codec import RelayEvent, sse_event

__all__ = ["to_sse"]


async def to_sse(
    events: AsyncIterable[RelayEvent], *, retry: int | None = None
) -> AsyncIterator[bytes]:
    """Encode followed events as SSE bytes (one ``bytes`` per event). ``retry``: the
    reconnection delay (ms) to announce first. An event is serialised once per process
    however many browsers follow it (:func:`~fluxstream.relay.codec.sse_event`)."""
    if retry is not None:
        yield f"retry: {int(retry)}\n\n".encode()
    async for item in events:
        yield sse_event(item)
