"""What a route answers, decided before any byte is written.

A dialect's answer function (see :mod:`.dialect_table`) takes the :class:`Call` (the request,
its profile set, what the server keeps between requests) and returns an :data:`Answer`: a
:class:`Refusal` (worded by the dialect's error shape), a :class:`Payload` (bytes sent as they
are) or an :class:`EventStream` (events the writer of :mod:`.streaming` sends with the
connection's faults). Answer functions are pure but for :class:`Memory`, so a dialect is
tested without a socket and the server adds only timing and faults.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .script import Script, dumps
from .scripted import ScriptedReply

__all__ = [
    "CONTINUATION_HEADER",
    "Answer",
    "Call",
    "EventStream",
    "Memory",
    "Payload",
    "Refusal",
    "Relayed",
    "WireEvent",
    "continuation_headers",
    "header",
]

#: Response header on continuation requests (assistant ``prefix: true`` last): ``continued``
#: when the prefix was honoured, ``ignored`` when the request was answered as if it were absent
#: (the reply does not start with the prefix, or it has tool calls or several choices).
CONTINUATION_HEADER = "X-Fluxstream-Continuation"

Headers = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class WireEvent:
    """One SSE event: ``seq`` is sent as its ``id:`` (``None``: no id line); ``data`` is text;
    ``event`` the ``event:`` line of the named-event formats (``None``: none)."""

    seq: int | None
    data: str
    event: str | None = None


@dataclass(frozen=True)
class Refusal:
    """An error answer, worded in the dialect's error shape (:mod:`.error_shapes`)."""

    status: int
    message: str
    #: OpenAI's error ``code`` (``None``: the shape's default for the status).
    code: str | None = None
    headers: Headers = ()
    #: Close the connection after it (the request's body was not read, or not decoded).
    close: bool = False


@dataclass(frozen=True)
class Payload:
    """A whole answer, sent as it is."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: Headers = ()

    @classmethod
    def json(cls, value: Any, headers: Headers = ()) -> Payload:
        """A 200 with ``value`` as compact JSON."""
        return cls(200, dumps(value).encode(), headers=headers)


@dataclass(frozen=True)
class EventStream:
    """A ``text/event-stream`` answer: ``events`` framed under ``names``."""

    script: Script
    events: list[WireEvent]
    names: frozenset[str]
    headers: Headers = ()
    #: ``retry:`` sent with the first event (``None``: none).
    retry: int | None = None
    #: What a heartbeat is in this format (``None``: a ``: ping`` comment).
    keepalive: bytes | None = None


#: What a relayed answer's source opens: its status, its headers and its body's reads.
RelayedHead = tuple[int, Headers, AsyncIterator[bytes]]


@dataclass(frozen=True)
class Relayed:
    """An answer whose status, headers and body come from elsewhere, read by read (a
    recorded response replayed at its pace, a real server's response passed on): ``open``
    is awaited when the answer is sent. The body goes out chunked, through the connection's
    byte faults."""

    open: Callable[[], Awaitable[RelayedHead]]


Answer = Refusal | Payload | EventStream | Relayed


class Memory:
    """What a server keeps between requests for its dialects (the Responses API's background
    responses, read again by ``GET``): bounded, the oldest entry dropped past ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: dict[str, object] = {}

    def put(self, key: str, value: object) -> None:
        if key not in self._items and len(self._items) >= self.limit:
            self._items.pop(next(iter(self._items)))
        self._items[key] = value

    def get(self, key: str) -> object | None:
        return self._items.get(key)


def header(headers: tuple[tuple[str, str], ...] | list[tuple[str, str]], name: str) -> str | None:
    """The first value of header ``name`` (``headers`` have lower-case names)."""
    lname = name.lower()
    return next((v for k, v in headers if k == lname), None)


@dataclass(frozen=True)
class Call:
    """One request, as an answer function sees it."""

    method: str
    path: str
    query: str
    #: Lower-case names, in the order received.
    headers: Headers
    #: The decoded JSON body (``None``: none, or not JSON).
    body: Any
    #: The effective profile set (the request's, else the server's).
    names: frozenset[str]
    memory: Memory
    #: The route's path match (its groups are path parameters, e.g. a response id).
    match: re.Match[str] | None = None
    #: The content a test stated for this reply (:mod:`.plan`), said instead of the computed.
    scripted: ScriptedReply | None = None

    def header(self, name: str) -> str | None:
        return header(self.headers, name)

    def streamed(self) -> bool:
        """Whether the body asks for a stream (the ``json`` profile answers one object)."""
        body = self.body
        return isinstance(body, Mapping) and body.get("stream") is True and (
            "json" not in self.names
        )


def continuation_headers(prefix: str | None, script: Script) -> Headers:
    """For a continuation request (one that ends with a partial assistant message), the
    header that says whether it was continued (a new stream, ids restarting at 1, whose
    content follows the prefix; see :mod:`.script`) or ignored."""
    if prefix is None:
        return ()
    handled = "continued" if script.prefix is not None else "ignored"
    return ((CONTINUATION_HEADER.lower(), handled),)
