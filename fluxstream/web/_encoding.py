"""How a reply's events become the bytes of a response body: the seam between the response
(:class:`~fluxstream.web.EventStreamResponse`: the ASGI exchange, heartbeats, timeouts,
cancel, resume) and a wire protocol.

An :class:`Encoding` is given to the response; for each response it makes an
:class:`EventEncoder`, which may keep state between events (a protocol that opens and closes
parts, as the AI SDK's UI message stream does, needs to). The response calls the encoder for
the first bytes, each event, each heartbeat and the end, and sends what it returns (nothing
for ``b""``). :class:`SSE` is the built-in one; another protocol is another ``Encoding`` in a
module of its own, and the response does not change.
"""

from __future__ import annotations

from typing import Protocol

from pydantic_core import to_json

from ..relay import RelayEvent
from ..relay.codec import sse_event
from ._ids import EventIds

__all__ = ["SSE", "Encoding", "EventEncoder"]


class EventEncoder(Protocol):
    """One response's encoder: the body's bytes, piece by piece."""

    def open(self) -> bytes:
        """The bytes before the first event (``b""``: none)."""
        ...

    def event(self, item: RelayEvent) -> bytes:
        """The bytes of one event (``b""``: this event is not sent). ``item.position`` is
        where a reconnect resumes after it; its id is ``ids.id_of(item.position)``."""
        ...

    def heartbeat(self) -> bytes:
        """Bytes that keep an idle connection alive and that a page ignores."""
        ...

    def close(self) -> bytes:
        """The bytes after the last event, when the reply ended (not when the page left)."""
        ...


class Encoding(Protocol):
    """A wire protocol for a reply's events (see the module docstring)."""

    @property
    def media_type(self) -> str:
        """The response's ``content-type``."""
        ...

    @property
    def headers(self) -> tuple[tuple[str, str], ...]:
        """Headers the protocol adds to every response (names in lower case)."""
        ...

    def encoder(self, ids: EventIds) -> EventEncoder:
        """A new encoder for one response, whose events' ids ``ids`` writes."""
        ...


#: Events a page is not sent: a frame the parser skipped (raw upstream data, up to the
#: decoder's limit) and a provider's kept reasoning block (opaque, often encrypted, meant to
#: go back to the provider with the conversation, not to a screen).
_NOT_SENT = frozenset({"skipped", "reasoning_block"})


class SSE:
    """Server-sent events (``text/event-stream``), read by a browser's ``EventSource``.

    Each event is one SSE event: ``id:`` the id to resume after it, ``event:`` the event's
    ``type`` (``text``, ``reasoning``, ``refusal``, ``tool_call_delta``, ``tool_call_done``,
    ``finish``, ``usage``, ``error``, ``reset``, ``handoff``, ``end``), ``data:`` its JSON on
    one line, the event's fields (:class:`~fluxstream.TextDelta` and the others; text
    carries ``key``, ``choice`` and ``offset``, so ``buf[offset:offset + len(text)] = text``
    shows every character once).
    An ``error`` event is sent without its ``raw`` provider payload. Heartbeats are comments
    (``: ping``).

    :param retry: the reconnection delay (ms) an ``EventSource`` is told first (``None``:
        the browser's own, about 3 s).
    """

    media_type = "text/event-stream; charset=utf-8"
    #: ``no-cache``: an intermediary must not serve a stored reply; ``x-accel-buffering``:
    #: nginx must not hold events back in its buffer.
    headers = (("cache-control", "no-cache"), ("x-accel-buffering", "no"))

    def __init__(self, *, retry: int | None = None) -> None:
        if retry is not None and (isinstance(retry, bool) or retry < 0):
            raise ValueError("retry: a delay in milliseconds, not negative")
        self.retry = retry

    def __repr__(self) -> str:
        return f"SSE(retry={self.retry!r})"

    def encoder(self, ids: EventIds) -> EventEncoder:
        return _SSEEncoder(ids, self.retry)


class _SSEEncoder:
    """The SSE of one response: each event's bytes are those :func:`~fluxstream.relay.codec.
    sse_event` made once for every follower of the event in this process, with this reply's
    tag put in front of the position."""

    __slots__ = ("_head", "_retry")

    def __init__(self, ids: EventIds, retry: int | None) -> None:
        self._head = b"id: " + ids.prefix
        self._retry = retry

    def open(self) -> bytes:
        return b"" if self._retry is None else b"retry: %d\n\n" % self._retry

    def event(self, item: RelayEvent) -> bytes:
        event = item.event
        kind = event.type
        if kind in _NOT_SENT:
            return b""
        if kind == "error":
            return self._error(item)
        # ``sse_event`` starts with ``id: <position>``: the id line is written again with
        # the tag in front, the rest of the shared bytes as they are.
        return b"".join((self._head, memoryview(sse_event(item))[4:]))

    def _error(self, item: RelayEvent) -> bytes:
        event = item.event
        fields = {name: getattr(event, name) for name in ("message", "code", "error_type",
                                                          "param", "type")}
        return b"%s%d-%d\nevent: error\ndata: %s\n\n" % (
            self._head, item.position.entry, item.position.index, to_json(fields),
        )

    def heartbeat(self) -> bytes:
        return b": ping\n\n"

    def close(self) -> bytes:
        return b""
