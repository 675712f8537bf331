"""Sending an :data:`~.answers.Answer` on a connection: where timing and faults meet content.

The content is decided (:mod:`.answers`); this module adds only what a transport does to it:
the ``Last-Event-ID`` cut, heartbeats, and the faults that act between events (``drip``,
``stall`` with its heartbeats, ``oversize``, ``drop-after-events``, ``batch``). The faults that
act on bytes (``write-size``, ``drop-after``, ``bad-chunk-after``, ``delay``) are the
connection's (:mod:`.connection`). So a resume or a retry sees exactly the same events, and
a fault never changes what a correct client assembles.
"""

from __future__ import annotations

import anyio

from .answers import Answer, EventStream, Payload, Refusal, Relayed, WireEvent
from .connection import Connection, Dropped
from .error_shapes import ErrorShape
from .render import frame, frame_comment, oversize_data

__all__ = ["MAX_EVENTS_PER_REQUEST", "send_answer"]

MAX_EVENTS_PER_REQUEST = 100_000


async def send_answer(
    conn: Connection, answer: Answer, errors: ErrorShape, last_event_id: str | None = None
) -> None:
    """Send ``answer``; a refusal is worded in ``errors``, an event stream starts after
    ``last_event_id`` (the request's ``Last-Event-ID``)."""
    if isinstance(answer, Refusal):
        body = errors.body(answer.status, answer.message, answer.code)
        await conn.simple(answer.status, body, extra=list(answer.headers), close=answer.close)
    elif isinstance(answer, Payload):
        await conn.simple(answer.status, answer.body, answer.content_type, list(answer.headers))
    elif isinstance(answer, Relayed):
        await send_relayed(conn, answer)
    else:
        await EventWriter(conn, answer).send(last_event_id)


async def send_relayed(conn: Connection, answer: Relayed) -> None:
    """A relayed answer: its head, then each read as it comes, chunked (the framing of the
    source is not kept: its body is passed on decoded)."""
    status, headers, reads = await answer.open()
    try:
        await conn.start(status, list(headers), chunked=True)
        for _ in range(MAX_EVENTS_PER_REQUEST):
            read = await anext(reads, None)
            if read is None:
                break
            if read:
                await conn.body(read)
        await conn.end()
    finally:
        close = getattr(reads, "aclose", None)
        if close is not None:
            with anyio.CancelScope(shield=True):
                await close()


class EventWriter:
    """One ``text/event-stream`` answer, written event by event with the connection's faults."""

    def __init__(self, conn: Connection, stream: EventStream) -> None:
        self.conn = conn
        self.stream = stream
        names = stream.names
        #: What a heartbeat is in this format (a ``: ping`` comment unless it says otherwise).
        self.beat = stream.keepalive if stream.keepalive is not None else frame_comment(names)

    async def send(self, last_event_id: str | None) -> None:
        """Start the answer and stream the events after ``last_event_id``, if any."""
        stream, faults = self.stream, self.conn.faults
        events = stream.events
        if last_event_id is not None and last_event_id.strip().isdigit():
            after = int(last_event_id.strip())
            events = [e for e in events if e.seq is None or e.seq > after]
        await self.conn.start(
            200,
            [
                ("content-type", "text/event-stream; charset=utf-8"),
                ("cache-control", "no-cache"),
                ("x-fluxstream-profile", ",".join(sorted(stream.names)) or "openai"),
                *stream.headers,
            ],
            chunked=True,
        )
        events = events[:MAX_EVENTS_PER_REQUEST]
        await self._after_events(0)
        if faults.batch and not (
            faults.drip or faults.stall or faults.oversize is not None
            or faults.drop_after_events is not None or faults.drop_after is not None
        ):
            await self._send_batched(events, faults.batch)
        else:
            await self._send_each(events)

    def _frame(self, position: int, event: WireEvent) -> bytes:
        retry = self.stream.retry if position == 0 else None
        return frame(event, self.stream.names, retry=retry)

    async def _send_each(self, events: list[WireEvent]) -> None:
        conn, faults = self.conn, self.conn.faults
        heartbeats = "heartbeats" in self.stream.names
        for position, event in enumerate(events):
            if position and faults.drip:
                await anyio.sleep(faults.drip)
            data = self._frame(position, event)
            if faults.drop_after_events is not None and conn.events >= faults.drop_after_events:
                await conn.drop_mid_event(data)
            if position and heartbeats:
                await conn.body(self.beat)
            await conn.body(data)
            conn.events += 1
            await self._after_events(conn.events)
        if faults.drop_after_events is not None and conn.events >= faults.drop_after_events:
            raise Dropped
        await conn.end()

    async def _send_batched(self, events: list[WireEvent], size: int) -> None:
        """The same bytes as :meth:`_send_each`, written in batches of at least ``size``
        bytes (what a fast server or a buffering proxy does)."""
        conn = self.conn
        heartbeats = "heartbeats" in self.stream.names
        buffer = bytearray()
        for position, event in enumerate(events):
            if position and heartbeats:
                buffer += self.beat
            buffer += self._frame(position, event)
            conn.events += 1
            if len(buffer) >= size:
                await conn.body(bytes(buffer))
                buffer.clear()
        if buffer:
            await conn.body(bytes(buffer))
        await conn.end()

    async def _after_events(self, count: int) -> None:
        """Faults that fire once ``count`` events have been written: stall, oversize."""
        conn, faults = self.conn, self.conn.faults
        if faults.stall and count == faults.stall_after_events:
            interval = faults.stall_heartbeat
            if interval is None:
                await anyio.sleep(faults.stall)
            else:
                deadline = anyio.current_time() + faults.stall
                for _ in range(int(faults.stall / interval) + 2):
                    remaining = deadline - anyio.current_time()
                    if remaining <= 0:
                        break
                    await anyio.sleep(min(interval, remaining))
                    if deadline - anyio.current_time() > 0:
                        await conn.body(self.beat)
        if faults.oversize is not None and count == faults.oversize_after_events:
            big = WireEvent(None, oversize_data(self.stream.script, faults.oversize))
            await conn.body(frame(big, self.stream.names, wrap=False))
