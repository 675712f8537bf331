"""``EventStreamResponse``: a reply streamed to a browser, as an ASGI application.

The response is a plain ASGI callable (``await response(scope, receive, send)``), so it runs
under any ASGI server and inside any framework that hands a response the ASGI exchange:
Starlette and FastAPI call it as they call their own responses. It imports no framework;
when Starlette is loaded in the process (any Starlette or FastAPI app), each instance is
also a ``starlette.responses.Response`` (a subclass of both, made once), because FastAPI
returns an endpoint's value as the response only when it is one.

Three tasks share one response, and only for its duration: the pump (the source's next
event, encoded, sent), the watcher of the request's ``receive`` (``http.disconnect``: the
page left, so the source is cancelled at once -- a live stream closes its upstream request
synchronously -- and the pump is cancelled), and the ticker (a heartbeat when nothing was
sent for ``heartbeat`` seconds; the end of the response when one send has been pending for
``send_timeout`` seconds: a page that does not read holds one event and the server's write
buffer, never more). Nothing is added per event but a clock read: the ticker reads the
pump's bookkeeping instead of a cancel scope around every send.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
from pydantic_core import to_json

from ..errors import RelayError
from ..relay import ReplyLog
from ._encoding import SSE, Encoding, EventEncoder
from ._sources import Followed, Live, Opened, Refusal, Source

if TYPE_CHECKING:  # pragma: no cover
    from .._client import AsyncClient
    from .._stream import ReplyStream

__all__ = ["EventStreamResponse"]

logger = logging.getLogger("fluxstream.web")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class EventStreamResponse:
    """A reply streamed to a browser: an ASGI app, and a Starlette/FastAPI response.

    ``EventStreamResponse(stream)`` streams a live :class:`~fluxstream.ReplyStream` (opened
    by the response; before its head, so an upstream that refuses the request is a 502) and
    cancels it the moment the page leaves. :meth:`follow` streams a reply recorded in a
    :class:`~fluxstream.relay.ReplyLog`, from the request's ``Last-Event-ID`` on, so a
    reconnect or a reload continues exactly where it stopped.

    :param encoding: the wire protocol (default :class:`SSE`); see :class:`Encoding`.
    :param heartbeat: seconds without a byte sent after which a heartbeat is sent (proxies
        and load balancers cut connections idle for 30 to 60 s).
    :param send_timeout: seconds one send may wait for the page to read; past it the
        response ends (a live stream is cancelled; a follower reconnects and resumes).
    :param headers: more response headers.
    """

    #: The status of a response that streams (a refusal has its own).
    status_code = 200

    def __new__(cls, *args: Any, **kwargs: Any) -> EventStreamResponse:
        return super().__new__(_framework_class(cls))

    def __init__(
        self,
        stream: ReplyStream,
        *,
        encoding: Encoding | None = None,
        heartbeat: float = 15.0,
        send_timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._setup(Live(stream), encoding, heartbeat, send_timeout, headers)

    @classmethod
    def follow(
        cls,
        log: ReplyLog,
        key: str,
        *,
        takeover: AsyncClient | None = None,
        encoding: Encoding | None = None,
        heartbeat: float = 15.0,
        send_timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
    ) -> EventStreamResponse:
        """The reply recorded under ``key`` in ``log``, from the request's ``Last-Event-ID``
        on (see :meth:`~fluxstream.relay.ReplyLog.follow`; ``takeover``: an
        :class:`~fluxstream.AsyncClient` that resumes the reply if its producer died). The
        page leaving stops this follower only; :meth:`~fluxstream.relay.ReplyLog.cancel`
        stops the reply."""
        response = cls.__new__(cls)
        response._setup(Followed(log, key, takeover), encoding, heartbeat, send_timeout, headers)
        return response

    def _setup(
        self, source: Source, encoding: Encoding | None, heartbeat: float, send_timeout: float,
        headers: Mapping[str, str] | None,
    ) -> None:
        if not heartbeat > 0 or not send_timeout > 0:
            raise ValueError("heartbeat and send_timeout must be positive")
        self.source = source
        self.encoding: Encoding = SSE() if encoding is None else encoding
        self.heartbeat = heartbeat
        self.send_timeout = send_timeout
        self.media_type = self.encoding.media_type
        #: The response's headers as ASGI sends them (Starlette's ``set_cookie`` adds here).
        self.raw_headers: list[tuple[bytes, bytes]] = [
            (b"content-type", self.media_type.encode("latin-1"))]
        for name, value in (*self.encoding.headers, *(headers or {}).items()):
            self.raw_headers.append((name.lower().encode("latin-1"), value.encode("latin-1")))
        #: Run after the body, as Starlette runs a response's (FastAPI sets its
        #: ``BackgroundTasks`` here).
        self.background: Callable[[], Awaitable[None]] | None = None

    def __repr__(self) -> str:
        return f"<EventStreamResponse {type(self.source).__name__.lower()} {self.encoding!r}>"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            kind = scope.get("type")
            raise ValueError(f"EventStreamResponse answers HTTP requests, not {kind!r}")
        opened = await self.source.open(_last_event_id(scope))
        if isinstance(opened, Refusal):
            await _refuse(send, opened)
        else:
            try:
                await _Exchange(self, opened, receive, send).run()
            finally:
                with anyio.CancelScope(shield=True):
                    await opened.close()
        if self.background is not None:
            await self.background()


def _last_event_id(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"last-event-id":
            return bytes(value).decode("latin-1")
    return None


async def _refuse(send: Send, refusal: Refusal) -> None:
    """The status of a refusal, with a JSON body ``{"error", "message"}`` (none for 204)."""
    body = b"" if refusal.status == 204 else to_json(
        {"error": refusal.error, "message": refusal.message})
    headers = [(b"cache-control", b"no-store")]
    if body:
        headers.append((b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _Exchange:
    """One response's run: pump, watcher and ticker (see the module docstring)."""

    def __init__(
        self, response: EventStreamResponse, opened: Opened, receive: Receive, send: Send
    ) -> None:
        self.response = response
        self.opened = opened
        self.encoder: EventEncoder = response.encoding.encoder(opened.ids)
        self.receive = receive
        self._send = send
        #: ``time.monotonic()`` of the last send's end, and of the pending send's start.
        self.last_sent = time.monotonic()
        self.sending_since: float | None = None
        self._idle: anyio.Event | None = None  # set when a send ends, if someone waits
        self.ended_by: str | None = None

    async def run(self) -> None:
        response = self.response
        try:
            await self._send({"type": "http.response.start", "status": response.status_code,
                              "headers": response.raw_headers})
        except OSError:  # the page left before the head
            self.opened.cancel()
            return
        ended = False  # the source ended (not the page, a timeout or the relay)
        async with anyio.create_task_group() as tasks:
            self.scope = tasks.cancel_scope
            tasks.start_soon(self._watch)
            tasks.start_soon(self._tick)
            first = self.encoder.open()
            if first:
                await self.body(first)
            ended = await self._pump()
            tasks.cancel_scope.cancel()
        if ended and self.ended_by is None:
            with contextlib.suppress(OSError):  # the page left after the last event
                await self._send({"type": "http.response.body", "body": self.encoder.close()})

    async def _pump(self) -> bool:
        """Send every event; whether the source ended (not the page or the relay)."""
        encode = self.encoder.event
        try:
            async for item in self.opened.items:
                data = encode(item)
                if data:
                    await self.body(data)
        except RelayError as exc:  # the page reconnects with its Last-Event-ID
            logger.warning("fluxstream.web: following ended: %s", exc)
            return False
        return True

    async def body(self, data: bytes) -> None:
        """Send ``data`` as more of the body: one send at a time (the pump's and the
        ticker's never interleave), its start and end noted for the ticker."""
        while self.sending_since is not None:
            idle = self._idle
            if idle is None:
                idle = self._idle = anyio.Event()
            await idle.wait()
        self.sending_since = time.monotonic()
        try:
            await self._send({"type": "http.response.body", "body": data, "more_body": True})
        except OSError:
            # The page left before the server told ``receive``: ASGI servers raise an
            # ``OSError`` for a send on a closed connection. The same end as a disconnect.
            self._stop("disconnect")
            await anyio.lowlevel.checkpoint()  # the cancelled scope ends this task here
        finally:
            self.sending_since = None
            self.last_sent = time.monotonic()
            idle = self._idle
            if idle is not None:
                self._idle = None
                idle.set()

    def _stop(self, why: str) -> None:
        if self.ended_by is None:
            self.ended_by = why
        self.opened.cancel()
        self.scope.cancel()

    async def _watch(self) -> None:
        """The page left (``http.disconnect``): stop at once."""
        while True:
            message = await self.receive()
            if message.get("type") == "http.disconnect":
                self._stop("disconnect")
                return

    async def _tick(self) -> None:
        """Heartbeats while idle; the end when one send waited past ``send_timeout``."""
        beat, limit = self.response.heartbeat, self.response.send_timeout
        while True:
            now = time.monotonic()
            started = self.sending_since
            if started is not None:
                if now - started >= limit:
                    logger.info("fluxstream.web: a send waited %.1f s: the page is not "
                                "reading; the response ends", now - started)
                    self._stop("send timeout")
                    return
                await anyio.sleep(started + limit - now)
            elif now - self.last_sent >= beat:
                with anyio.move_on_after(limit) as waited:
                    await self.body(self.encoder.heartbeat())
                if waited.cancelled_caught:
                    self._stop("send timeout")
                    return
            else:
                await anyio.sleep(min(self.last_sent + beat - now, limit))


_FRAMEWORK_CLASSES: dict[type, type] = {}


def _framework_class(cls: type) -> type:
    """``cls``, or once Starlette is loaded, a subclass of ``cls`` and Starlette's
    ``Response`` (made once per class): FastAPI sends an endpoint's value as it is only
    when it is a Starlette response. Nothing of Starlette's runs: every method it calls is
    this class's (ASGI ``__call__``, ``background``, ``raw_headers``)."""
    starlette = sys.modules.get("starlette.responses")
    if starlette is None:
        return cls
    made = _FRAMEWORK_CLASSES.get(cls)
    if made is None:
        made = _FRAMEWORK_CLASSES[cls] = type(cls.__name__, (cls, starlette.Response), {
            "__module__": cls.__module__, "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
        })
    return made
