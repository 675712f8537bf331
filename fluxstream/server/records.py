"""What the server saw: requests, responses and client disconnects, for tests to assert on.

Cancellation is only provable from the other end of the socket: a client that claims to have
stopped a stream must have closed its connection, and the server must have noticed. Each
connection runs a reader task next to the writer, so a close is detected at once even while the
writer sleeps (drip, stall); the detection time is taken from :func:`time.monotonic`, the same
clock the test process uses, so ``record.time - closed_at`` is a meaningful latency.

Records are appended from the server's event loop and may be read from any thread (the lists
only grow; appends are atomic), so they also work with :class:`~.runner.ServerThread`.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

__all__ = ["DisconnectRecord", "DisconnectWaits", "Records", "RequestRecord", "ResponseRecord"]

#: Seconds between two looks at the records while waiting.
POLL_INTERVAL = 0.002


@dataclass(frozen=True)
class RequestRecord:
    """One request, as received (the ``Authorization`` value is redacted)."""

    seq: int
    connection: int
    method: str
    path: str
    headers: list[tuple[str, str]]
    #: The parsed JSON body, or ``None`` if there was none or it was not JSON.
    json: Any
    body_bytes: int
    time: float
    profiles: tuple[str, ...] = ()
    faults: dict[str, str] = field(default_factory=dict)
    #: 1-based attempt number for this attempt key (see the ``fail-first`` fault).
    attempt: int = 1
    last_event_id: str | None = None

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or ``None``."""
        lname = name.lower()
        return next((v for k, v in self.headers if k == lname), None)


@dataclass(frozen=True)
class ResponseRecord:
    """How the server's answer to request ``request`` ended."""

    request: int
    connection: int
    status: int
    #: Body bytes written (the event stream or JSON, before chunked framing).
    body_bytes: int
    #: SSE events written (comments not counted).
    events: int
    #: ``complete``, ``dropped`` (a drop fault), ``client-disconnect``, ``shutdown``.
    ending: Literal["complete", "dropped", "client-disconnect", "shutdown"]
    time: float


@dataclass(frozen=True)
class DisconnectRecord:
    """The client closed (or reset) its connection; recorded the moment the server noticed."""

    connection: int
    #: The request being answered, or the last one on this connection (``None``: none yet).
    request: int | None
    #: :func:`time.monotonic` when the close was detected.
    time: float
    #: Body bytes of the current (or last) response written before the close.
    bytes_written: int
    #: All bytes written on this connection (headers and chunk framing included).
    wire_bytes: int
    #: Whether the current/last response had been written completely (False: mid-response).
    completed: bool
    #: ``eof`` (FIN seen by the reader), ``reset`` (read failed), ``send-failed`` (write failed).
    reason: Literal["eof", "reset", "send-failed"]


class DisconnectWaits(ABC):
    """Waiting for a disconnect record, written once for :class:`Records` and the servers
    that hold them (a test says ``server.wait_disconnect(...)``).

    The waits poll (every :data:`POLL_INTERVAL`) rather than wait on an event: a record is
    appended on the server's event loop and read from any thread and any event loop (asyncio
    or trio), which an event belonging to one loop could not serve. The record carries its
    detection time, so the polling interval does not distort latency measurements.
    """

    @abstractmethod
    def find_disconnect(
        self, *, request: int | None = None, completed: bool | None = None
    ) -> DisconnectRecord | None:
        """The first disconnect matching the filters, or ``None``."""

    async def wait_disconnect(
        self,
        timeout: float = 1.0,  # noqa: ASYNC109 - a plain number is the convenient test API
        *,
        request: int | None = None,
        completed: bool | None = None,
    ) -> DisconnectRecord:
        """Wait until a matching disconnect is recorded; ``TimeoutError`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            record = self._found_by(deadline, timeout, request, completed)
            if record is not None:
                return record
            await anyio.sleep(POLL_INTERVAL)

    def wait_disconnect_sync(
        self,
        timeout: float = 1.0,
        *,
        request: int | None = None,
        completed: bool | None = None,
    ) -> DisconnectRecord:
        """Blocking variant of :meth:`wait_disconnect` for synchronous tests."""
        deadline = time.monotonic() + timeout
        while True:
            record = self._found_by(deadline, timeout, request, completed)
            if record is not None:
                return record
            time.sleep(POLL_INTERVAL)

    def _found_by(
        self, deadline: float, timeout: float, request: int | None, completed: bool | None
    ) -> DisconnectRecord | None:
        """The matching record, ``None`` to look again, ``TimeoutError`` past ``deadline``."""
        record = self.find_disconnect(request=request, completed=completed)
        if record is None and time.monotonic() >= deadline:
            raise TimeoutError(f"no client disconnect recorded within {timeout} s")
        return record


class Records(DisconnectWaits):
    """Append-only logs of requests, responses and disconnects, readable by tests."""

    def __init__(self, limit: int | None = None) -> None:
        self.requests: list[RequestRecord] = []
        self.responses: list[ResponseRecord] = []
        self.disconnects: list[DisconnectRecord] = []
        self.connections: int = 0
        #: Records kept per list (``None``: all, for tests). A server that runs for long and
        #: that nobody inspects (``fluxstream serve``) keeps none: each request record holds
        #: its parsed body, up to 8 MiB, and an unbounded log grows with every request.
        self.limit = limit

    def trim(self) -> None:
        """Drop the oldest records beyond :attr:`limit` (called after each request)."""
        limit = self.limit
        if limit is None:
            return
        for records in (self.requests, self.responses, self.disconnects):
            if len(records) > limit:
                del records[: len(records) - limit]

    def clear(self) -> None:
        """Forget everything recorded so far (between test phases)."""
        self.requests.clear()
        self.responses.clear()
        self.disconnects.clear()

    def find_disconnect(
        self, *, request: int | None = None, completed: bool | None = None
    ) -> DisconnectRecord | None:
        """The first disconnect matching the filters, or ``None``."""
        for record in list(self.disconnects):
            if request is not None and record.request != request:
                continue
            if completed is not None and record.completed != completed:
                continue
            return record
        return None
