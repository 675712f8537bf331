"""The HTTP/1.1 server: the listener, its connections, and the :class:`Server` tests hold.

Why it is built this way
------------------------
* **h11 + anyio, no framework.** A framework would buffer, re-chunk and flush on its own terms;
  fault injection needs to decide the size of every ``send`` and the exact moment the socket
  closes (for example half an event inside a chunk, then a hard close with no terminator).
  h11 does the HTTP parsing and framing and nothing else (see :mod:`.connection`); anyio makes
  it run under asyncio and trio alike.
* **Content and timing are separate.** What is sent comes from the pure :mod:`.script`, the
  dialects' answer functions and renderers (:mod:`.dialect_table`); :mod:`.streaming` only
  adds timing and faults, so a ``Last-Event-ID`` resume or a retry sees exactly the same
  events.
* **One request's path through the server**: this module reads it off the connection,
  :mod:`.responder` validates and records it, :mod:`.dispatch` checks the key and a status
  fault and finds the route, the route's answer function decides the answer, and
  :mod:`.streaming` sends it.
* **Everything is bounded.** Requests per connection, body size, buffered input, idle time,
  every fault duration and every delta count have limits, and leaving :func:`serve` cancels all
  connections, so a misbehaving client or test can never hang the process.
* **Memory is bounded too** (``fluxstream serve`` is public): a body is at most
  ``max_body_bytes``, one that would decode to more than :data:`MAX_JSON_VALUES` values is
  refused before decoding (see :mod:`.request_body`), and at most ``max_connections`` are
  served at once (see :mod:`.slots` for why the next one waits).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import anyio.abc
import h11

from .answers import CONTINUATION_HEADER, Refusal
from .connection import (
    DEFAULT_MAX_BODY_BYTES,
    ClientGone,
    Connection,
    set_reset_on_close,
    set_socket_options,
)
from .dispatch import refuse
from .error_shapes import error_json
from .faults import build_faults, parse_fault_spec
from .plan import RequestPlan
from .profiles import parse_profiles
from .records import DisconnectRecord, DisconnectWaits, Records
from .render import MODELS
from .request_body import MAX_JSON_VALUES
from .responder import ATTEMPT_HEADER, FAULT_HEADER, PROFILE_HEADER, Responder
from .slots import DEFAULT_MAX_CONNECTIONS, Slots

__all__ = [
    "ATTEMPT_HEADER",
    "CONTINUATION_HEADER",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_CONNECTIONS",
    "FAULT_HEADER",
    "MAX_JSON_VALUES",
    "MODELS",
    "PROFILE_HEADER",
    "Server",
    "serve",
]

log = logging.getLogger("fluxstream.server")

MAX_REQUESTS_PER_CONNECTION = 10_000
DEFAULT_IDLE_TIMEOUT = 60.0


class Server(DisconnectWaits):
    """A running embedded server: where it listens and what it has recorded.

    Created by :func:`serve`; tests read :attr:`base_url` and :attr:`records`.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        profile: str | None = "openai",
        api_key: str | None = None,
        faults: str | Mapping[str, str] | None = None,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        record_limit: int | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        plan: RequestPlan | None = None,
    ) -> None:
        for name, value in (("max_body_bytes", max_body_bytes),
                            ("max_connections", max_connections)):
            if value.__class__ is not int or value < 1:
                raise ValueError(f"{name} must be a positive int, not {value!r}")
        self.host = host
        self.port = port
        self.profiles = parse_profiles(profile)
        self.api_key = api_key
        self.fault_spec = parse_fault_spec(faults)
        build_faults(self.fault_spec)  # validate now, not on the first request
        self.idle_timeout = idle_timeout
        self.max_body_bytes = max_body_bytes
        self.slots = Slots(max_connections)
        self.records = Records(limit=record_limit)
        #: Asked once per request for its faults, reply or answer (see :mod:`.plan`).
        self.plan = plan
        self._responder = Responder(self)
        self._connection_seq = 0

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no path)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: what an OpenAI-style client takes as ``base_url``."""
        return f"{self.url}/v1"

    def find_disconnect(
        self, *, request: int | None = None, completed: bool | None = None
    ) -> DisconnectRecord | None:
        """The first disconnect recorded that matches (see :meth:`Records.find_disconnect`)."""
        return self.records.find_disconnect(request=request, completed=completed)

    # -- connection handling -------------------------------------------------------------------

    async def _handle(self, stream: anyio.abc.SocketStream) -> None:
        """Serve one connection; never raises (an exception would stop the whole server)."""
        self._connection_seq += 1
        self.records.connections += 1
        conn = Connection(
            self.records, stream, self._connection_seq, write_timeout=self.idle_timeout,
            max_body_bytes=self.max_body_bytes,
        )
        set_socket_options(stream)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(conn.reader)
                try:
                    await self._serve_connection(conn)
                finally:
                    conn.closing = True
                    tg.cancel_scope.cancel()
        except Exception:  # pragma: no cover - defensive: log, close, keep serving
            log.exception("fluxstream server: connection %d failed", conn.id)
        finally:
            conn.closing = True
            if conn.reset:
                set_reset_on_close(stream)
            await anyio.aclose_forcefully(stream)
            self.slots.release()

    async def _serve_connection(self, conn: Connection) -> None:
        for served in range(MAX_REQUESTS_PER_CONNECTION):
            if served and not await self._idle(conn):
                return
            request: h11.Request | None = None
            too_big = False
            body = bytearray()
            with anyio.move_on_after(self.idle_timeout):  # a slow head or body (slowloris)
                try:
                    request, too_big = await conn.read_request(body)
                except h11.RemoteProtocolError as exc:
                    await self._send_protocol_error(conn, exc)
                    return
            if request is None:
                return
            if too_big:
                path = request.target.decode("latin-1").partition("?")[0]
                message = f"request body over {self.max_body_bytes} bytes"
                await refuse(conn, path, Refusal(413, message, close=True))
                return
            keep = await self._responder.respond(conn, request, body)
            if not keep or conn.disconnected:
                return
            if h11.MUST_CLOSE in (conn.h11.our_state, conn.h11.their_state):
                return
            if conn.faults.close_after is not None:
                await conn.linger(conn.faults.close_after)
                return
            try:
                conn.h11.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _idle(self, conn: Connection) -> bool:
        """Wait for the next request on a kept-alive connection; ``False`` (close it) after
        the idle timeout, or when a new connection needs its slot."""
        with anyio.move_on_after(self.idle_timeout) as scope, self.slots.idle(conn.id, scope):
            await conn.wait_for_request()
        return not scope.cancel_called

    async def _send_protocol_error(self, conn: Connection, exc: h11.RemoteProtocolError) -> None:
        if conn.h11.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        status = exc.error_status_hint or 400
        body = error_json(f"bad request: {exc}", "invalid_request_error")
        with suppress(ClientGone, h11.LocalProtocolError):
            await conn.simple(status, body, close=True)


#: Seconds the accept loop waits after a failed ``accept`` (no descriptor left, say).
ACCEPT_BACKOFF = 0.05


async def _accept_loop(
    listener: anyio.abc.SocketListener,
    handle: Callable[[anyio.abc.SocketStream], Coroutine[Any, Any, None]],
    tg: anyio.abc.TaskGroup,
    slots: Slots,
) -> None:
    """``Listener.serve`` that survives a failed ``accept``: anyio's lets the error out of its
    loop, so one ``EMFILE`` (a client that opens connections until the process has no file
    descriptor left) ended the whole server. It is logged, and accepting resumes after a
    pause (the queued connections wait in the kernel's backlog meanwhile). A connection is
    served once it has a slot (``max_connections``; ``handle`` releases it): until then no
    other is accepted."""
    while True:
        try:
            stream = await listener.accept()
        except OSError as exc:
            log.warning("fluxstream server: accept failed (%s); retrying", exc)
            await anyio.sleep(ACCEPT_BACKOFF)
            continue
        try:
            await slots.acquire()
        except BaseException:  # the server is closing
            await anyio.aclose_forcefully(stream)
            raise
        tg.start_soon(handle, stream)



@asynccontextmanager
async def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    profile: str | None = "openai",
    api_key: str | None = None,
    *,
    faults: str | Mapping[str, str] | None = None,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    record_limit: int | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    plan: RequestPlan | None = None,
) -> AsyncIterator[Server]:
    """Run the server in the current event loop (asyncio or trio) for the ``async with`` body.

    ``port=0`` picks a free port (see :attr:`Server.port`). Leaving the block closes the
    listener and cancels every connection, even ones in the middle of a stall.
    ``record_limit``: the records kept per list (default all; see :class:`Records`).
    ``max_body_bytes``: the largest request body served (a 413 with a JSON error past it).
    ``max_connections``: connections served at once; the next one waits until one ends
    (idle keep-alive connections are closed to make room; see :mod:`.slots`).
    ``plan``: asked once per request for its faults, scripted reply or answer (:mod:`.plan`).
    """
    server = Server(
        host=host,
        port=port,
        profile=profile,
        api_key=api_key,
        faults=faults,
        idle_timeout=idle_timeout,
        record_limit=record_limit,
        max_body_bytes=max_body_bytes,
        max_connections=max_connections,
        plan=plan,
    )
    listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    server.port = listener.extra(anyio.abc.SocketAttribute.local_port)
    # An exception from the ``async with`` body is re-raised after the task group has closed,
    # so callers (and pytest) see it as is, not wrapped in an ExceptionGroup.
    error: Exception | None = None
    try:
        async with anyio.create_task_group() as tg:
            for one in listener.listeners:
                if isinstance(one, anyio.abc.SocketListener):
                    tg.start_soon(_accept_loop, one, server._handle, tg, server.slots)
                else:  # pragma: no cover - create_tcp_listener makes socket listeners
                    tg.start_soon(one.serve, server._handle, tg)
            try:
                yield server
            except Exception as exc:
                error = exc
            finally:
                tg.cancel_scope.cancel()
    finally:
        await anyio.aclose_forcefully(listener)
    if error is not None:
        raise error
