"""One TCP connection: the h11 state machine, a reader task, and fault-aware writing.

Why the I/O is shaped like this
-------------------------------
* **A reader task for the whole connection.** While a response streams, :meth:`Connection.reader`
  keeps reading the socket. A client that closes mid-stream is noticed at once, even while the
  writer sleeps in a drip or a stall; the disconnect is recorded with its detection time and the
  response is cancelled. Bytes a pipelining client sends early wait in the :class:`Inbox`.
* **Every write goes through** :meth:`Connection.send`, which applies ``write-size`` and
  ``write-pause``, and body bytes through :meth:`Connection.body`, which can cut a chunk at an
  exact byte (``drop-after``) or end it there and follow it with a chunk-size line that is
  not hex (``bad-chunk-after``). A drop raises :class:`Dropped`; the caller closes the socket
  without the chunked terminator.
* **Bounded.** Buffered input, body size and loop counts have limits, and a write the client
  does not take within the idle timeout ends the connection. Input goes to h11 in pieces of
  at most :data:`FEED_SIZE`, so the request body is the only copy of itself that grows.
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from http import HTTPStatus
from typing import Any, Literal

import anyio
import anyio.abc
import h11

from .faults import Faults
from .framing import framing_problem
from .records import DisconnectRecord, Records

__all__ = ["DEFAULT_MAX_BODY_BYTES", "ClientGone", "Connection", "Dropped", "Inbox"]

log = logging.getLogger("fluxstream.server")

#: Largest request body served by default (a 413 past it): far above a chat request, images
#: inlined as base64 included, and small enough that a few at once cost little.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
#: Input a connection may buffer beyond its body bound (a pipelined request's head, say).
INBOX_SLACK = 1024 * 1024
READ_SIZE = 64 * 1024
#: Most bytes handed to h11 at once: h11 copies what it is fed, and a body assembled from
#: small pieces never has a second full-size copy next to it.
FEED_SIZE = 4 * READ_SIZE
#: What ``bad-chunk-after`` writes where a chunk-size line belongs: not hex, so every HTTP
#: parser must refuse it (a real server's bug or a proxy's, seen mid-stream).
BAD_CHUNK = b"zz\r\n"
#: Most bytes of a request's start kept to check its framing: h11 refuses a head over 64 KiB,
#: and one feed may bring :data:`FEED_SIZE` bytes past it.
HEAD_BYTES = 64 * 1024 + FEED_SIZE
#: Statuses whose answer has no content (RFC 9110 15.3.5, 15.3.6, 15.4.5): a body given for
#: one (a ``status`` fault's error body) is not sent.
WITHOUT_CONTENT = frozenset({204, 205, 304})
#: Most reads a ``close-after`` connection takes (and ignores) before it closes anyway.
MAX_LINGER_READS = 10_000


class Dropped(Exception):
    """A drop fault fired: close the socket now, without the chunked terminator."""


class ClientGone(Exception):
    """A write failed because the client went away (already recorded)."""


class Inbox:
    """Bytes read by the reader task, waiting for h11; ``b""`` from :meth:`get` means EOF."""

    def __init__(self, limit: int) -> None:
        #: Most bytes buffered at once.
        self.limit = limit
        self._buffer = bytearray()
        self._eof = False
        self._wakeup: anyio.Event | None = None

    def put(self, data: bytes) -> bool:
        """Queue ``data``; ``False`` if the buffered input would exceed its bound."""
        if len(self._buffer) + len(data) > self.limit:
            return False
        self._buffer += data
        self._wake()
        return True

    def close(self) -> None:
        self._eof = True
        self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()
            self._wakeup = None

    async def wait(self) -> None:
        """Until there are bytes to get, or EOF."""
        while not self._buffer and not self._eof:
            self._wakeup = anyio.Event()
            await self._wakeup.wait()

    def discard(self) -> None:
        """Forget the buffered bytes (input that will never be answered)."""
        self._buffer.clear()

    @property
    def ended(self) -> bool:
        """The client closed (or the reader stopped): no more bytes will come."""
        return self._eof

    async def get(self) -> bytes:
        """Up to :data:`FEED_SIZE` buffered bytes (``b""``: EOF)."""
        await self.wait()
        data = bytes(self._buffer[:FEED_SIZE])
        del self._buffer[:FEED_SIZE]  # cheap: a bytearray drops its head without moving
        return data


class Connection:
    """Per-connection state: the h11 machine, counters, and the in-flight response."""

    def __init__(
        self,
        records: Records,
        stream: anyio.abc.SocketStream,
        cid: int,
        *,
        write_timeout: float | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self.records = records
        #: Largest request body read (a larger one is read to its end and dropped: a 413).
        self.max_body_bytes = max_body_bytes
        #: Seconds one ``send`` may wait for the client to take bytes (``None``: forever).
        self.write_timeout = write_timeout
        self.stream = stream
        self.id = cid
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
        self.inbox = Inbox(max_body_bytes + INBOX_SLACK)
        self.faults = Faults()
        self.wire_bytes = 0
        self.body_bytes = 0
        self.events = 0
        self.chunked = False
        self.request_seq: int | None = None
        #: Headers every answer to the current request carries (a stated rate limit).
        self.extra_headers: list[tuple[str, str]] = []
        self.completed = True
        #: Set once we start closing: read errors after that are not client disconnects.
        self.closing = False
        self.disconnected = False
        self.reset = False
        self.response_scope: anyio.CancelScope | None = None
        self.status = 0
        #: The raw bytes of the request being read, up to its head (``None``: not recording).
        self._head: bytearray | None = None

    def client_gone(self, reason: Literal["eof", "reset", "send-failed"]) -> None:
        """Record the client's disconnect (once) and cancel the response being written."""
        if self.disconnected or self.closing:
            return
        self.disconnected = True
        self.records.disconnects.append(
            DisconnectRecord(
                connection=self.id,
                request=self.request_seq,
                time=time.monotonic(),
                bytes_written=self.body_bytes,
                wire_bytes=self.wire_bytes,
                completed=self.completed,
                reason=reason,
            )
        )
        self.records.trim()
        if self.response_scope is not None:
            self.response_scope.cancel()

    async def reader(self) -> None:
        """Read the socket for the whole connection; notice the client going away at once."""
        while True:
            try:
                data = await self.stream.receive(READ_SIZE)
            except anyio.EndOfStream:
                self.client_gone("eof")
                break
            except (anyio.BrokenResourceError, OSError):
                self.client_gone("reset")
                break
            except anyio.ClosedResourceError:
                break
            if not self.inbox.put(data):
                log.warning("fluxstream server: connection %d sent too much input", self.id)
                self.closing = True
                if self.response_scope is not None:
                    self.response_scope.cancel()
                break
        self.inbox.close()

    async def next_event(self) -> Any:
        # Bounded: every round either returns or feeds new bytes (or EOF) to h11, and the
        # caller's idle timeout bounds the waiting.
        for _ in range(self.inbox.limit + 1):
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await self.inbox.get()
            if self._head is not None and len(self._head) < HEAD_BYTES:
                self._head += data
            self.h11.receive_data(data)
        raise h11.RemoteProtocolError("too many reads for one event")

    async def wait_for_request(self) -> None:
        """Until the next request's first bytes are here (or the client closed): time spent
        here is a keep-alive connection's idle time."""
        pending, closed = self.h11.trailing_data
        if not pending and not closed:
            await self.inbox.wait()

    async def read_request(self, body: bytearray) -> tuple[h11.Request | None, bool]:
        """The next request, its body appended to ``body``; ``True`` when the body was over
        :attr:`max_body_bytes` (then read to its end and dropped). A head whose framing two
        parsers could read two ways raises :class:`h11.RemoteProtocolError` with the status
        to refuse it with (see :mod:`.framing`), before any of its body is read."""
        event = await self._request_head()
        if not isinstance(event, h11.Request):
            return None, False
        too_big = False
        for _ in range(self.inbox.limit + 1):
            part = await self.next_event()
            if isinstance(part, h11.Data):
                if too_big or len(body) + len(part.data) > self.max_body_bytes:
                    too_big = True
                    body.clear()
                else:
                    body += part.data
            elif isinstance(part, h11.EndOfMessage):
                break
            else:
                return None, False
        return event, too_big

    async def _request_head(self) -> Any:
        """The next event, the bytes it was read from kept and checked by :func:`framing_problem`
        (first, also when h11 refused the head: its status for a coding it does not know is
        501, where a ``Transfer-Encoding`` not ending in ``chunked`` is a 400)."""
        self._head = bytearray(self.h11.trailing_data[0])
        try:
            event = await self.next_event()
        except h11.RemoteProtocolError as exc:
            problem = framing_problem(self._head)
            if problem is None:
                raise
            raise h11.RemoteProtocolError(problem[1], error_status_hint=problem[0]) from exc
        finally:
            head, self._head = self._head, None
        problem = framing_problem(head) if isinstance(event, h11.Request) else None
        if problem is not None:
            raise h11.RemoteProtocolError(problem[1], error_status_hint=problem[0])
        return event

    async def send(self, data: bytes) -> None:
        """Write ``data`` to the socket, split by the ``write-size`` fault."""
        size = self.faults.write_size or len(data) or 1
        pause = self.faults.write_pause
        for start in range(0, len(data), size):
            piece = data[start : start + size]
            try:
                # A client that stops reading fills the socket's buffers, and the send waits
                # for it: bounded, or it holds the connection for as long as it likes.
                with anyio.fail_after(self.write_timeout):
                    await self.stream.send(piece)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                # (TimeoutError, from fail_after, is an OSError.)
                self.client_gone("send-failed")
                raise ClientGone from None
            self.wire_bytes += len(piece)
            if pause:
                await anyio.sleep(pause)

    async def body(self, payload: bytes) -> None:
        """Write body bytes through h11, honouring ``drop-after`` and ``bad-chunk-after`` to
        the byte (the smaller one fires; ``drop-after`` on a tie)."""
        bad, drop = self.faults.bad_chunk_after, self.faults.drop_after
        if (
            bad is not None
            and (drop is None or bad < drop)
            and self.body_bytes + len(payload) > bad
        ):
            await self.bad_chunk(payload[: bad - self.body_bytes])
        framed = self.h11.send(h11.Data(data=payload)) or b""
        limit = self.faults.drop_after
        if limit is not None and self.body_bytes + len(payload) > limit:
            keep = limit - self.body_bytes
            head = framed.index(b"\r\n") + 2 if self.chunked else 0
            await self.send(framed[: head + keep])
            self.body_bytes += keep
            raise Dropped
        await self.send(framed)
        self.body_bytes += len(payload)

    async def end(self) -> None:
        limit = self.faults.drop_after
        if limit is not None and self.body_bytes >= limit:
            raise Dropped
        bad = self.faults.bad_chunk_after
        if bad is not None and self.body_bytes >= bad:
            await self.bad_chunk(b"")
        await self.send(self.h11.send(h11.EndOfMessage()) or b"")
        self.completed = True

    async def bad_chunk(self, data: bytes) -> None:
        """Write ``data`` as a well-formed chunk, then :data:`BAD_CHUNK`, and drop. Without
        chunked framing (a Content-Length body) there is no chunk to break: a plain cut."""
        framed = (self.h11.send(h11.Data(data=data)) or b"") if data else b""
        await self.send(framed + (BAD_CHUNK if self.chunked else b""))
        self.body_bytes += len(data)
        raise Dropped

    async def linger(self, seconds: float) -> None:
        """Keep the connection open ``seconds`` (``close-after``), or until the client closes.
        What it sends meanwhile (its next request, on a connection it believes kept alive) is
        read and ignored: the server closes without answering, as one that closes after each
        response does when the request crosses its close."""
        with anyio.move_on_after(seconds):
            for _ in range(MAX_LINGER_READS):
                await self.inbox.wait()
                if self.inbox.ended:
                    return
                self.inbox.discard()

    async def start(
        self,
        status: int,
        headers: list[tuple[str, str]],
        *,
        chunked: bool,
        close: bool = False,
    ) -> None:
        if self.faults.delay:
            await anyio.sleep(self.faults.delay)
        all_headers = [*headers, ("server", "fluxstream"), *self.extra_headers]
        if self.request_seq is not None:
            all_headers.append(("x-request-id", f"req_{self.request_seq}"))
        if chunked:
            all_headers.append(("transfer-encoding", "chunked"))
        if close:
            all_headers.append(("connection", "close"))
        try:
            reason = HTTPStatus(status).phrase.encode()
        except ValueError:
            reason = b""
        self.chunked = chunked
        self.status = status
        self.completed = False
        response = h11.Response(status_code=status, headers=all_headers, reason=reason)
        await self.send(self.h11.send(response) or b"")

    async def simple(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        extra: list[tuple[str, str]] | None = None,
        *,
        close: bool = False,
    ) -> None:
        if status in WITHOUT_CONTENT:
            body, content_type = b"", ""
        headers = [("content-type", content_type)] if content_type else []
        if status not in (204, 304):  # RFC 9110 8.6: neither sends a Content-Length
            headers.append(("content-length", str(len(body))))
        await self.start(status, [*headers, *(extra or [])], chunked=False, close=close)
        if body:
            await self.body(body)
        await self.end()

    async def drop_mid_event(self, data: bytes) -> None:
        """Write half of ``data`` inside a chunk announced at full size, then drop."""
        framed = self.h11.send(h11.Data(data=data)) or b""
        head = framed.index(b"\r\n") + 2
        half = len(data) // 2
        await self.send(framed[: head + half])
        self.body_bytes += half
        raise Dropped


def set_socket_options(stream: anyio.abc.SocketStream) -> None:
    try:
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (OSError, anyio.TypedAttributeLookupError):  # pragma: no cover - best effort
        pass


def set_reset_on_close(stream: anyio.abc.SocketStream) -> None:
    try:
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except (OSError, anyio.TypedAttributeLookupError):  # pragma: no cover - best effort
        pass
